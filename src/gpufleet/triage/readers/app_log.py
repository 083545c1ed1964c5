"""Application logs: `kubectl logs` of a training or serving pod, a Slurm job's output, a torchrun console. What they
say about memory, told apart, and the setup errors that stop a GPU program before it computes (a driver older than
the CUDA runtime, a build without the GPU's architecture, a driver/library mismatch, a container without the driver:
readers/setup.py, one finding per fault). On memory:

- GPU memory (`gpu-oom`, critical): PyTorch's `CUDA out of memory` in every wording since 1.0, `CUDA error: out of
  memory`, JAX/XLA's `RESOURCE_EXHAUSTED: Out of memory`, TensorFlow's `OOM when allocating tensor`, NCCL's `Cuda
  failure 'out of memory'`, vLLM's KV cache that does not fit. The numbers in the message are read (requested, total,
  free, held by this and by other processes, reserved but unallocated) and point the fix; the GPU index, and the rank
  when a launcher prefixed the line (`[rank3]:`, `[default3]:`, mpirun's `[1,3]<stderr>:`, `srun --label`'s `3: `).
- Host memory (`host-oom`, critical): Slurm's cgroup plugin killing a step (`Detected 1 oom_kill event`, `task 1: Out
  Of Memory`). A DataLoader worker or torchrun child killed by SIGKILL is most often the kernel's OOM killer at the
  container's limit, but not always: a warning (`sigkill`) that says where to look.

A sentence that only mentions running out of memory (vLLM's advice while capturing CUDA graphs) is not a report, and
the source line a traceback quotes (`raise ValueError("No available memory ...`) is not a second one. It is the one
that tells when the log is cut: a traceback that ends without its exception's own line, or with one that names the
raised exception but no longer reads as the report, is reported from the quoted line; a log that ends inside a
traceback without one is not called healthy."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufleet.model import Severity
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines
from gpufleet.triage.readers.oom import GPU_OOM, HOST_OOM, SIGKILL, GpuOom, describe_gpu_oom, parse_gpu_oom
from gpufleet.triage.readers.setup import SetupErrors
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport

_PREFIXES = re.compile(r"^(?:\s*(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,6}: (?=\S)))+")
_RANK = re.compile(r"\[rank(\d+)\]:|\[\d+,(\d+)\]<std|^\s*(\d{1,6}): ")
_LOCAL_RANK = re.compile(r"\[default(\d+)\]:")
_TIME = re.compile(r"\b(?:(?P<date>\d{4}-\d\d-\d\d)[T ])?(?P<time>\d\d:\d\d:\d\d)\b")
TIME_WINDOW = 20  # a report without a time of its own takes the next line's within this many lines
_QUOTED_SOURCE = re.compile(r"\braise (?:[\w.]+\.)?(?P<name>\w*(?:Error|Exception)\w*)\(")  # a traceback quoting it
# A traceback: its header and frames, and the line that ends it (the exception's name, then its message or nothing).
_FRAME = re.compile(r'\bFile "[^"]*", line \d+, in |\bTraceback \(most recent call last\):')
_RAISED = re.compile(r"(?:^|[\s\]|>:])(?:[\w.]+\.)?(?P<name>\w*(?:Error|Exception|Exit|Interrupt))(?:: \S|\s*$)")
CUT_TRACEBACK_LINES = 4  # a log that ends this close after a frame, with no exception line, ends inside the traceback
_SLURM_OOM = re.compile(r"Detected (?P<count>\d+) oom[-_]kill events? in (?:StepId=|step )?(?P<step>[\w.]+)")
_SRUN_OOM = re.compile(r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): Out Of Memory")
_SIGKILLED = re.compile(
    r"DataLoader worker \(pids?\(?s?\)? ?(?P<worker>[\d, ]+)\) is killed by signal: Killed"
    r"|exitcode\s*:\s*-9\b|failed \(exitcode: -9\)|Signal 9 \(SIGKILL\) received by PID (?P<pid>\d+)"
)
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?P<name>\w*(?:Error|Exception|Exit)): \S")
_HINT = re.compile(r"out of memory|Out of memory|OOM|KV cache|cache blocks|oom[-_]kill|Out Of Memory|Killed|-9|SIGKILL",
                   re.IGNORECASE)  # fmt: skip


@dataclass
class _Seen:
    """The reports of one kind in one log: one finding, however many ranks printed it."""

    severity: Severity
    code: str
    ooms: list[GpuOom] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    when: str = ""  # "at 11:05:25" (its own line's), "by ..." (the next time printed), "after ..." (the last before)
    before: str = ""
    lines: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    message: str = ""
    fix: str = ""

    def see(self, number: int, line: str, rank: str) -> None:
        self.numbers.append(number)
        if rank and rank not in self.ranks:
            self.ranks.append(rank)
        if len(self.lines) < MAX_EVIDENCE:
            self.lines.append(line[:2000])

    def entity(self) -> str:
        ranks = sorted(self.ranks, key=lambda r: int(r.split()[-1]))
        if ranks:
            return ", ".join(ranks[:6]) + (f" and {len(ranks) - 6} more" if len(ranks) > 6 else "")
        gpus = sorted(set(self.gpus))
        return ", ".join(f"GPU {g}" for g in gpus[:6])


def _rank(line: str) -> str:
    if m := _RANK.search(line):
        return f"rank {next(g for g in m.groups() if g is not None)}"
    if m := _LOCAL_RANK.search(line):
        return f"local rank {m[1]}"
    return ""


class _LogReader:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], _Seen] = {}
        self.last_time = ""
        self.pending: list[tuple[int, _Seen]] = []  # reports still without a time, and the line they were on
        self.exception = ""
        self.lines = 0
        self.frame = 0  # the line of the open traceback's last frame (0: none open)
        # a GPU out-of-memory report in the source line an open traceback quotes: (line, its text, time, exception)
        self.quoted: tuple[int, str, str, str] | None = None
        self.cut = ""  # how the log was found cut inside a traceback, for the report's notes
        self.setup = SetupErrors()  # a driver, CUDA runtime or GPU architecture that do not fit (readers/setup.py)

    def feed(self, number: int, raw: str) -> None:
        self.lines += 1
        line = raw.replace("**", "") if "**" in raw else raw  # Markdown bold pasted around an error
        body = _PREFIXES.sub("", line).strip()
        time = ""
        if t := _TIME.search(body[:80]):
            time = f"{t['date']} {t['time']}" if t["date"] else t["time"]
            for since, seen in self.pending:
                if number - since <= TIME_WINDOW and not seen.when:
                    seen.when = f"by {time}"
            self.pending.clear()
            self.last_time = time
        if (m := _EXCEPTION.match(body)) and m["name"] != "ChildFailedError":
            self.exception = body[:300]
        raised = self._traceback(number, body)
        reported = self._report(number, line, body, time)
        if self.setup.might_hold(number, body):  # the rank is searched for only then
            self.setup.feed(number, body, _rank(line))
        if raised is not None and self.quoted is not None:  # the traceback ends: did its line say what was raised?
            if not reported and raised == self.quoted[3]:
                self._report_quoted("the exception's own line does not read whole (cut?)")
            self.quoted = None

    def _traceback(self, number: int, body: str) -> str | None:
        """Follows tracebacks; the exception's name when this line ends the open one."""
        if _FRAME.search(body):
            self.frame = number
            return None
        if self.frame and "raise " not in body and (m := _RAISED.search(body)):
            self.frame = 0
            return m["name"]
        return None

    def _report(self, number: int, line: str, body: str, time: str) -> bool:
        """Reads the report a line holds; True when it held one."""
        if not _HINT.search(body):
            return False
        if quoted := _QUOTED_SOURCE.search(body):
            if self.frame and parse_gpu_oom(body) is not None:
                self.quoted = (number, line, time, quoted["name"])
            return False
        if (oom := parse_gpu_oom(body)) is not None:
            kind = "host" if oom.on_cpu else oom.framework
            seen = self._seen(kind, HOST_OOM if oom.on_cpu else GPU_OOM, Severity.critical)
            seen.ooms.append(oom)
            if oom.gpu is not None:
                seen.gpus.append(oom.gpu)
            self._see(seen, number, line, time)
        elif m := _SLURM_OOM.search(body):
            seen = self._seen("slurm", HOST_OOM, Severity.critical)
            step = m["step"].rstrip(".")
            seen.message = (f"Slurm killed step {step} at its cgroup's memory limit ({m['count']} OOM kill(s)): "
                            "host memory (the job's --mem / --mem-per-cpu), not GPU memory")  # fmt: skip
            seen.fix = ("ask for more host memory (--mem, --mem-per-gpu) or cut what each task keeps in RAM: "
                        "DataLoader workers, pinned buffers, the dataset loaded whole; `sacct -j JOB -o MaxRSS` shows "
                        "the peak")  # fmt: skip
            self._see(seen, number, line, time)
        elif m := _SRUN_OOM.search(body):
            seen = self._seen("slurm", HOST_OOM, Severity.critical)
            if not seen.message:
                seen.message = f"Slurm task {m['tasks']} on {m['node']} ran out of host memory (not GPU memory)"
                seen.fix = "ask for more host memory (--mem, --mem-per-gpu) or cut what each task keeps in RAM"
            if m["tasks"].isdigit() and f"task {m['tasks']}" not in seen.ranks:
                seen.ranks.append(f"task {m['tasks']}")
            self._see(seen, number, line, time)
        elif m := _SIGKILLED.search(body):
            seen = self._seen("sigkill", SIGKILL, Severity.warning)
            what = f"DataLoader worker {m['worker'].strip()}" if m["worker"] else "a training process"
            seen.message = seen.message or (
                f"{what} was killed with SIGKILL: most often the kernel's OOM killer at the container's or job's "
                "memory limit (host memory, not GPU memory); a preemption or an eviction also sends it"
            )
            seen.fix = ("look for the kill: the pod's lastState (`OOMKilled`), the node's kernel log (`Killed "
                        "process`), Slurm's `oom_kill event`; if it is memory, cut num_workers or what the dataset "
                        "keeps in RAM, or raise the memory limit")  # fmt: skip
            self._see(seen, number, line, time)
        else:
            return False
        return True

    def _report_quoted(self, why: str) -> None:
        assert self.quoted is not None
        number, line, time, _ = self.quoted
        oom = parse_gpu_oom(_PREFIXES.sub("", line).strip())
        assert oom is not None
        seen = self._seen(
            "host" if oom.on_cpu else oom.framework, HOST_OOM if oom.on_cpu else GPU_OOM, Severity.critical
        )
        seen.ooms.append(oom)
        self._see(seen, number, line, time)
        self.cut = f"{why}: the out-of-memory report is read from the source line its traceback quotes"

    def finish(self) -> None:
        """At the end of the log: a traceback still open there was cut."""
        if self.quoted is not None and self.frame:
            self._report_quoted("the log ends inside a traceback, before the exception's own line")
        elif self.frame and self.lines - self.frame <= CUT_TRACEBACK_LINES and not self.seen and not self.setup.found:
            self.cut = "the log ends inside a traceback, before the exception's own line: what failed cannot be read"
        self.quoted = None

    def _seen(self, kind: str, code: str, severity: Severity) -> _Seen:
        key = (code, kind)
        if key not in self.seen:
            self.seen[key] = _Seen(severity, code)
        return self.seen[key]

    def _see(self, seen: _Seen, number: int, line: str, time: str) -> None:
        seen.see(number, line, _rank(line))
        if time:
            seen.when = seen.when or f"at {time}"
        elif not seen.when:
            seen.before = seen.before or self.last_time
            self.pending.append((number, seen))

    def into(self, report: TriageReport) -> None:
        for seen in list(self.seen.values())[:MAX_FINDINGS]:
            when = f" {seen.when}" if seen.when else f" after {seen.before}" if seen.before else ""
            count = len(seen.numbers)
            lines = f" ({count} reports, lines {seen.numbers[0]}-{seen.numbers[-1]})" if count > 1 else ""
            if seen.ooms:
                oom = max(seen.ooms, key=lambda o: o.richness)
                summary, fix = describe_gpu_oom(oom, (f" ({seen.entity()})" if seen.ranks else "") + when)
                memory = "" if oom.on_cpu else " (GPU memory, not host memory or a container's memory limit)"
                message = f"{summary}{memory}{lines}"
            else:
                message, fix = f"{seen.message}{when}{lines}", seen.fix
            report.findings.append(TriageFinding("app-log", seen.severity, message, seen.entity(), seen.code, fix,
                                                 seen.lines))  # fmt: skip
        self.setup.into(report)


def read_app_log(lines: Iterable[str], source: str) -> TriageReport:
    """Out-of-memory reports (and OOM kills) in an application's own log, line by line."""
    report = TriageReport("app-log", source)
    reader = _LogReader()
    for number, line in enumerate(bounded_lines(lines, report), start=1):
        reader.feed(number, line)
    reader.finish()
    reader.into(report)
    if reader.cut:
        report.notes.append(reader.cut)
        report.judged = bool(report.findings)  # cut before anything could be read: not healthy, unknown
    if not reader.lines:
        report.judged = False
        report.notes.append("the log is empty")
    elif not report.findings:
        if reader.exception:
            report.findings.append(TriageFinding("app-log", Severity.warning,
                                                 f"the program failed, but not for memory: "
                                                 f"{reader.exception}", code="exception", evidence=[reader.exception],
                                                 fix="read the traceback above it"))  # fmt: skip
        report.notes.append(
            "no out-of-memory report (CUDA, XLA, TensorFlow, NCCL, vLLM), OOM kill or driver/CUDA "
            "setup error in this log"
        )
    return report
