"""`dcgmi diag` table output: per-test results with GPU ids, warnings and errors, overall verdict and run
level.

    |-----  Deployment  --------+------------------------------------------------|
    | Error                     | GPU 3 has uncorrectable memory errors and row  |
    |                           |  remappings are pending                        |
    | GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |
    |                           | Fail - GPU: 0                                  |
    | Warning                   | GPU 0 Thermal violations totaling 13.3 second  |
    |                           | s started at 9.7 seconds into the test for GP  |

dcgmi cuts long text into fixed-width pieces (mid-word), so pieces are joined without adding spaces. `Error`,
`Warning` and `Info` rows belong to the test above them; an error before any test (a deployment check that
stopped the run) is kept as a failed test named after its section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.errors import ParseError

Status = Literal["Pass", "Fail", "Warn", "Skip"]
_RANK: dict[str, int] = {"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}

# tests each `-r` level adds (DCGM nvvs FillTestVectors); a level runs everything below it too
LEVEL_TESTS: dict[int, tuple[str, ...]] = {
    1: (
        "deployment",
        "denylist",
        "nvml library",
        "cuda main library",
        "permissions and os blocks",
        "persistence mode",
        "environment variables",
        "page retirement/row remap",
        "graphics processes",
        "inforom",
        "fabric manager",
        "software",
    ),
    2: ("pcie", "gpu memory", "memory"),
    3: (
        "diagnostic",
        "targeted stress",
        "targeted power",
        "memory bandwidth",
        "eud test",
        "eud",
        "cpu eud",
        "nvbandwidth",
        "nccl tests",
        "rist",
    ),
    4: ("memtest", "pulse test"),
}

_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z /]*?)\s+-+\+")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*?)(?:\|\s*)?$")
_RESULT = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)\b(?:\s*-\s*(?P<scope>.*))?$")
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<status>Pass|Fail|Warn|Skip)\b")
_GPU_MENTION = re.compile(r"\bGPU\s*(\d+)\b")
_MESSAGE_ROWS = {"error": "error", "warning": "warning", "info": "info"}


@dataclass(frozen=True)
class DiagTestResult:
    """One result line of a dcgmi test: Pass/Fail/Warn/Skip for all GPUs or for the GPUs it names."""

    status: Status
    gpus: tuple[int, ...] | None  # None: all GPUs


@dataclass
class DiagMessage:
    severity: Literal["error", "warning", "info"]
    text: str

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted({int(g) for g in _GPU_MENTION.findall(self.text)}))


@dataclass
class DiagTest:
    name: str
    category: str
    results: list[DiagTestResult] = field(default_factory=list)
    messages: list[DiagMessage] = field(default_factory=list)

    @property
    def status(self) -> Status:
        statuses: list[Status] = [r.status for r in self.results]
        statuses += ["Fail" for m in self.messages if m.severity == "error"]
        statuses += ["Warn" for m in self.messages if m.severity == "warning"]
        return max(statuses, key=lambda s: _RANK[s]) if statuses else "Skip"

    def failed_gpus(self) -> tuple[int, ...]:
        found = {g for r in self.results if r.status == "Fail" for g in (r.gpus or ())}
        found |= {g for m in self.messages if m.severity == "error" for g in m.gpus}
        return tuple(sorted(found))


@dataclass
class DiagReport:
    tests: list[DiagTest]
    metadata: dict[str, str] = field(default_factory=dict)
    level: int | None = None  # the -r level the caller ran, or the lowest level that explains the tests seen

    @property
    def verdict(self) -> Status:
        statuses = [t.status for t in self.tests if t.status != "Skip"]
        return max(statuses, key=lambda s: _RANK[s]) if statuses else "Skip"

    def test(self, name: str) -> DiagTest:
        for t in self.tests:
            if t.name.lower() == name.lower():
                return t
        raise KeyError(name)


def _scope(text: str | None) -> tuple[int, ...] | None:
    if not text or text.strip().lower() == "all":
        return None
    ids = re.findall(r"\d+", text.split(":", 1)[-1])
    return tuple(int(i) for i in ids) if ids else None


def inferred_level(tests: list[DiagTest]) -> int | None:
    """The lowest `-r` level whose test list covers every test that ran (None when no test is known)."""
    names = {t.name.lower() for t in tests if t.status != "Skip" or t.results}
    levels = [lvl for lvl, known in LEVEL_TESTS.items() for n in names if n in known]
    return max(levels) if levels else None


def parse_diag(text: str, *, level: int | None = None, source: str = "dcgmi diag") -> DiagReport:
    """Parse `dcgmi diag -r N` table output. `level` is the -r the run used when the caller knows it."""
    tests: list[DiagTest] = []
    metadata: dict[str, str] = {}
    category = ""
    current: DiagTest | None = None
    message: DiagMessage | None = None
    width = 45
    seen_table = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.rstrip()
        section = _SECTION.match(line)
        if section is not None:
            category, current, message = section.group("name").strip(), None, None
            seen_table = True
            continue
        if not line.startswith("|"):
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        seen_table = True
        name = row.group("name").strip()
        cell = row.group("value")
        if line.endswith("|"):
            width = max(len(cell) - 3, 1)
        piece = cell[1 : 1 + width] if len(cell) > 1 else ""
        value = cell.strip()
        if name in ("Diagnostic",) and value == "Result":
            continue
        if name:
            message = None
            if category.lower() == "metadata":
                metadata[name] = value
                continue
            kind = _MESSAGE_ROWS.get(name.lower())
            if kind is not None:
                if current is None:
                    current = DiagTest(name=category or "Unnamed", category=category)
                    tests.append(current)
                message = DiagMessage(kind, piece)  # type: ignore[arg-type]
                current.messages.append(message)
                continue
            current = DiagTest(name=name, category=category)
            tests.append(current)
            _add_result(current, value, source, lineno)
            continue
        # a continuation line: another per-GPU result, or the next piece of wrapped text
        if message is not None:
            message.text += piece
        elif current is not None and (_RESULT.match(value) or _PER_GPU.match(value)):
            _add_result(current, value, source, lineno)
        elif current is not None and current.results:
            last = current.results[-1]
            extra = _scope(value)
            if extra is None:
                raise ParseError(f"{source}:{lineno}: cannot read continued result {value!r}")
            current.results[-1] = DiagTestResult(last.status, (last.gpus or ()) + extra)
        elif category.lower() == "metadata" and metadata:
            last_key = list(metadata)[-1]
            metadata[last_key] += value
    if not seen_table:
        raise ParseError(f"{source}: no dcgmi diag table found", fix="pass the output of `dcgmi diag -r N`")
    for test in tests:
        for msg in test.messages:
            msg.text = msg.text.strip()
    return DiagReport(tests=tests, metadata=metadata, level=level if level is not None else inferred_level(tests))


def _add_result(test: DiagTest, value: str, source: str, lineno: int) -> None:
    per_gpu = _PER_GPU.match(value)
    if per_gpu is not None:
        test.results.append(DiagTestResult(per_gpu.group("status"), (int(per_gpu.group("gpu")),)))  # type: ignore[arg-type]
        return
    result = _RESULT.match(value)
    if result is None:
        raise ParseError(f"{source}:{lineno}: {test.name}: expected Pass/Fail/Warn/Skip, got {value!r}")
    test.results.append(DiagTestResult(result.group("status"), _scope(result.group("scope"))))  # type: ignore[arg-type]
