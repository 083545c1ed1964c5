"""The verdict on a `dcgmi diag` run: what each of its messages means (a hardware fault, a setting, or the
diagnostic's own failure), each test's verdict and the run's, the judgement `gpufleet diag` and `gpufleet triage`
share.

The meanings come from data/dcgm_diag_messages.csv, built from DCGM's message formats (dcgm_errors.h) and their
categories. A failure whose every reason is the diagnostic's own says nothing about the GPUs: the run is unknown,
never faulty; an output that is cut or lacks its level's tests is unknown, never a pass.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Literal

from gpufleet.catalog.setup_errors import setup_error
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_diag import (
    MAX_EVIDENCE,
    REQUIRED_TESTS,
    DiagMessage,
    DiagReport,
    DiagTest,
    Status,
    Verdict,
)

Kind = Literal["hardware", "config", "diagnostic", "unknown"]
MAX_CLASSIFIED = 2048  # DCGM's message buffers are 512 or 1024 characters; more is not its text


# -- what the messages mean ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageRule:
    id: str
    kind: Kind
    pattern: re.Pattern[str]
    weight: int  # how much literal text it matches: the most specific rule wins
    fix: str
    dcgm: str


_PRINTF = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?([diouxXfFeEgGsScp%])")


def _printf_regex(fmt: str) -> tuple[str, int]:
    """A DCGM printf format as a regex, and how many literal characters it holds. A number matches only where a
    run of digits starts, and a leading or trailing %s is left out: a long run of digits or text in a damaged
    message then costs one pass, not one per character."""
    out: list[str] = []
    literal = 0
    at = 0
    for spec in _PRINTF.finditer(fmt):
        chunk = fmt[at : spec.start()]
        literal += len(chunk)
        out.append(r"\s*".join(re.escape(word) for word in chunk.split(" ")))
        conv = spec.group(1)
        if conv == "%":
            out.append("%")
        elif conv in "sS":
            out.append(".*?")
        elif conv in "fFeEgG":
            out.append(r"(?<![\w.])[-+]?(?:\d++(?:\.\d*+)?(?:e[-+]?\d++)?|\.\d++|nan|inf)")
        elif conv in "xX" or "#" in spec.group(0):
            out.append(r"(?<!\w)(?:0x)?[0-9a-f]++")
        else:
            out.append(r"(?<![\w.])[-+]?\d++")
        at = spec.end()
    chunk = fmt[at:]
    literal += len(chunk)
    out.append(r"\s*".join(re.escape(word) for word in chunk.split(" ")))
    pattern = "".join(out)
    while pattern.startswith(".*?"):
        pattern = pattern[3:]
    while pattern.endswith(".*?"):
        pattern = pattern[:-3]
    return pattern, literal


@cache
def message_rules() -> tuple[MessageRule, ...]:
    """The rules of data/dcgm_diag_messages.csv (DCGM's message formats and in-place texts)."""
    text = resources.files("gpufleet.health").joinpath("data", "dcgm_diag_messages.csv").read_text(encoding="utf-8")
    rows = csv.DictReader(io.StringIO("".join(line for line in text.splitlines(True) if not line.startswith("#"))))
    rules = []
    for row in rows:
        fix = row["fix"]
        if row["match"] == "printf":
            pattern, weight = _printf_regex(row["pattern"].rstrip(". "))
        elif row["match"] == "catalog":  # a setup error (CUDA's, NVML's words): its texts and fix are the catalog's
            error = setup_error(row["pattern"])
            pattern, weight = "|".join(f"(?:{p})" for p in error.patterns), len(error.message)
            fix = fix or f"{error.fix}; then rerun the diagnostic"
        else:
            pattern, weight = row["pattern"], 10
        rules.append(
            MessageRule(row["id"], row["kind"], re.compile(pattern, re.IGNORECASE), weight, fix, row["dcgm"])  # type: ignore[arg-type]
        )
    return tuple(rules)


def classify_message(text: str) -> MessageRule | None:
    """The most specific rule whose message the text holds, or None when no rule knows it."""
    return _classify(" ".join(text[: 4 * MAX_CLASSIFIED].split())[:MAX_CLASSIFIED])


@lru_cache(maxsize=1024)  # dcgmi repeats one message for every GPU it hit
def _classify(flat: str) -> MessageRule | None:
    best: MessageRule | None = None
    for rule in message_rules():
        if (best is None or rule.weight > best.weight) and rule.pattern.search(flat):
            best = rule
    return best


# -- the judgement ----------------------------------------------------------------------------------------------
_DCGM_ERROR_MONITOR = 1  # dcgm_errors.h dcgmErrorSeverity_t: can perform workload, but needs to be monitored
_GENERIC_FIX: dict[str, str] = {
    "hardware": "drain the node and rerun `dcgmi diag -r 3`; a repeated hardware failure means replacement",
    "config": "fix the setting it names, then rerun the diagnostic",
    "diagnostic": "the diagnostic itself failed, not the GPUs: check nv-hostengine's log, restart nvidia-dcgm and "
    "rerun the diagnostic",
}


@dataclass
class DiagIssue:
    """One reason a test did not pass, judged: a hardware fault, a node setting, or the diagnostic's own error."""

    test: str
    kind: Kind
    severity: Severity
    gpus: tuple[int, ...] | None  # None: not tied to a GPU (the node, or the GPUs are not named)
    message: str
    fix: str
    rule: str = ""  # the DCGM code or text rule that classified it
    evidence: list[str] = field(default_factory=list)
    where: str = ""  # an entity other than a GPU (`CPU0`, `Switch1`) when the failure names one

    @property
    def entity(self) -> str:
        if self.where:
            return self.where
        if self.gpus is None:
            return "node"
        return ("GPU " if len(self.gpus) == 1 else "GPUs ") + ", ".join(map(str, self.gpus))


@dataclass
class TestVerdict:
    test: DiagTest
    status: Verdict
    detail: str


@dataclass
class DiagAssessment:
    """The judgement of one `dcgmi diag` output: per test, the issues found, and why it may not be whole."""

    report: DiagReport
    tests: list[TestVerdict] = field(default_factory=list)
    issues: list[DiagIssue] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)  # the output is cut or lacks rows: a Pass cannot be trusted
    notes: list[str] = field(default_factory=list)

    @property
    def own_errors(self) -> list[DiagIssue]:
        return [i for i in self.issues if i.kind == "diagnostic" and i.severity is Severity.info]

    @property
    def verdict(self) -> Verdict:
        severities = {i.severity for i in self.issues if i.kind != "diagnostic" or i.severity is not Severity.info}
        if Severity.critical in severities:
            return "Fail"  # a failure already seen stands, cut or not
        ran = [t for t in self.tests if t.status not in ("Skip",)]
        if self.gaps or self.own_errors or not ran:
            return "Unknown"
        return "Warn" if Severity.warning in severities else "Pass"


@dataclass
class _Unit:
    """A failing piece of a test: GPUs with one status and the messages that explain it."""

    gpus: tuple[int, ...] | None
    status: Status
    messages: list[DiagMessage]
    where: str = ""  # a failing entity that is not a GPU


def _units(test: DiagTest) -> list[_Unit]:
    status = test.status
    reasons = [m for m in test.messages if m.is_reason]
    units: list[_Unit] = []
    if test.entities:
        cap = status if status in ("Warn", "Fail") else "Fail"  # an entity row prints a warning as Fail
        failing = [e for e in test.entities if e.group == "GPU" and e.status in ("Fail", "Warn")]
        for entity in failing:
            own = [m for m in reasons if m.entity == entity.name]
            entity_status: Status = "Warn" if cap == "Warn" or entity.status == "Warn" else "Fail"
            units.append(_Unit((entity.id,), entity_status, own or [m for m in reasons if m.entity is None]))
        others = [e for e in test.entities if e.group != "GPU" and e.status in ("Fail", "Warn")]
        for entity in others:
            units.append(_Unit(None, cap, [m for m in reasons if m.entity == entity.name], entity.name))
        global_reasons = [m for m in reasons if m.entity is None]
        if status in ("Fail", "Warn") and not failing and not others:
            units.append(_Unit(None, status, global_reasons))
        return units
    failing_results = [r for r in test.results if r.status in ("Fail", "Warn")]
    for result in failing_results:
        units.append(_Unit(result.gpus, result.status, reasons))
    if not failing_results and status in ("Fail", "Warn"):  # a reason row with no result row above it
        gpus = tuple(sorted({g for m in reasons for g in m.gpus})) or None
        units.append(_Unit(gpus, status, reasons))
    return units


def _judge_unit(test: DiagTest, unit: _Unit, open_end: bool = False) -> list[DiagIssue]:
    """`open_end`: the output ends inside this test, so reasons may be missing: only a reason DCGM's formats name
    as a hardware fault (or a setting) is trusted; anything less leaves the failure unexplained, not a GPU fault."""
    severity = Severity.critical if unit.status == "Fail" else Severity.warning
    reasons = [m for m in unit.messages if m.is_reason]
    if reasons and all(m.dcgm_severity == _DCGM_ERROR_MONITOR for m in reasons):
        severity = Severity.warning  # 4.x JSON prints a warning as Fail; DCGM rates these "monitor", not "isolate"
    if open_end and not any(
        (rule := classify_message(m.text)) is not None and rule.kind in ("hardware", "config") for m in unit.messages
    ):
        where = unit.where or ("all GPUs" if unit.gpus is None else "GPU " + ", ".join(map(str, unit.gpus)))
        return [
            DiagIssue(test.name, "unknown", Severity.info, unit.gpus,
                      f"{test.name} says {unit.status} on {where}, but the output ends before its reasons: a GPU "
                      "fault cannot be told from the diagnostic's own error", "pass the whole output, or rerun",
                      "", test.lines[:8], unit.where)
        ]  # fmt: skip
    if not unit.messages:
        if (
            unit.gpus is None and test.entities and not unit.where
        ):  # 4.x: the test failed, yet no entity failed and no reason given
            return [
                DiagIssue(test.name, "diagnostic", Severity.info, None,
                          f"{test.name} says {unit.status} but names no GPU and no reason",
                          "rerun the diagnostic; if it repeats, read nv-hostengine's log", "", test.lines[:8])
            ]  # fmt: skip
        where = unit.where or ("all GPUs" if unit.gpus is None else "GPU " + ", ".join(map(str, unit.gpus)))
        verb = "failed" if unit.status == "Fail" else "warned"
        return [DiagIssue(test.name, "hardware", severity, unit.gpus, f"{test.name} {verb} on {where}",
                          _GENERIC_FIX["hardware"], "", test.lines[:8], unit.where)]  # fmt: skip
    judged = [(m, classify_message(m.text)) for m in unit.messages]
    hardware = [(m, r) for m, r in judged if r is None or r.kind == "hardware"]
    config = [(m, r) for m, r in judged if r is not None and r.kind == "config"]
    own = [(m, r) for m, r in judged if r is not None and r.kind == "diagnostic"]
    issues: list[DiagIssue] = []
    if hardware:
        msg, rule = hardware[0]
        gpus = unit.gpus
        if gpus is None:
            named = tuple(sorted({g for m, _ in hardware for g in m.gpus}))
            gpus = named or None
        issues.append(
            DiagIssue(test.name, "hardware", severity, gpus, msg.text, _fix(rule, "hardware"),
                      rule.id if rule else "", _lines(m for m, _ in hardware), unit.where)
        )  # fmt: skip
    elif config:
        msg, rule = config[0]
        issues.append(
            DiagIssue(test.name, "config", Severity.warning, None, msg.text, _fix(rule, "config"),
                      rule.id if rule else "", _lines(m for m, _ in config))
        )  # fmt: skip
    if own and not hardware:
        msg, rule = own[0]
        more = f" ({len(own) - 1} more like it)" if len(own) > 1 else ""
        issues.append(
            DiagIssue(test.name, "diagnostic", Severity.info, None,
                      f"the diagnostic itself failed, not the GPUs: {msg.text}{more}", _fix(rule, "diagnostic"),
                      rule.id if rule else "", _lines(m for m, _ in own))
        )  # fmt: skip
    return issues


def _fix(rule: MessageRule | None, kind: str) -> str:
    if rule is None or not rule.fix:
        return _GENERIC_FIX[kind]
    if kind == "hardware":
        return f"{rule.fix} ({_GENERIC_FIX['hardware']})"
    return rule.fix


def _lines(messages: Iterable[DiagMessage]) -> list[str]:
    out: list[str] = []
    for msg in messages:
        out.extend(msg.lines)
        if len(out) >= MAX_EVIDENCE:
            break
    return out[:MAX_EVIDENCE]


def _dedupe(issues: list[DiagIssue]) -> list[DiagIssue]:
    """One issue per test, kind, GPUs and rule: dcgmi repeats an error for every GPU it hit."""
    seen: dict[tuple[str, str, tuple[int, ...] | None, str, str], DiagIssue] = {}
    for issue in issues:
        key = (issue.test, issue.kind, issue.gpus, issue.rule, issue.severity)
        if key in seen:
            kept = seen[key]
            kept.evidence = (kept.evidence + issue.evidence)[:MAX_EVIDENCE]
        else:
            seen[key] = issue
    return list(seen.values())


def assess(report: DiagReport, level: int | None = None) -> DiagAssessment:
    """Judge a parsed run: each failing test's reasons say whether the GPUs, a setting, or the diagnostic itself
    failed. `level` (the -r the run was asked for) adds a check that its tests are all there."""
    out = DiagAssessment(report, gaps=list(report.gaps), notes=list(report.notes))
    last = report.tests[-1] if report.tests and report.open_end else None
    for test in report.tests:
        issues = _dedupe([i for unit in _units(test) for i in _judge_unit(test, unit, test is last)])
        if test.status == "Pass" and not issues:
            for msg in [m for m in test.messages if m.is_reason][:3]:  # passed, yet an error recorded (DCGM#284)
                out.notes.append(f"{test.name} passed but recorded: {msg.text[:200]}")
        out.issues.extend(issues)
        out.tests.append(TestVerdict(test, _test_verdict(test, issues), _detail(test, issues)))
    for error in report.errors:
        rule = classify_message(error.text)
        if rule is not None and rule.kind == "hardware":
            out.issues.append(DiagIssue("dcgmi", "hardware", Severity.critical, None, error.text,
                                        _fix(rule, "hardware"), rule.id, [error.text]))  # fmt: skip
        else:
            out.issues.append(
                DiagIssue("dcgmi", "diagnostic", Severity.info, None, f"the diagnostic did not run: {error.text}",
                          _fix(rule, "diagnostic"), rule.id if rule else "", [error.text])
            )  # fmt: skip
    skipped = [t.name for t in report.tests if t.status in ("Skip", "Not Run")]
    if skipped:
        out.notes.append(f"not run or skipped: {', '.join(skipped[:20])}")
    if level is not None:
        out.gaps.extend(_level_gaps(report, level, out))
    return out


def _test_verdict(test: DiagTest, issues: list[DiagIssue]) -> Verdict:
    if any(i.severity is Severity.critical for i in issues):
        return "Fail"
    if any(i.severity is Severity.warning for i in issues):
        return "Warn"
    if issues:  # only the diagnostic's own errors
        return "Unknown"
    status = test.status
    return "Skip" if status == "Not Run" else status


def _detail(test: DiagTest, issues: list[DiagIssue]) -> str:
    if not issues:
        return test.status
    return "; ".join(f"{i.message} ({i.fix})" if i.kind != "hardware" else i.message for i in issues)[:1000]


def _level_gaps(report: DiagReport, level: int, out: DiagAssessment) -> list[str]:
    """The tests a `-r level` run always prints, missing from the output: cut, a lower level, or a run that a failed
    deployment check stopped (a hardware failure already says Fail; anything else leaves the GPUs untested)."""
    if any(i.severity is Severity.critical for i in out.issues):
        return []
    if not report.tests:
        return [] if report.errors else [f"no test results for a -r {level} run"]
    seen = {t.key for t in report.tests}
    missing = [name for lvl, names in REQUIRED_TESTS.items() if lvl <= level for name in names if name not in seen]
    if not missing:
        return []
    if any(t.key == "software" and t.status in ("Fail", "Warn") for t in report.tests):
        return [f"the run stopped at its deployment checks: {', '.join(missing)} did not run, the GPUs are untested"]
    return [f"a -r {level} run shows {', '.join(missing)}, which this output lacks: cut, or a lower level's output"]
