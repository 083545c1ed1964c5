"""Node actions on this node, as the control plane asks for them (model/actions.py): each begun at most once, its
result kept until the control plane says it took it.

Exactly once across restarts: before an action starts, a journal entry saying so is written to the agent's data
directory (and synced); its result replaces it. An agent that finds an entry begun but never finished does not run
it again: a reboot that went through is done (the boot id changed), anything else is reported interrupted, for a
person to check. The control plane hands an action again until it has its result, so a result lost with a push is
sent again, and an action the agent has begun or finished is never begun twice.

The node's own preconditions are checked here, at the moment of acting: no pod holds the GPU (per the kubelet's
pod-resources view, the agent's workload attribution) before a reset or diagnostics, none holds any before a
reboot. The commands are configurable; an action kind without a command this node can run is not offered.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpufleet.errors import ParseError
from gpufleet.model.actions import (
    RESTARTABLE_SERVICES,
    ActionResult,
    NodeAction,
    NodeActionKind,
    Outcome,
    clip_output,
)
from gpufleet.parsers.nvidia.topo import NvlinkStatus

log = logging.getLogger("gpufleet.agent")

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
COMMAND_TIMEOUT_S = 3600.0
REBOOT_WAIT_S = 600.0  # after the reboot command: the node goes down within this long, or the reboot failed
KEEP_REPORTED_S = 7 * 86400.0  # a reported action's entry is kept this long, so an id handed again is known
_SAFE = re.compile(r"[^A-Za-z0-9._#-]")

# The commands, by kind, as argument lists with {gpu}, {watts}, {level}, {service}, {gpus} filled in. Sources:
# nvidia-smi(1) "-r, --gpu-reset" (needs no process on the GPU; R470+ resets one GPU of an NVLink system), "-pl,
# --power-limit", "--query-gpu=power.default_limit"; dcgmi diag -r LEVEL -i GPU,GPU (`-i/--gpuList`: only those GPUs
# are tested, so a diag of the faulty GPU leaves its neighbours' work alone); systemctl(1) restart; nccl-tests
# all_reduce_perf (-g: GPUs per process).
DEFAULT_COMMANDS: dict[NodeActionKind, str] = {
    NodeActionKind.reset_gpu: "nvidia-smi -r -i {gpu}",
    NodeActionKind.power_cap: "nvidia-smi -i {gpu} -pl {watts}",
    NodeActionKind.restart_service: "systemctl restart {service}",
    NodeActionKind.diag: "dcgmi diag -r {level} -i {gpus}",
}
POWER_DEFAULT = "nvidia-smi -i {gpu} --query-gpu=power.default_limit --format=csv,noheader,nounits"
NCCL_LOOPBACK = "all_reduce_perf -b 64M -e 1G -f 2 -g {gpus}"
# every GPU's NVLinks as the driver has them: a diag pass with a link down is not trusted (health/diag.py)
NVLINK_STATUS = "nvidia-smi nvlink -s"


@dataclass(slots=True)
class NodeFacts:
    """What the agent knows of its node when it acts: which pods hold which GPU, its GPUs, its model."""

    holders: Callable[[], dict[int, str]] = dict  # GPU index -> "namespace/pod" holding it
    gpus: Callable[[], list[int]] = list
    gpu_model: Callable[[], str] = str  # the catalog's key (h100-sxm), for the NCCL loopback's expected bandwidth


@dataclass(slots=True)
class Commands:
    """The command per kind (None: not offered). `reboot-node` has no default: how a node reboots is the site's
    (`systemctl reboot`, a BMC's power cycle, a node-maintenance hook)."""

    by_kind: dict[NodeActionKind, str] = field(default_factory=lambda: dict(DEFAULT_COMMANDS))
    nccl_loopback: str | None = NCCL_LOOPBACK
    nvlink_status: str | None = NVLINK_STATUS

    def offered(self) -> list[NodeActionKind]:
        """The kinds whose command's program is on this node."""
        return [k for k, cmd in self.by_kind.items() if cmd and shutil.which(shlex.split(cmd)[0]) is not None]


def run_command(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """(exit status, stdout and stderr together); 124 when it ran past `timeout`, 127 when it is not there."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, f"{out}\n{shlex.join(argv)}: stopped after {timeout:.0f} s"
    return proc.returncode, (proc.stdout or "") + (proc.stderr or "")


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


class ActionJournal:
    """One file per action under `directory`: begun, then its result, then reported; each written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, action_id: str) -> Path:
        return self.directory / f"{_SAFE.sub('_', action_id)}.json"

    def read(self, action_id: str) -> dict[str, object] | None:
        try:
            body = json.loads(self._path(action_id).read_text())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) and body.get("id") == action_id else None

    def write(self, entry: dict[str, object]) -> None:
        path = self._path(str(entry["id"]))
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(entry, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself outlives a crash once the directory is synced
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self) -> list[dict[str, object]]:
        out = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(body, dict) and "id" in body:
                out.append(body)
        return out

    def forget(self, action_id: str) -> None:
        with contextlib.suppress(OSError):
            self._path(action_id).unlink()


def _result(entry: dict[str, object]) -> ActionResult:
    return msgspec.convert(entry["result"], type=ActionResult)


class NodeActionRunner:
    """Takes the actions the control plane hands out, runs them one at a time in their own thread, and keeps their
    results until they are acknowledged."""

    def __init__(
        self,
        directory: Path,
        node: str,
        facts: NodeFacts | None = None,
        commands: Commands | None = None,
        *,
        clock: Callable[[], float] = time.time,
        run: Callable[[list[str], float], tuple[int, str]] = run_command,
        boot: Callable[[], str] = boot_id,
        wake: Callable[[], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.journal = ActionJournal(directory)
        self.node = node
        self.facts = facts or NodeFacts()
        self.commands = commands or Commands()
        self.clock, self.run, self.boot, self.sleep = clock, run, boot, sleep
        self.wake = wake  # the pusher, so a result goes out at once
        self.lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._waiting: list[NodeAction] = []
        self.can = self.commands.offered()
        self._recover()

    # --- what the pusher calls ----------------------------------------------------------------------------------

    def results(self) -> list[ActionResult]:
        """Finished results the control plane has not acknowledged yet."""
        with self.lock:
            return [_result(e) for e in self.journal.entries() if e.get("state") == "finished"]

    def acknowledged(self, ids: list[str]) -> None:
        with self.lock:
            for action_id in ids:
                entry = self.journal.read(action_id)
                if entry is not None and entry.get("state") == "finished":
                    entry["state"], entry["reported"] = "reported", self.clock()
                    self.journal.write(entry)
            self._prune()

    def offer(self, actions: list[NodeAction]) -> None:
        """The actions in an acknowledgement: those never seen are begun in turn, those seen are left alone (their
        result goes with the next push)."""
        with self.lock:
            queued = {a.id for a in self._waiting}
            for action in actions:
                if action.node != self.node:
                    continue  # not this node's: never acted on, whatever the control plane says
                if action.id in queued or self.journal.read(action.id) is not None:
                    continue
                self._waiting.append(action)
                queued.add(action.id)
            if self._waiting and (self._worker is None or not self._worker.is_alive()):
                self._worker = threading.Thread(target=self._drain, name="node-actions", daemon=True)
                self._worker.start()

    def join(self, timeout: float | None = None) -> None:
        worker = self._worker
        if worker is not None:
            worker.join(timeout)

    # --- running --------------------------------------------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self.lock:
                if not self._waiting:
                    return
                action = self._waiting.pop(0)
            try:
                self.carry_out(action)
            except Exception:  # an action's failure is its result; the agent goes on
                log.exception("node action %s failed", action.id)
            if self.wake is not None:
                self.wake()

    def carry_out(self, action: NodeAction) -> ActionResult:
        """Check, journal as begun, act, journal the result."""
        now = self.clock()
        refusal = self._refusal(action, now)
        if refusal is not None:
            outcome, detail = refusal
            return self._finish(action, ActionResult(action.id, outcome, detail, now, now))
        self.journal.write(
            {"id": action.id, "state": "begun", "started": now, "boot_id": self.boot(), "action": _plain(action)}
        )
        log.warning("node action %s: %s (%s)", action.id, action.describe(), action.reason)
        outcome, detail, output = self._act(action)
        return self._finish(action, ActionResult(action.id, outcome, detail, now, self.clock(), clip_output(output)))

    def _finish(self, action: NodeAction, result: ActionResult) -> ActionResult:
        entry = self.journal.read(action.id) or {"id": action.id, "action": _plain(action)}
        entry.update(state="finished", result=msgspec.to_builtins(result))
        self.journal.write(entry)
        log.info("node action %s %s: %s", action.id, result.outcome, result.detail)
        return result

    def _refusal(self, action: NodeAction, now: float) -> tuple[Outcome, str] | None:
        if now > action.deadline:
            return Outcome.expired, f"not begun by its deadline ({now - action.deadline:.0f} s ago)"
        if action.kind not in self.can:
            return Outcome.unsupported, f"this agent has no command for {action.kind} on {self.node}"
        holders = self.facts.holders()
        if action.kind in (NodeActionKind.reset_gpu, NodeActionKind.diag) and action.gpu is not None:
            pod = holders.get(action.gpu)
            if pod:
                return Outcome.refused, f"GPU {action.gpu} is held by pod {pod} (pod-resources); nothing was done"
        if action.kind is NodeActionKind.reboot_node or (action.kind is NodeActionKind.diag and action.gpu is None):
            held = {f"GPU {g}: {p}" for g, p in sorted(holders.items()) if p}
            if held:
                return Outcome.refused, f"pods still hold GPUs ({', '.join(sorted(held))}); nothing was done"
        if action.kind is NodeActionKind.restart_service and action.service not in RESTARTABLE_SERVICES:
            return Outcome.refused, f"{action.service!r} is not a service this agent restarts"
        return None

    def _argv(self, kind: NodeActionKind, **values: object) -> list[str]:
        return [part.format(**values) for part in shlex.split(self.commands.by_kind[kind])]

    def _act(self, action: NodeAction) -> tuple[Outcome, str, str]:
        kind = action.kind
        if kind is NodeActionKind.diag:
            return self._diag(action)
        if kind is NodeActionKind.power_cap:
            return self._power_cap(action)
        argv = self._argv(kind, gpu=action.gpu, service=action.service, node=self.node)
        status, output = self.run(argv, COMMAND_TIMEOUT_S)
        said = shlex.join(argv)
        if status == 0 and kind is NodeActionKind.reboot_node:
            # done only once the node is back: the agent that starts after the reboot finds this entry begun
            # under another boot id (_recover). Until then nothing else runs here.
            self.sleep(REBOOT_WAIT_S)
            return (
                Outcome.failed,
                f"{said} exited 0 but {self.node} did not go down within {REBOOT_WAIT_S:.0f} s",
                output,
            )
        if status == 0:
            return Outcome.done, f"{action.describe()}: {said} exited 0", output
        return Outcome.failed, f"{said} exited {status}: {_last_line(output)}", output

    def _power_cap(self, action: NodeAction) -> tuple[Outcome, str, str]:
        gpus = [action.gpu] if action.gpu is not None else self.facts.gpus()
        outputs, done = [], []
        for gpu in gpus:
            query = [part.format(gpu=gpu) for part in shlex.split(POWER_DEFAULT)]
            status, out = self.run(query, 60.0)
            outputs.append(out)
            try:
                default = float(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                return Outcome.failed, f"GPU {gpu}'s default power limit could not be read: {_last_line(out)}", out
            watts = round(default * (action.fraction or 1.0))
            status, out = self.run(self._argv(NodeActionKind.power_cap, gpu=gpu, watts=watts), 60.0)
            outputs.append(out)
            if status != 0:
                return Outcome.failed, f"capping GPU {gpu} at {watts} W failed: {_last_line(out)}", "\n".join(outputs)
            done.append(f"GPU {gpu} at {watts} W")
        return Outcome.done, f"capped {', '.join(done)}", "\n".join(outputs)

    def _diag(self, action: NodeAction) -> tuple[Outcome, str, str]:
        """DCGM's diagnostics at the level asked, judged as `gpufleet diag` judges them; from level 2 on, with
        several GPUs, an NCCL all-reduce across them judged against the node's expected bandwidth."""
        from gpufleet.health.diag import judge
        from gpufleet.parsers.nvidia.dcgmi_diag import read_diag

        level = action.level or 1
        tested = [action.gpu] if action.gpu is not None else self.facts.gpus()
        argv = self._argv(NodeActionKind.diag, level=level, gpus=",".join(map(str, tested)) or "0")
        status, output = self.run(argv, COMMAND_TIMEOUT_S)
        try:
            report = read_diag(output.splitlines(), level=level)
        except ParseError as exc:  # what could not be read is the result
            return Outcome.failed, f"{shlex.join(argv)} exited {status}; its output does not read: {exc}", output
        outcome = judge(report, self.node, level, self._nvlinks())
        failing = [f"{c.name} {c.status}: {c.detail}" for c in outcome.checks if c.status not in ("Pass", "Skip")]
        checks = "; ".join(failing) or "every test Pass"
        said = f"dcgmi diag -r {level}: {outcome.verdict} ({checks})"
        if outcome.verdict not in ("Pass", "Warn"):
            return Outcome.failed, said, output
        gpus = self.facts.gpus()
        if level < 2 or len(gpus) < 2 or not self.commands.nccl_loopback:
            return Outcome.passed, said, output
        busy = sorted({pod for pod in self.facts.holders().values() if pod})
        if busy:  # an all-reduce across every GPU would run beside (and slow) their work
            return Outcome.passed, f"{said}; NCCL loopback not run: pods hold GPUs ({', '.join(busy)})", output
        verdict, nccl_said, nccl_out = self._nccl_loopback(len(gpus))
        output = f"{output}\n{nccl_out}"
        if verdict == "failed" or verdict == "underperforming":
            return Outcome.failed, f"{said}; {nccl_said}", output
        return Outcome.passed, f"{said}; {nccl_said}", output

    def _nvlinks(self) -> NvlinkStatus | None:
        """`nvidia-smi nvlink -s` read as `gpufleet diag --nvlink-status` reads it; None where it is not here."""
        from gpufleet.parsers.nvidia.topo import read_nvlink_status

        if not self.commands.nvlink_status:
            return None
        argv = shlex.split(self.commands.nvlink_status)
        if shutil.which(argv[0]) is None:
            return None
        status, output = self.run(argv, 60.0)
        if status != 0 or not output.strip():
            return None
        return read_nvlink_status(output, source=shlex.join(argv), strict=False)

    def _nccl_loopback(self, gpus: int) -> tuple[str, str, str]:
        from gpufleet.nccl.compare import judge_run
        from gpufleet.nccl.perf_parser import parse_perf_runs

        assert self.commands.nccl_loopback is not None
        argv = [part.format(gpus=gpus) for part in shlex.split(self.commands.nccl_loopback)]
        if shutil.which(argv[0]) is None:
            return "not-run", f"NCCL loopback not run: {argv[0]} is not on this node (nccl-tests)", ""
        status, output = self.run(argv, 900.0)
        tables = parse_perf_runs(output.splitlines())
        if status != 0 or not tables:
            return "failed", f"{shlex.join(argv)} exited {status}: {_last_line(output)}", output
        model = self.facts.gpu_model()
        judgement = judge_run(tables[-1], {"gpu": model} if model else None, default_op="allreduce")
        why = "; ".join(c.message for c in judgement.causes) or judgement.not_judged or "within the expected bandwidth"
        return judgement.verdict, f"NCCL all-reduce across {gpus} GPUs: {judgement.verdict} ({why})", output

    # --- after a restart -------------------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Entries begun by an agent that stopped before it wrote their result: never run again."""
        now = self.clock()
        for entry in self.journal.entries():
            if entry.get("state") != "begun":
                continue
            action = msgspec.convert(entry["action"], type=NodeAction)
            started = float(entry.get("started") or now)  # type: ignore[arg-type]
            was, is_ = str(entry.get("boot_id") or ""), self.boot()
            if action.kind is NodeActionKind.reboot_node and was and is_ and was != is_:
                result = ActionResult(action.id, Outcome.done, f"{self.node} rebooted (boot id {was[:8]}… -> "
                                      f"{is_[:8]}…)", started, now)  # fmt: skip
            else:
                result = ActionResult(
                    action.id,
                    Outcome.interrupted,
                    f"the agent stopped while it ran {action.describe()}; whether it took effect is unknown",
                    started,
                    now,
                )
            entry.update(state="finished", result=msgspec.to_builtins(result))
            self.journal.write(entry)

    def _prune(self) -> None:
        cutoff = self.clock() - KEEP_REPORTED_S
        for entry in self.journal.entries():
            if entry.get("state") == "reported" and float(entry.get("reported") or 0) < cutoff:  # type: ignore[arg-type]
                self.journal.forget(str(entry["id"]))


def _plain(action: NodeAction) -> object:
    return msgspec.to_builtins(action)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
