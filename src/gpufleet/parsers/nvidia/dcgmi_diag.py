"""`dcgmi diag` table output, read line by line, and the one judgement of it that `gpufleet diag` and
`gpufleet triage` share.

Every layout below is dcgmi's own (NVIDIA/DCGM dcgmi/Diag.cpp and CommandOutputController.cpp). Rows are
`| <name, 25 columns> | <value, 46 columns> |`; a longer value is cut to 43 columns plus `...`, and a message is
split into 45-column pieces (mid-word: the pieces are joined without adding spaces) under its label.

DCGM 2.x-3.x (2.1.4 .. 3.3.9)::

    Successfully ran diagnostic for group.
    +---------------------------+------------------------------------------------+
    | Diagnostic                | Result                                         |
    +===========================+================================================+
    |-----  Metadata  ----------+------------------------------------------------|   (3.0+)
    | DCGM Version              | 3.3.5                                          |
    | GPU Device IDs Detected   | 2330,2330                                      |
    |-----  Deployment  --------+------------------------------------------------|   (always printed)
    | Denylist                  | Pass                                           |   (2.x: Blacklist)
    | Persistence Mode          | Fail                                           |
    | Error                     | Persistence mode for GPU 0 is disabled.        |   (deployment errors)
    +-----  Integration  -------+------------------------------------------------+   (these three are
    | PCIe                      | Pass - All                                     |    printed whenever
    +-----  Hardware  ----------+------------------------------------------------+    GPUs were tested,
    | GPU Memory                | Pass - GPUs: 1, 2, 3                           |    even empty)
    |                           | Fail - GPU: 0                                  |
    | Warning                   | GPU 0 Thermal violations totaling 13.3 second  |   (errors of the GPUs
    |                           | s started at 9.7 seconds into the test for GP  |    that failed)
    +-----  Stress  ------------+------------------------------------------------+
    | Diagnostic                | Warn - All                                     |
    |                           |   Code: (000000000123)                         |
    +---------------------------+------------------------------------------------+

A GPU test's result is `Pass|Fail|Warn|Skip - All` or one row per status with `- GPU: n` / `- GPUs: a, b`; a
deployment test's is a bare `Pass|Fail|Skip`. A test no GPU ran is not printed (nor is Diagnostic when skipped).
A deployment test prints a warning as Fail (HelperDisplayDiagResult).

DCGM 4.x (4.0.0 .. 4.6.0): tests carry their plugin names (software, memory, pcie, diagnostic, targeted_stress,
...), a category header is printed only above tests, and each test row (`Pass|Fail|Warn|Skip|Not Run`, or empty
for not run before 4.5) is followed by its errors not tied to an entity (`Warning`), its info rows in verbose mode
(`Info`), then one row per entity (`GPU0: Pass`, `CPU0: Fail`), each followed by that entity's errors
(`Warning: GPU0`) and info (`Info: GPU0`). An entity row prints a warning as `Fail`; the test row says `Warn`.

Around the table dcgmi prints its own failures (`Error: Unable to complete diagnostic ... Return: (-N) : ...`,
`Error: Diagnostic could not be run while DCGM is paused.`), and `Running iteration i of n...` for `--iterations`.
`dcgmi diag -j` prints the same results as JSON (read too: see `DiagParser._from_json`).

What each message means, and the verdict on a run, are judgements: `gpufleet.health.dcgm_diag`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, cast

from gpufleet.errors import ParseError

Status = Literal["Pass", "Fail", "Warn", "Skip", "Not Run"]
Verdict = Literal["Pass", "Fail", "Warn", "Skip", "Unknown"]
_RANK: dict[str, int] = {"Not Run": 0, "Skip": 0, "Pass": 1, "Warn": 2, "Unknown": 3, "Fail": 4}

MAX_TESTS = 2000
MAX_MESSAGES = 200  # per test
MAX_MESSAGE_CHARS = 8192
MAX_EVIDENCE = 40  # raw rows kept per test
MAX_ENTITIES = 4096  # entity rows per test
MAX_KEPT = 16 * 1024 * 1024  # characters of message text and evidence a report keeps, whatever the input's size
PIECE = 45  # DATA_INFO_TAG_LEN: the width a message is split at

# A test's name as 2.x/3.x display it (dcgmi/Diag.cpp DISPLAY_*) or 4.x names its plugin
# (nvvs/include/PluginStrings.h), to one name; every deployment check is part of 4.x's `software` test.
_CANONICAL = {
    "gpu memory": "memory",
    "targeted stress": "targeted_stress",
    "targeted power": "targeted_power",
    "memory bandwidth": "memory_bandwidth",
    "sm stress": "sm_stress",
    "pulse test": "pulse_test",
    "eud test": "eud",
    "cpu eud test": "cpu_eud",
    "context create": "context_create",
    **dict.fromkeys(
        (
            "deployment",
            "denylist",
            "blacklist",
            "nvml library",
            "cuda main library",
            "cuda toolkit library",
            "permissions and os blocks",
            "persistence mode",
            "environment variables",
            "page retirement",
            "page retirement/row remap",
            "graphics processes",
            "inforom",
            "fabric manager",
        ),
        "software",
    ),
}

# tests each `-r` level adds (nvvs NvidiaValidationSuite.cpp FillTestVectors, 2.4-4.6); a level runs the lower ones
LEVEL_TESTS: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("pcie", "memory"),
    3: (
        "diagnostic",
        "targeted_stress",
        "targeted_power",
        "memory_bandwidth",
        "sm_stress",
        "eud",
        "cpu_eud",
        "nvbandwidth",
        "nccl_tests",
        "rist",
    ),
    4: ("memtest", "pulse_test"),
}
# what a run at a level always shows (Diagnostic is hidden when skipped, EUD needs root, the rest are optional)
REQUIRED_TESTS: dict[int, tuple[str, ...]] = {
    2: ("pcie", "memory"),
    3: ("targeted_stress", "targeted_power", "memory_bandwidth"),
    4: ("memtest", "pulse_test"),
}
_THREE_X_SECTIONS = ("Integration", "Hardware", "Stress")  # printed together whenever GPUs were tested (2.x-3.x)

# DIAG_HEADER / DIAG_FOOTER (2.1-4.6): `+---+---+`, and `+===+===+` under the header row
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
# DIAG_INFO, DIAG_DEPLOYMENT (`|-----  Deployment  ---+---|`), DIAG_HARDWARE/INTEGRATION/STRESS (`+-----  Stress ...+`);
# Metadata from 3.0, Training only in 2.x `--train` runs
_SECTION = re.compile(r"^[|+]-{1,20} +(?P<name>[A-Za-z][A-Za-z /]{0,40}?) +-{1,40}[+|]")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*)$")  # DIAG_DATA, when a paste moved the columns
# a test's result: `Pass` (deployment, 2.x-3.x; every test, 4.x), `Pass - All`, `Fail - GPU: 0`, `Warn - GPUs: 1, 2`
# (2.x-3.x GPU tests), `Not Run` (4.5+; an empty result before)
_RESULT = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<scope>.*))?$")
_ENTITY_GROUPS = r"GPU|vGPU|Switch|GPU_I|GPU_CI|LINK|CPU|CPU_CORE|ConnectX|None"  # DcgmFieldsGetEntityGroupString
# 4.x HelperDisplayEntityResults: `GPU0: Pass` (empty status: not run, 4.0-4.4)
_ENTITY = re.compile(rf"^(?P<group>{_ENTITY_GROUPS})(?P<id>\d{{1,6}}):\s*(?P<status>Pass|Fail|Warn|Skip|Not Run)?$")
# DisplayVerboseInfo labels: `Error` (2.x-3.x deployment errors), `Warning` (2.x-3.x GPU test errors; 4.x errors not
# tied to an entity), `Warning: GPU0` (4.x an entity's errors), `Info` / `Info: GPU0` (verbose)
_LABEL = re.compile(rf"^(?P<label>Error|Warning|Info)(?::\s*(?P<entity>(?:{_ENTITY_GROUPS})\d{{1,6}}))?$")
_CODE_ROW = re.compile(r"^Code:\s*\((?P<code>\d+)\)$")  # 2.x-3.x: under `Diagnostic | Warn - All`
_GPU_MENTION = re.compile(r"\bGPU\s*(\d{1,6})\b")
_ERROR_LINE = re.compile(r"^Error:\s*(?P<text>.*)$")


@dataclass(frozen=True)
class DiagTestResult:
    """One summary result of a test: Pass/Fail/Warn/Skip for all GPUs or for the GPUs it names."""

    status: Status
    gpus: tuple[int, ...] | None  # None: all GPUs (or the test's own status, with no GPU named)
    cut: bool = False  # the GPU list ended in `...`: dcgmi cut the row at its column width


@dataclass(frozen=True)
class DiagEntityResult:
    """A 4.x per-entity row: `GPU0: Pass`."""

    group: str
    id: int
    status: Status | None  # None: printed empty (not run, DCGM 4.0)

    @property
    def name(self) -> str:
        return f"{self.group}{self.id}"


@dataclass
class DiagMessage:
    severity: Literal["error", "warning", "info"]  # from the row label: Error, Warning (an error in 3.x+), Info
    text: str
    entity: str | None = None  # 4.x: the entity a `Warning: GPU0` row is for
    lines: list[str] = field(default_factory=list)
    open: bool = True  # the last piece filled its column: the next continuation row may still be this text
    dcgm_severity: int | None = None  # JSON only: error_severity (dcgmErrorSeverity_t; 1 is MONITOR)

    @property
    def gpus(self) -> tuple[int, ...]:
        if self.entity is not None and self.entity.startswith("GPU") and self.entity[3:].isdigit():
            return (int(self.entity[3:]),)
        return tuple(sorted({int(g) for g in _GPU_MENTION.findall(self.text)}))

    @property
    def is_reason(self) -> bool:
        return self.severity != "info"


@dataclass
class DiagTest:
    name: str
    category: str
    results: list[DiagTestResult] = field(default_factory=list)
    messages: list[DiagMessage] = field(default_factory=list)
    entities: list[DiagEntityResult] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the rows as printed, for evidence
    code: str | None = None  # 2.x-3.x: the hardware diagnostic's return code under `Warn - All`

    @property
    def key(self) -> str:
        """The test's name across DCGM versions (`GPU Memory` and `memory` are both `memory`)."""
        return canonical_test(self.name)

    @property
    def status(self) -> Status:
        """The result dcgmi printed for the test (a bare Error row before any result reads as Fail)."""
        if self.results:
            return _worst(r.status for r in self.results)
        if self.entities:
            return _worst(e.status or "Not Run" for e in self.entities)
        if any(m.severity == "error" for m in self.messages):
            return "Fail"
        if any(m.severity == "warning" for m in self.messages):
            return "Warn"
        return "Skip"

    def failed_gpus(self) -> tuple[int, ...]:
        found = {g for r in self.results if r.status == "Fail" for g in (r.gpus or ())}
        found |= {e.id for e in self.entities if e.group == "GPU" and e.status == "Fail"}
        found |= {g for m in self.messages if m.severity == "error" for g in m.gpus}
        return tuple(sorted(found))

    def gpu_ids(self) -> set[int]:
        ids = {g for r in self.results for g in (r.gpus or ())}
        return ids | {e.id for e in self.entities if e.group == "GPU"}


@dataclass
class DiagLine:
    """A line dcgmi printed outside the table: its own failure, or what it said about iterations."""

    text: str
    line: int


@dataclass
class DiagReport:
    tests: list[DiagTest]
    metadata: dict[str, str] = field(default_factory=dict)
    level: int | None = None  # the -r level the caller ran, or the lowest level that explains the tests seen
    errors: list[DiagLine] = field(default_factory=list)  # dcgmi's `Error: ...` lines around the table
    gaps: list[str] = field(default_factory=list)  # why the output is not whole: cut, or rows missing
    notes: list[str] = field(default_factory=list)
    layout: str = ""  # "2.x-3.x" or "4.x" when the rows tell
    open_end: bool = False  # the output ends inside the table: the last test's rows may go on

    @property
    def complete(self) -> bool:
        return not self.gaps

    @property
    def verdict(self) -> Status:
        """What dcgmi itself said overall (its worst test result), before any judgement of why."""
        statuses = [t.status for t in self.tests if t.status not in ("Skip", "Not Run")]
        return _worst(statuses) if statuses else "Skip"

    def test(self, name: str) -> DiagTest:
        for t in self.tests:
            if t.name.lower() == name.lower():
                return t
        raise KeyError(name)


def _worst(statuses: Iterable[str]) -> Status:
    return cast(Status, max(statuses, key=lambda s: _RANK[s], default="Skip"))


def canonical_test(name: str) -> str:
    key = " ".join(name.lower().split())
    return _CANONICAL.get(key, key.replace(" ", "_"))


def inferred_level(tests: list[DiagTest]) -> int | None:
    """The lowest `-r` level whose test list covers every test that ran (None when no test is known)."""
    names = {t.key for t in tests if t.status not in ("Skip", "Not Run") or t.results or t.entities}
    levels = [lvl for lvl, known in LEVEL_TESTS.items() for n in names if n in known]
    return max(levels) if levels else None


def _scope(text: str | None) -> tuple[tuple[int, ...] | None, bool]:
    """The GPUs a result names (None: all), and whether dcgmi cut the list at its column width."""
    if text is None or text.strip().lower() in ("", "all"):
        return None, False
    cut = text.rstrip().endswith("...")
    ids = re.findall(r"\d{1,6}", text.split(":", 1)[-1])
    return (tuple(int(i) for i in ids) if ids else None), cut


class DiagParser:
    """Reads `dcgmi diag` output one line at a time; `finish()` gives the report."""

    def __init__(self, source: str = "dcgmi diag") -> None:
        self.source = source
        self.tests: list[DiagTest] = []
        self.metadata: dict[str, str] = {}
        self.errors: list[DiagLine] = []
        self.notes: list[str] = []
        self.gaps: list[str] = []
        self.sections: list[str] = []
        self.category = ""
        self.current: DiagTest | None = None
        self.message: DiagMessage | None = None
        self.error_open = False  # the last line was an `Error:` line whose text may go on
        self.lineno = 0
        self.rows = 0
        self.headers = 0  # `| Diagnostic | Result |` rows seen
        self.tables_open = 0  # tables whose closing border has not come yet
        self.after_header = False
        self.unreadable: list[str] = []
        self.dropped_tests = 0
        self.kept = 0  # characters of text and rows held
        self.json_lines: list[str] | None = None  # the output of `dcgmi diag -j`, held whole to be decoded
        self.any_line = False  # a non-blank line was seen
        self.json_size = 0

    @property
    def has_content(self) -> bool:
        """Whether anything dcgmi prints was seen: a table row, its own error, or its JSON output."""
        return bool(self.rows or self.errors or self.json_lines)

    def _json_line(self, line: str) -> None:
        self.json_size += len(line) + 1
        if self.json_size <= MAX_KEPT and self.json_lines is not None:
            self.json_lines.append(line)
        elif self.json_size - len(line) - 1 <= MAX_KEPT:
            self.gaps.append(f"the JSON output is larger than {MAX_KEPT // (1024 * 1024)} MiB: not read whole")

    def _keep(self, size: int) -> bool:
        """Whether `size` more characters may be held; past MAX_KEPT the report says its reasons may be missing."""
        self.kept += size
        if self.kept <= MAX_KEPT:
            return True
        if self.kept - size <= MAX_KEPT:
            self.gaps.append(f"more than {MAX_KEPT // (1024 * 1024)} MiB of rows: the rest kept without their text")
        return False

    # -- lines ------------------------------------------------------------------------------------------------
    def feed(self, raw: str) -> None:
        self.lineno += 1
        line = raw.rstrip("\r\n").rstrip()
        stripped = line.strip()
        if self.json_lines is not None:
            self._json_line(line)
            return
        if not stripped:
            self.error_open = False
            return
        if stripped.startswith("{") and not self.any_line:  # `dcgmi diag -j` starts with its object
            self.json_lines = []
            self._json_line(line)
            return
        self.any_line = True
        if _BORDER.match(stripped):
            self._border(stripped)
            return
        section = _SECTION.match(stripped)
        if section is not None:
            self.error_open = False
            self.category, self.current, self.message = section.group("name").strip(), None, None
            self.sections.append(self.category)
            return
        if stripped.startswith("|"):
            self.error_open = False
            self._row(stripped)
            return
        self._outside(stripped)

    def _border(self, line: str) -> None:
        self.error_open = False
        self.message = None
        if "=" in line:
            self.after_header = True
            return
        if self.after_header or (self.rows and self.tables_open):
            self.tables_open = max(0, self.tables_open - 1)  # the closing border
            self.after_header = False
            self.current = None
        else:
            self.tables_open += 1  # the top border of a table

    def _outside(self, line: str) -> None:
        error = _ERROR_LINE.match(line)
        if error is not None:
            if len(self.errors) < 50:
                self.errors.append(DiagLine(error.group("text").strip() or line, self.lineno))
            self.error_open = True
            return
        if line.startswith("Aborting the iterative runs of the diagnostic"):
            if len(self.errors) < 50:
                self.errors.append(DiagLine(line, self.lineno))
            return
        if line.startswith("Running iteration") and len(self.notes) < 20:
            self.notes.append(line.rstrip("."))
            return
        if self.error_open and self.errors and len(self.errors[-1].text) < MAX_MESSAGE_CHARS:
            self.errors[-1].text += " " + line  # a system error's next line

    def _split(self, line: str) -> tuple[str, str, str, bool] | None:
        """A row's name, its value piece (as printed, for joining messages), its value, and whether the piece
        filled its column (a message may go on in the next row)."""
        if len(line) > 30 and line[28] == "|":  # dcgmi's own layout: the name column is always 25 wide
            name = line[1:28].strip()
            piece = line[30 : 30 + PIECE]
            rest = line[30:]
            value = rest[:-1] if rest.endswith("|") else rest
            if not line.endswith("|") or len(line) < 30 + PIECE:
                piece = value.rstrip()
            return name, piece, value.strip(), len(piece.rstrip()) >= PIECE - 1
        row = _ROW.match(line)
        if row is None:
            return None
        value = row.group("value")
        value = value[:-1] if value.rstrip().endswith("|") and value.rstrip() != "|" else value
        value = value.rstrip().removesuffix("|")
        piece = value[1:] if value.startswith(" ") else value
        return row.group("name").strip(), piece.rstrip(), value.strip(), True

    def _row(self, line: str) -> None:
        split = self._split(line)
        if split is None:
            return
        name, piece, value, full = split
        self.rows += 1
        if self.tables_open == 0 and not self.after_header and self.headers:
            self.tables_open = 1  # rows after a closing border: another table whose top border was lost
        if name == "Diagnostic" and value == "Result":
            self.headers += 1
            self.tables_open = max(self.tables_open, 1)
            return
        if self.category.lower() == "metadata":
            self._metadata(name, value)
            return
        if name:
            self._named_row(name, piece, value, full, line)
        else:
            self._continuation(piece, value, full, line)

    def _metadata(self, name: str, value: str) -> None:
        if name:
            if len(self.metadata) < 100:
                self.metadata[name[:100]] = value[:1000]
        elif self.metadata:
            last = list(self.metadata)[-1]
            self.metadata[last] = (self.metadata[last] + value)[:1000]

    def _named_row(self, name: str, piece: str, value: str, full: bool, line: str) -> None:
        label = _LABEL.match(name)
        if label is not None:
            test = self.current
            if test is None:  # an error with no test above it (an excerpt, or a deployment stop): the section's
                test = self._new_test(self.category or "Unnamed", line)
                if test is None:
                    return
            else:
                self._evidence(test, line)
            kind = label.group("label").lower()
            kept = self._keep(len(piece) + len(line))
            self.message = DiagMessage(kind, piece if kept else "", label.group("entity"), [line] if kept else [], full)  # type: ignore[arg-type]
            if len(test.messages) < MAX_MESSAGES:
                test.messages.append(self.message)
            else:
                self.gaps.append(f"{test.name}: more than {MAX_MESSAGES} messages, the rest not read")
            return
        self.message = None
        test = self._new_test(name, line)
        if test is not None:
            self._result(test, value, line)

    def _continuation(self, piece: str, value: str, full: bool, line: str) -> None:
        test = self.current
        entity = _ENTITY.match(value)
        if test is not None and entity is not None:
            self.message = None
            status = entity.group("status")
            if len(test.entities) < MAX_ENTITIES:
                test.entities.append(DiagEntityResult(entity.group("group"), int(entity.group("id")), status))  # type: ignore[arg-type]
            self._evidence(test, line)
            return
        message = self.message
        if message is not None and (message.open or not (_RESULT.match(value) or _CODE_ROW.match(value))):
            if len(message.text) < MAX_MESSAGE_CHARS and self._keep(len(piece)):
                message.text += piece
            if len(message.lines) < MAX_EVIDENCE and self._keep(len(line)):
                message.lines.append(line)
            message.open = full
            if test is not None:
                self._evidence(test, line)
            return
        if test is None:
            self._unreadable(line)
            return
        self._evidence(test, line)
        code = _CODE_ROW.match(value)
        if code is not None:
            test.code = code.group("code")
        elif _RESULT.match(value):
            self._result(test, value, line)
        else:
            self._unreadable(line)

    def _new_test(self, name: str, line: str) -> DiagTest | None:
        if len(self.tests) >= MAX_TESTS:
            self.dropped_tests += 1
            self.current = None
            return None
        name = name[:100]
        self.current = DiagTest(name=name, category=self.category, lines=[line] if self._keep(len(line)) else [])
        self.tests.append(self.current)
        return self.current

    def _evidence(self, test: DiagTest, line: str) -> None:
        if len(test.lines) < MAX_EVIDENCE and self._keep(len(line)):
            test.lines.append(line)

    def _result(self, test: DiagTest, value: str, line: str) -> None:
        if value == "":
            test.results.append(DiagTestResult("Not Run", None))  # DCGM 4.0 prints a test not run as empty
            return
        result = _RESULT.match(value)
        if result is None:
            self._unreadable(line)
            return
        gpus, cut = _scope(result.group("scope"))
        test.results.append(DiagTestResult(result.group("status"), gpus, cut))  # type: ignore[arg-type]

    def _unreadable(self, line: str) -> None:
        if len(self.unreadable) < 20:
            self.unreadable.append(line)

    # -- the whole --------------------------------------------------------------------------------------------
    def finish(self, level: int | None = None) -> DiagReport:
        if self.json_lines is not None:
            self._from_json("\n".join(self.json_lines))
            self.json_lines = None
        for test in self.tests:
            for msg in test.messages:
                msg.text = " ".join(msg.text.split())
        report = DiagReport(
            tests=self.tests,
            metadata=self.metadata,
            level=level if level is not None else inferred_level(self.tests),
            errors=self.errors,
            gaps=self.gaps,
            notes=self.notes,
            layout=_layout(self.tests),
        )
        if self.unreadable:
            report.notes.append(f"{len(self.unreadable)} table row(s) could not be read, e.g. {self.unreadable[0]!r}")
        if self.dropped_tests:
            report.gaps.append(f"more than {MAX_TESTS} tests: {self.dropped_tests} not read")
        if self.rows:
            self._structure_gaps(report)
            report.open_end = bool(self.tables_open or self.after_header or not self.headers)
        elif self.tests:  # from JSON, which decodes whole or not at all
            report.gaps.extend(_coverage_gaps(self.tests, report.metadata))
        return report

    # -- `dcgmi diag -j` ---------------------------------------------------------------------------------------
    def _from_json(self, text: str) -> None:
        """The JSON renderer's tree (Diag.cpp HelperDisplayAsJson; NvvsJsonStrings.h): `DCGM GPU Diagnostic` (2.x-3.x,
        one result per GPU with `gpu_id`) or `DCGM Diagnostic` (4.x, one per entity with `entity_group` and
        `entity_id`, and a `test_summary`), its `test_categories` of `tests`, each result's `warnings`; `iterations`
        with `--iterations`; `runtime_error` when the diagnostic could not run."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            self.gaps.append("the JSON output does not decode: it was cut or damaged")
            return
        if not isinstance(data, dict):
            self.gaps.append("the JSON output is not dcgmi's")
            return
        bodies = [data[k] for k in _JSON_ROOTS if isinstance(data.get(k), dict)]
        for iteration in _dicts(data.get("iterations")):
            bodies += [iteration[k] for k in _JSON_ROOTS if isinstance(iteration.get(k), dict)]
        if not bodies:
            self.gaps.append("the JSON output has no `DCGM Diagnostic` object")
        meta = data.get("metadata")
        for key, value in meta.items() if isinstance(meta, dict) else []:
            self.metadata[str(key)[:100]] = str(value)[:1000]
        for body in bodies:
            error = body.get("runtime_error")
            if isinstance(error, str) and error.strip() and len(self.errors) < 50:
                self.errors.append(DiagLine(error.strip().removeprefix("Error:").strip(), 0))
            for key in ("version", "Driver Version Detected"):
                if isinstance(body.get(key), str):
                    self.metadata.setdefault("DCGM Version" if key == "version" else key, body[key][:1000])
            for category in _dicts(body.get("test_categories")):
                name = str(category.get("category", ""))[:40]
                for test in _dicts(category.get("tests")):
                    self._json_test(name, test)

    def _json_test(self, category: str, entry: dict[str, object]) -> None:
        self.category = category
        test = self._new_test(str(entry.get("name", "?")), json.dumps(entry, default=str)[:300])
        if test is None:
            return
        seen: set[str] = set()
        for result in _dicts(entry.get("results")):
            status = _json_status(result.get("status"))
            entity = _json_entity(result)
            if status is not None and entity is not None and len(test.entities) < MAX_ENTITIES:
                test.entities.append(DiagEntityResult(entity[0], entity[1], status))
            elif status is not None:
                test.results.append(DiagTestResult(status, None))
            label = f"{entity[0]}{entity[1]}" if entity else None
            for text, kind, severity in _json_messages(result):
                seen.add(text)
                test.messages.append(DiagMessage(kind, text[:MAX_MESSAGE_CHARS], label, [text[:300]], False, severity))
        summary = entry.get("test_summary")
        if isinstance(summary, dict):
            status = _json_status(summary.get("status"))
            if status is not None:
                test.results.append(DiagTestResult(status, None))
            for text, kind, severity in _json_messages(summary):
                if text not in seen:  # the summary repeats every entity's errors: only the test's own are new
                    test.messages.append(
                        DiagMessage(kind, text[:MAX_MESSAGE_CHARS], None, [text[:300]], False, severity)
                    )
        del test.messages[MAX_MESSAGES:]

    def _structure_gaps(self, report: DiagReport) -> None:
        tested = [t for t in self.tests if t.results or t.entities or t.messages]
        if not self.headers:
            report.gaps.append("the output starts inside the table (no `| Diagnostic | Result |` header)")
        if self.tables_open or self.after_header:
            report.gaps.append("the table has no closing border: the output was cut")
        elif report.layout == "2.x-3.x" and "Training" not in self.sections:
            missing = [s for s in ("Deployment", *_THREE_X_SECTIONS) if s not in self.sections]
            seen_gpu_sections = any(s in self.sections for s in _THREE_X_SECTIONS)
            if ("Deployment" in missing and self.headers) or (seen_gpu_sections and len(missing) > 0):
                report.gaps.append(f"the {', '.join(missing)} section header(s) are missing: lines were dropped")
        report.gaps.extend(_coverage_gaps(tested, report.metadata))


def _layout(tests: list[DiagTest]) -> str:
    if any(t.entities for t in tests) or any(t.name in _FOUR_X_NAMES for t in tests):
        return "4.x"
    if any(r.gpus is not None or r.status != "Not Run" for t in tests for r in t.results):
        return "2.x-3.x"
    return ""


_FOUR_X_NAMES = frozenset(
    {"software", "memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth",
     "memtest", "pulse_test", "eud", "cpu_eud", "nvbandwidth", "nccl_tests", "rist", "context_create", "sm_stress"}
)  # fmt: skip


_JSON_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 2.x-3.x (NVVS_NAME in NvvsJsonStrings.h)


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)][:MAX_TESTS] if isinstance(value, list) else []


def _json_status(value: object) -> Status | None:
    text = str(value).split(" - ")[0].strip() if isinstance(value, str) else ""
    return text if text in _RANK and text != "Unknown" else None  # type: ignore[return-value]


def _json_entity(result: dict[str, object]) -> tuple[str, int] | None:
    group, ident = result.get("entity_group"), result.get("entity_id")
    if isinstance(group, str) and isinstance(ident, int) and 0 <= ident < 10**6:
        return group[:20], ident
    gpu = result.get("gpu_id")
    if isinstance(gpu, str | int) and str(gpu).isdigit() and len(str(gpu)) <= 6:
        return "GPU", int(gpu)
    return None


def _json_messages(result: dict[str, object]) -> list[tuple[str, Literal["error", "warning", "info"], int | None]]:
    out: list[tuple[str, Literal["error", "warning", "info"], int | None]] = []
    warnings = result.get("warnings")
    for warning in warnings if isinstance(warnings, list) else []:
        text = warning.get("warning", warning.get("warnings")) if isinstance(warning, dict) else warning
        severity = warning.get("error_severity") if isinstance(warning, dict) else None
        if isinstance(text, str) and text.strip():  # 3.x deployment entries carry the text under `warnings`
            out.append((" ".join(text.split()), "warning", severity if isinstance(severity, int) else None))
    info = result.get("info")
    for text in info if isinstance(info, list) else [info]:
        if isinstance(text, str) and text.strip():
            out.append((" ".join(text.split()), "info", None))
    return out[:MAX_MESSAGES]


def _device_count(metadata: dict[str, str]) -> int | None:
    ids = metadata.get("GPU Device IDs Detected", "").strip()
    if not ids or ids.endswith("..."):
        return None
    return len([i for i in ids.split(",") if i.strip()])


def _coverage_gaps(tests: list[DiagTest], metadata: dict[str, str]) -> list[str]:
    """A GPU that one test lists and another (that lists GPUs) does not: a row of that test was dropped."""
    listing: list[tuple[DiagTest, set[int]]] = []
    for test in tests:
        if test.entities:
            listing.append((test, {e.id for e in test.entities if e.group == "GPU"}))
        elif test.results and all(r.gpus is not None for r in test.results) and not any(r.cut for r in test.results):
            listing.append((test, test.gpu_ids()))
    listing = [(t, ids) for t, ids in listing if ids]
    if not listing:
        return []
    every = set().union(*(ids for _, ids in listing))
    gaps = []
    for test, ids in listing:
        if ids != every:
            missing = ", ".join(map(str, sorted(every - ids)))
            gaps.append(f"{test.name} has no result for GPU {missing}, which other tests list: rows were dropped")
    count = _device_count(metadata)
    if count is not None and len(every) < count:
        gaps.append(f"{count} GPUs were detected but the results name only {len(every)}: rows were dropped")
    return gaps[:10]


def parse_diag(text: str, *, level: int | None = None, source: str = "dcgmi diag") -> DiagReport:
    """Parse `dcgmi diag -r N` output. `level` is the -r the run used when the caller knows it."""
    return read_diag(text.splitlines(), level=level, source=source)


def read_diag(lines: Iterable[str], *, level: int | None = None, source: str = "dcgmi diag") -> DiagReport:
    """Parse `dcgmi diag` output given as lines (streamed: nothing is held but the parsed rows)."""
    parser = DiagParser(source)
    for line in lines:
        parser.feed(line)
    if not parser.has_content:
        raise ParseError(f"{source}: no dcgmi diag table found", fix="pass the output of `dcgmi diag -r N`")
    return parser.finish(level)
