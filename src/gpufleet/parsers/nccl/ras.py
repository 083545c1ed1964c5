"""NCCL's RAS status report: what `ncclras` (or `echo status | nc localhost 28028`) prints, NCCL 2.24 and later.

Grounded in NVIDIA/nccl src/ras/client_support.cc (v2.24.3-1 .. v2.30.7-1) and docs/userguide/source/
troubleshooting/ras.rst. The text report is, in order:

- `NCCL version 2.26.2 compiled with CUDA 12.6` and `CUDA runtime version 12060, driver version 12060`;
- `Job summary` / `===========`: one table of nodes, processes per node, GPUs per process (and totals), or, when
  nodes differ, a table per shape, the totals, and `The outlier node(s):` / `  Node H running process(es) P,Q`;
- `Communicators... (0.00s)` / `=============`, then `Group  Comms  Nodes  Ranks  Ranks  Ranks  Status  Errors` with
  one row per group of like communicators (status NOCOMM, INIT, RUNNING, FINALIZE or ABORT; errors OK, MISMATCH,
  ERROR, INCOMPLETE or their combinations);
- `Errors` / `======`: `INCOMPLETE` (`Missing communicator data from N job process(es)`, then `Process P on node H
  managing GPU(s) G`), `DEAD` (`N job process(es) ... considered dead (unreachable via the RAS network)`, the same
  process lines), per communicator `#G-C (hash) INCOMPLETE` (`Missing communicator data from N rank(s)`, then
  `Rank R -- GPU G managed by process P on node H`, or in 2.24-2.25 `The missing rank(s): 1,2`) and `#G-C (hash)
  ERROR` (`Initialization error(s) on N rank(s)` / `Asynchronous error(s) on N rank(s)`, `N ranks reported <error>`
  and the ranks);
- `Warnings` / `========`: `TIMEOUT` (`Encountered N communication timeout(s) while gathering communicator data`) and
  `#G-C (hash) MISMATCH` (`Communicator ranks have different status` or `... different [AllReduce ]operation counts`
  (per collective since 2.26), `N ranks have status S` / `N ranks have launched up to operation K` and the outliers'
  rank lines, which may carry their own value: `Rank R has launched up to operation K -- GPU ...`).

Monitor mode (2.29+, `ncclras -m`) prints `[2025-12-19 13:07:07] PEER_DEAD: Process P on node H managing GPU G`.
The JSON form (2.28.7+, `ncclras -f json`) holds the same facts per rank: `missing_ranks` with `unresponsive` and
`considered_dead`, each rank's `init_state` and `async_error` (ncclResult_t codes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError

VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+)\S*(?: compiled with CUDA (\S+))?")
SECTION = re.compile(r"^(?:(Job summary|Errors|Warnings)|(Communicators)\.\.\.(?:\s*\(\d+\.\d+s\))?)\s*$")
GROUP_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+(NOCOMM|INIT|RUNNING|FINALIZE|ABORT|UNKNOWN)\s+"
    r"((?:OK|MISMATCH|ERROR|INCOMPLETE)(?:,(?:MISMATCH|ERROR|INCOMPLETE))*)\s*$"
)
COMM_HEAD = re.compile(r"^#(\d+)-(\d+) \(([0-9a-f]+)\) (INCOMPLETE|ERROR|MISMATCH)\s*$")
PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? (.+?)\s*$")
RANK = re.compile(
    r"^\s*Rank (\d+)(?: (?:has status (\w+)|has launched up to operation (\d+)|has not launched any operations"
    r"|reported (.+?)))? -- (?:GPU (.+?) managed by process (\d+) on node (\S+)|\[process information not found\])"
)
COUNT_LINE = re.compile(
    r"^\s*(\d+) ranks (?:have status (\w+)|have launched up to operation (\d+)|have not launched any operations"
    r"|reported (.+?))\s*$"
)
MISSING_LIST = re.compile(r"^\s*The (?:missing|unknown) ranks?: ([\d, ]+)")
MISMATCH_KIND = re.compile(r"^\s*Communicator ranks have different (status|(\w+ )?(?:collective )?operation counts)")
ERROR_KIND = re.compile(r"^\s*(Initialization|Asynchronous) errors? on (\d+) ranks?")
INCOMPLETE_JOB = re.compile(r"^\s*Missing communicator data from (\d+) job process")
INCOMPLETE_COMM = re.compile(r"^\s*Missing communicator data from (\d+) ranks?")
DEAD_COUNT = re.compile(r"^\s*(\d+) job process(?:es are| is) considered dead")
TIMEOUTS = re.compile(r"^\s*Encountered (\d+) communication timeouts?")
MONITOR = re.compile(r"^\[([\d-]+ [\d:]+)\] (PEER_\w+|[A-Z_]+): (?:Process (\d+) on node (\S+) managing GPUs? (\S+))?")
SUMMARY_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)(?:\s+(\d+)\s+(\d+))?\s*$")
OUTLIER_NODE = re.compile(r"^\s*Node (\S+) running process(?:es)? ([\d,]+)")
MAX_ITEMS = 10_000  # ranks or processes kept per section: a 100k-GPU job lists outliers only anyway


@dataclass(frozen=True, slots=True)
class RasProcess:
    pid: int
    node: str
    gpus: str  # as printed: "5", "0,1 (NVML 2,3)"


@dataclass(slots=True)
class RasRank:
    rank: int
    gpu: str | None = None
    pid: int | None = None
    node: str | None = None
    value: str | None = None  # the status, operation count or error this rank line gives, if it gives one


@dataclass(slots=True)
class RasValueGroup:
    """`30 ranks have launched up to operation 640` and the rank lines printed under it."""

    count: int
    value: str  # "640", "none" (not launched any), a status, or an error
    ranks: list[RasRank] = field(default_factory=list)


@dataclass(slots=True)
class RasCommIssue:
    group: int
    comm: int
    hash: str
    kind: str  # INCOMPLETE, ERROR, MISMATCH
    detail: str = ""  # what differs ("status", "AllGather operation counts"), the error kind, the missing count
    count: int | None = None
    groups: list[RasValueGroup] = field(default_factory=list)
    ranks: list[RasRank] = field(default_factory=list)  # missing ranks (INCOMPLETE)
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"#{self.group}-{self.comm} ({self.hash})"


@dataclass(slots=True)
class RasCommGroup:
    group: int
    comms: int
    nodes: int
    ranks_per_node: str
    ranks_per_comm: int
    ranks_in_group: int
    status: str
    errors: tuple[str, ...]


@dataclass(slots=True)
class RasEvent:
    """A monitor-mode line: `[time] PEER_DEAD: Process P on node H managing GPU G`."""

    time: str
    event: str
    process: RasProcess | None
    line: str


@dataclass(slots=True)
class RasStatus:
    nccl_version: str | None = None
    cuda: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    outlier_nodes: list[tuple[str, str]] = field(default_factory=list)  # (node, its pids)
    groups: list[RasCommGroup] = field(default_factory=list)
    missing_processes: list[RasProcess] = field(default_factory=list)
    missing_process_count: int | None = None
    dead_processes: list[RasProcess] = field(default_factory=list)
    dead_count: int | None = None
    issues: list[RasCommIssue] = field(default_factory=list)
    timeouts: int = 0
    events: list[RasEvent] = field(default_factory=list)
    sections: set[str] = field(default_factory=set)  # which of the report's sections the text holds
    form: str = "text"  # text, monitor or json


def _rank(m: re.Match[str]) -> RasRank:
    value = m.group(2) or m.group(3) or m.group(4)
    if value is None and "has not launched" in m.group(0):
        value = "none"
    pid = int(m.group(6)) if m.group(6) else None
    return RasRank(int(m.group(1)), m.group(5), pid, m.group(7), value)


class _Reader:
    def __init__(self) -> None:
        self.out = RasStatus()
        self.section = ""
        self.block = ""  # INCOMPLETE / DEAD (job level) or the issue being read
        self.issue: RasCommIssue | None = None

    def line(self, raw: str) -> None:
        s = raw.rstrip()
        if not s.strip() or set(s.strip()) == {"="}:
            return
        out = self.out
        if m := VERSION.match(s.strip()):
            out.nccl_version, out.cuda = m.group(1), m.group(2)
            return
        if m := SECTION.match(s.strip()):
            self.section = m.group(1) or m.group(2)
            out.sections.add(self.section)
            self.block, self.issue = "", None
            return
        if m := MONITOR.match(s.strip()):
            out.form = "monitor"
            proc = RasProcess(int(m.group(3)), m.group(4), m.group(5)) if m.group(3) else None
            if len(out.events) < MAX_ITEMS:
                out.events.append(RasEvent(m.group(1), m.group(2), proc, s.strip()))
            return
        if self.section == "Job summary":
            self._summary(s)
        elif self.section == "Communicators":
            if m := GROUP_ROW.match(s):
                g = m.groups()
                out.groups.append(RasCommGroup(int(g[0]), int(g[1]), int(g[2]), g[3], int(g[4]), int(g[5]), g[6],
                                               tuple(g[7].split(","))))  # fmt: skip
        elif self.section in ("Errors", "Warnings"):
            self._problems(s)

    def _summary(self, s: str) -> None:
        out = self.out
        if m := OUTLIER_NODE.match(s):
            out.outlier_nodes.append((m.group(1), m.group(2)))
        elif m := SUMMARY_ROW.match(s):
            nums = [int(x) for x in m.groups() if x is not None]
            if len(nums) == 5:  # one shape: nodes, processes/node, GPUs/process, processes, GPUs
                out.nodes, out.processes, out.gpus = nums[0], nums[3], nums[4]
            elif len(nums) == 3 and self.block == "totals":
                out.nodes, out.processes, out.gpus = nums
        elif "(total)" in s and "per node" not in s:
            self.block = "totals"  # the totals table under the per-shape tables

    def _problems(self, s: str) -> None:
        out = self.out
        text = s.strip()
        if m := COMM_HEAD.match(text):
            self.issue = RasCommIssue(int(m.group(1)), int(m.group(2)), m.group(3), m.group(4))
            out.issues.append(self.issue)
            self.block = "comm"
            return
        if text in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            self.block, self.issue = text, None
            return
        if self.issue is not None:
            self._issue_line(self.issue, s)
            return
        if self.block == "INCOMPLETE":
            if m := INCOMPLETE_JOB.match(s):
                out.missing_process_count = int(m.group(1))
            elif (m := PROCESS.match(s)) and len(out.missing_processes) < MAX_ITEMS:
                out.missing_processes.append(RasProcess(int(m.group(1)), m.group(2), m.group(3)))
        elif self.block == "DEAD":
            if m := DEAD_COUNT.match(s):
                out.dead_count = int(m.group(1))
            elif (m := PROCESS.match(s)) and len(out.dead_processes) < MAX_ITEMS:
                out.dead_processes.append(RasProcess(int(m.group(1)), m.group(2), m.group(3)))
        elif self.block == "TIMEOUT" and (m := TIMEOUTS.match(s)):
            out.timeouts += int(m.group(1))

    def _issue_line(self, issue: RasCommIssue, s: str) -> None:
        if len(issue.lines) < MAX_ITEMS:
            issue.lines.append(s.strip())
        if m := MISMATCH_KIND.match(s):
            issue.detail = m.group(1)
        elif m := ERROR_KIND.match(s):
            issue.detail = f"{m.group(1).lower()} error"
            issue.count = int(m.group(2))
        elif m := INCOMPLETE_COMM.match(s):
            issue.detail, issue.count = "missing", int(m.group(1))
        elif m := MISSING_LIST.match(s):
            issue.ranks.extend(RasRank(int(r)) for r in re.findall(r"\d+", m.group(1))[:MAX_ITEMS])
        elif m := COUNT_LINE.match(s):
            value = m.group(2) or m.group(3) or m.group(4) or "none"
            issue.groups.append(RasValueGroup(int(m.group(1)), value))
        elif m := RANK.match(s):
            rank = _rank(m)
            if issue.kind == "INCOMPLETE":
                issue.ranks.append(rank)
            elif rank.value is not None:  # an outlier of its own: a group of one
                issue.groups.append(RasValueGroup(1, rank.value, [rank]))
            elif issue.groups:
                issue.groups[-1].ranks.append(rank)


def parse_ras_status(text: str) -> RasStatus:
    """Read a RAS report (text, monitor lines or JSON); a ParseError when the text holds none."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"communicators"' in stripped[:4096]:
        return _parse_json(stripped)
    reader = _Reader()
    for line in text.splitlines():
        reader.line(line)
    out = reader.out
    if not (out.sections or out.events):
        raise ParseError(
            "no NCCL RAS report found",
            fix="pass what `ncclras` (or `echo status | nc localhost 28028`) printed, from `Job summary` on",
        )
    return out


# ncclResult_t (src/nccl.h.in): the codes a JSON report's init_state / async_error hold
NCCL_RESULTS = {0: "Success", 1: "Unhandled CUDA error", 2: "System error", 3: "Internal error",
                4: "Invalid argument", 5: "Invalid usage", 6: "Remote process error", 7: "In progress",
                8: "Timeout"}  # fmt: skip


def _parse_json(text: str) -> RasStatus:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"the RAS JSON report does not parse: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("communicators"), list):
        raise ParseError("no NCCL RAS report found", fix="pass what `ncclras -f json` printed")
    out = RasStatus(nccl_version=str(data.get("nccl_version") or "") or None, form="json")
    out.sections.update(("Communicators", "Errors", "Warnings"))
    ras = data.get("ras")
    out.timeouts = int(ras.get("timeouts_count") or 0) if isinstance(ras, dict) else 0
    for index, comm in enumerate(c for c in data["communicators"] if isinstance(c, dict)):
        name_hash = str(comm.get("hash", "")).removeprefix("0x")
        missing = [r for r in comm.get("missing_ranks") or [] if isinstance(r, dict)]
        dead = [r for r in missing if (r.get("status") or {}).get("considered_dead")]
        if missing:
            issue = RasCommIssue(0, index, name_hash, "INCOMPLETE", "missing", len(missing))
            issue.ranks = [_json_rank(r) for r in missing[:MAX_ITEMS]]
            out.issues.append(issue)
        for r in dead:
            proc = RasProcess(int(r.get("pid") or 0), str(r.get("host")), str(r.get("cuda_dev")))
            if proc not in out.dead_processes:
                out.dead_processes.append(proc)
        errors: dict[str, list[RasRank]] = {}
        for r in comm.get("ranks") or []:
            status = (r.get("status") or {}) if isinstance(r, dict) else {}
            for key, what in (("init_state", "initialization error"), ("async_error", "asynchronous error")):
                code = status.get(key)
                if isinstance(code, int) and code not in (0, 7):
                    rank = _json_rank(r)
                    rank.value = NCCL_RESULTS.get(code, f"error {code}")
                    errors.setdefault(what, []).append(rank)
        for what, ranks in errors.items():
            issue = RasCommIssue(0, index, name_hash, "ERROR", what, len(ranks))
            issue.groups = [RasValueGroup(len(ranks), ranks[0].value or "", ranks)]
            out.issues.append(issue)
    out.dead_count = len(out.dead_processes) or None
    return out


def _json_rank(r: dict[str, object]) -> RasRank:
    pid = r.get("pid")
    return RasRank(int(str(r.get("rank", -1))), str(r.get("cuda_dev")), int(pid) if isinstance(pid, int) else None,
                   str(r.get("host")) if r.get("host") is not None else None)  # fmt: skip
