"""Slurm: parse `sinfo`, `scontrol -o show node|job` and `squeue` output, and run those commands.

Parsers are pure functions of text (tested on output captured from Slurm 22.05). :class:`SlurmRunner` runs the
client commands with the cluster's SLURM_CONF and turns failures into BackendError.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from gpufleet.errors import BackendError, DependencyMissingError, ParseError, UserError

# --- hostlists ---------------------------------------------------------------------------------------------------

_HOST_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[^\]]+)\](?P<suffix>.*)$")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets and parentheses: 'gpu-[01,03],cpu-1' -> ['gpu-[01,03]', 'cpu-1']."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return [p for p in (s.strip() for s in out) if p]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax: 'gpu-[01-03,07],login1' -> ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07', 'login1']."""
    text = text.strip()
    if text in ("", "(null)", "None"):
        return []
    hosts: list[str] = []
    for part in _split_top(text):
        m = _HOST_RANGE.match(part)
        if not m:
            hosts.append(part)
            continue
        for item in m.group("body").split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ParseError(f"bad hostlist range {item!r} in {text!r}")
            width = len(lo)
            for k in range(int(lo), int(hi or lo) + 1):
                for host in expand_hostlist(f"{m.group('prefix')}{k:0{width}d}{m.group('suffix')}"):
                    hosts.append(host)
    return hosts


def expand_index_list(text: str) -> list[int]:
    """'0-1,4' -> [0, 1, 4]; 'N/A' -> []."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item or item == "N/A":
            continue
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ParseError(f"bad index list {text!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# --- GRES --------------------------------------------------------------------------------------------------------

_GRES = re.compile(
    r"^(?:gres[:/])?(?P<name>[A-Za-z0-9_]+)(?::(?P<type>[A-Za-z0-9_.-]+))?:(?P<count>\d+)(?:\((?P<extra>[^)]*)\))?$"
)


@dataclass(frozen=True, slots=True)
class Gres:
    name: str  # gpu
    type: str | None  # h100, or None when the GRES has no type
    count: int
    indices: tuple[int, ...] = ()  # from (IDX:0-1) in GresUsed / job GRES

    def __str__(self) -> str:
        return f"{self.name}:{self.type}:{self.count}" if self.type else f"{self.name}:{self.count}"


def parse_gres(text: str) -> list[Gres]:
    """'gpu:h100:8', 'gpu:h100:2(IDX:0-1)', 'gres:gpu:h100:2', 'gpu:8(S:0-1),nvme:1', '(null)' -> list of Gres.

    A bare 'gpu' (count omitted, as in a request) means one."""
    text = text.strip()
    if text in ("", "(null)", "N/A", "none"):
        return []
    out = []
    for part in _split_top(text):
        if re.fullmatch(r"(?:gres[:/])?[A-Za-z0-9_]+(?::[A-Za-z0-9_.-]+)?", part) and not part[-1].isdigit():
            part = f"{part}:1"
        m = _GRES.match(part)
        if not m:
            raise ParseError(f"cannot read GRES {part!r}", fix="expected name[:type]:count, e.g. gpu:h100:8")
        indices: tuple[int, ...] = ()
        extra = m.group("extra") or ""
        if extra.startswith("IDX:"):
            indices = tuple(expand_index_list(extra[4:]))
        out.append(Gres(m.group("name"), m.group("type"), int(m.group("count")), indices))
    return out


def gpu_count(gres: list[Gres], gpu_type: str | None = None) -> int:
    return sum(g.count for g in gres if g.name == "gpu" and (gpu_type is None or g.type == gpu_type))


# --- node state --------------------------------------------------------------------------------------------------

# Flags under which a node takes no new work. Base states DOWN, FUTURE and UNKNOWN count as well.
_OUT_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                        "POWERED_DOWN", "POWERING_DOWN", "MAINTENANCE", "NOT_RESPONDING", "INVALID_REG"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class NodeState:
    """`State=IDLE+DRAIN` from scontrol, or sinfo's long form (`drained`, `down*`): a base state and flags."""

    base: str  # IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> NodeState:
        text = text.strip().upper()
        if not text:
            raise ParseError("empty node state")
        flags: set[str] = set()
        if text.endswith("*"):  # sinfo: not responding
            flags.add("NOT_RESPONDING")
            text = text.rstrip("*")
        parts = text.split("+")
        base = parts[0]
        flags |= set(parts[1:])
        long_forms = {"DRAINED": ("IDLE", "DRAIN"), "DRAINING": ("ALLOCATED", "DRAIN"), "DRAIN": ("IDLE", "DRAIN"),
                      "DRNG": ("ALLOCATED", "DRAIN"), "MIX": ("MIXED", ""), "ALLOC": ("ALLOCATED", ""),
                      "REBOOT": ("IDLE", "REBOOT_REQUESTED")}  # fmt: skip
        if base in long_forms:
            base, flag = long_forms[base]
            if flag:
                flags.add(flag)
        return cls(base, frozenset(flags))

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def available(self) -> bool:
        return self.base not in ("DOWN", "FUTURE", "UNKNOWN") and not (self.flags & _OUT_FLAGS)

    def __str__(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])


# --- scontrol -o -----------------------------------------------------------------------------------------------

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_/:]*=")


def parse_kv_record(line: str) -> dict[str, str]:
    """One `scontrol -o show ...` record -> {key: value}. Values with spaces (OS=Linux 6.1 ..., Reason=...) keep
    them: a token that is not `Key=` continues the previous value. Reason is the last field and takes the rest."""
    out: dict[str, str] = {}
    key: str | None = None
    tokens = line.strip().split(" ")
    for k, tok in enumerate(tokens):
        if key == "Reason":
            out[key] = " ".join([out[key], *tokens[k:]]).strip()
            break
        m = _KEY.match(tok)
        if m:
            key = m.group(0)[:-1]
            out[key] = tok[m.end() :]
        elif key is not None:
            out[key] = f"{out[key]} {tok}".rstrip() if tok else out[key]
    return {k: v.strip() for k, v in out.items()}


@dataclass(slots=True)
class SlurmNode:
    name: str
    state: NodeState
    gres: list[Gres] = field(default_factory=list)
    gres_used: list[Gres] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    reason: str = ""
    cpus: int = 0
    memory_mib: int = 0

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)

    @property
    def gpus_used(self) -> int:
        return gpu_count(self.gres_used)

    def feature(self, key: str) -> str:
        """'rack' -> 'r1' for a feature written rack:r1 (or rack=r1)."""
        for f in self.features:
            for sep in (":", "="):
                k, s, v = f.partition(sep)
                if s and k == key:
                    return v
        return ""


def _list(value: str) -> list[str]:
    return [] if value in ("", "(null)", "N/A") else [v for v in value.split(",") if v]


def _int(value: str) -> int:
    m = re.match(r"\d+", value or "")
    return int(m.group(0)) if m else 0


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """`scontrol -o [-d] show node` output: one node per line."""
    nodes = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = parse_kv_record(line)
        if "NodeName" not in rec or "State" not in rec:
            raise ParseError(f"scontrol node output line {lineno} has no NodeName/State: {line[:80]!r}")
        reason = rec.get("Reason", "")
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)  # drop the trailing [user@time]
        nodes.append(
            SlurmNode(
                name=rec["NodeName"],
                state=NodeState.parse(rec["State"]),
                gres=parse_gres(rec.get("Gres", "")),
                gres_used=parse_gres(rec.get("GresUsed", "")),
                features=_list(rec.get("ActiveFeatures", rec.get("AvailableFeatures", ""))),
                partitions=_list(rec.get("Partitions", "")),
                reason="" if reason in ("(null)", "none") else reason,
                cpus=_int(rec.get("CPUTot", "")),
                memory_mib=_int(rec.get("RealMemory", "")),
            )
        )
    return nodes


@dataclass(slots=True)
class SlurmJob:
    job_id: str
    name: str
    state: str  # PENDING, RUNNING, ...
    reason: str
    nodes: list[str]
    excluded: list[str]
    restarts: int
    gres: list[Gres]  # per node, from TresPerNode
    requeue: bool


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """`scontrol -o show job` output: one job per line."""
    jobs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("No jobs in the system"):
            continue
        rec = parse_kv_record(line.replace(" Reason=", " JobReason=", 1))
        if "JobId" not in rec or "JobState" not in rec:
            raise ParseError(f"scontrol job output line {lineno} has no JobId/JobState: {line[:80]!r}")
        jobs.append(
            SlurmJob(
                job_id=rec["JobId"],
                name=rec.get("JobName", ""),
                state=rec["JobState"],
                reason=rec.get("JobReason", ""),
                nodes=expand_hostlist(rec.get("NodeList", "")),
                excluded=expand_hostlist(rec.get("ExcNodeList", "")),
                restarts=_int(rec.get("Restarts", "0")),
                gres=parse_gres(rec.get("TresPerNode", "")),
                requeue=rec.get("Requeue", "0") == "1",
            )
        )
    return jobs


# --- sinfo / squeue ----------------------------------------------------------------------------------------------

SINFO_FIELDS = ("NodeList", "Gres", "GresUsed", "StateLong", "Reason", "Features", "Partition")
SINFO_ARGS = ("sinfo", "-N", "-h", "-O", ",".join(f"{f}:|" for f in SINFO_FIELDS))


@dataclass(slots=True)
class SinfoRow:
    node: str
    gres: list[Gres]
    gres_used: list[Gres]
    state: NodeState
    reason: str
    features: list[str]
    partition: str


def parse_sinfo(text: str) -> list[SinfoRow]:
    """Output of :data:`SINFO_ARGS` (`sinfo -N -h -O NodeList:|,Gres:|,...`): one node per line, '|'-separated.
    A node in several partitions appears once per partition."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < len(SINFO_FIELDS):
            raise ParseError(f"sinfo line {lineno}: expected {len(SINFO_FIELDS)} '|'-separated fields: {line[:80]!r}")
        node, gres, used, state, reason, features, partition = cols[: len(SINFO_FIELDS)]
        rows.append(
            SinfoRow(
                node=node,
                gres=parse_gres(gres),
                gres_used=parse_gres(used),
                state=NodeState.parse(state),
                reason="" if reason == "none" else reason,
                features=_list(features),
                partition=partition.rstrip("*"),
            )
        )
    return rows


SQUEUE_ARGS = ("squeue", "-h", "-o", "%i|%j|%T|%N|%b|%r")


@dataclass(slots=True)
class SqueueRow:
    job_id: str
    name: str
    state: str
    nodes: list[str]
    gres: list[Gres]
    reason: str


def parse_squeue(text: str) -> list[SqueueRow]:
    """Output of :data:`SQUEUE_ARGS`: `%i|%j|%T|%N|%b|%r` (job id, name, state, nodes, GRES per node, reason)."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != 6:
            raise ParseError(f"squeue line {lineno}: expected 6 '|'-separated fields: {line[:80]!r}")
        job_id, name, state, nodes, gres, reason = (c.strip() for c in cols)
        rows.append(SqueueRow(job_id, name, state, expand_hostlist(nodes), parse_gres(gres), reason))
    return rows


# --- running the client commands ---------------------------------------------------------------------------------


class SlurmRunner:
    """Runs Slurm client commands (scontrol, sinfo, squeue, sbatch) against one cluster."""

    def __init__(self, slurm_conf: str | None = None, timeout_s: float = 30.0) -> None:
        self.slurm_conf = slurm_conf or os.environ.get("SLURM_CONF")
        self.timeout_s = timeout_s

    def run(self, args: list[str] | tuple[str, ...], *, stdin: str | None = None) -> str:
        proc = self._run(args, stdin=stdin, timeout_s=self.timeout_s)
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout).strip().splitlines()
            raise BackendError(f"`{' '.join(args)}` failed: {err[-1] if err else f'exit {proc.returncode}'}")
        return proc.stdout

    def step(self, args: list[str] | tuple[str, ...], *, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """Run a command whose failure is an answer (an `srun` test step): its exit code and output, not an error."""
        return self._run(args, stdin=None, timeout_s=timeout_s)

    def _run(
        self, args: list[str] | tuple[str, ...], *, stdin: str | None, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        conf = self.slurm_conf or "/etc/slurm/slurm.conf"
        if not os.path.exists(conf):  # else the client falls back to DNS SRV lookups and hangs, then fails
            raise UserError(f"no Slurm configuration at {conf}", fix="set SLURM_CONF to the cluster's slurm.conf")
        tool = args[0]
        if shutil.which(tool) is None:
            raise DependencyMissingError(f"{tool} not found", fix="install the Slurm client (package slurm-client)")
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        try:
            return subprocess.run(
                list(args), input=stdin, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            raise BackendError(f"`{' '.join(args)}` timed out after {timeout_s:g}s") from None

    def nodes(self, name: str | None = None) -> list[SlurmNode]:
        args = ["scontrol", "-o", "-d", "show", "node"] + ([name] if name else [])
        return parse_scontrol_nodes(self.run(args))

    def node(self, name: str) -> SlurmNode:
        found = self.nodes(name)
        if not found:
            raise BackendError(f"Slurm has no node {name!r}")
        return found[0]

    def jobs(self, job_id: str | None = None) -> list[SlurmJob]:
        args = ["scontrol", "-o", "show", "job"] + ([job_id] if job_id else [])
        return parse_scontrol_jobs(self.run(args))

    def sinfo(self) -> list[SinfoRow]:
        return parse_sinfo(self.run(SINFO_ARGS))

    def squeue(self) -> list[SqueueRow]:
        return parse_squeue(self.run(SQUEUE_ARGS))
