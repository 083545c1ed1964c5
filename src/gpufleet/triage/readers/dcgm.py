"""DCGM outputs: `dcgmi diag` results (judged exactly as `gpufleet diag --dcgmi-output` judges them) and
`dcgmi health -c` reports (the table or `-j` JSON). Both stream their lines through the parsers in gpufleet.sources."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.dcgm_diag import DiagIssue, assess, classify_message
from gpufleet.health.dcgm_health import judge_health
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_diag import DiagParser
from gpufleet.parsers.nvidia.dcgmi_health import HealthParser, HealthReport, parse_health_json
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines
from gpufleet.triage.report import TriageFinding, TriageReport


def _finding(issue: DiagIssue) -> TriageFinding:
    return TriageFinding(
        check=f"dcgmi: {issue.test}",
        severity=issue.severity,
        message=issue.message,
        entity=issue.entity,
        code=issue.test,
        fix=issue.fix,
        evidence=issue.evidence,
    )


def read_dcgmi_diag(lines: Iterable[str], source: str) -> TriageReport:
    """Each failing test judged by why it failed: a GPU fault, a node setting, or the diagnostic's own error (which
    leaves the run unknown, never faulty); an output that is cut or lacks rows is never healthy."""
    report = TriageReport("dcgmi-diag", source)
    parser = DiagParser(source)
    for line in bounded_lines(lines, report):
        parser.feed(line)
    if not parser.has_content:
        report.judged = False
        report.notes.append("no diagnostic table, JSON or dcgmi error found")
        return report
    assessment = assess(parser.finish())
    report.findings.extend(_finding(issue) for issue in assessment.issues[:MAX_FINDINGS])
    if assessment.own_errors:
        report.judged = False
        report.notes.append(
            "the diagnostic itself failed on part of the run (see the findings): that part says nothing about the "
            "GPUs; fix what they name and rerun"
        )
    if assessment.gaps:
        report.complete = False
        report.notes.extend(assessment.gaps)
    if not any(t.status != "Skip" for t in assessment.tests) and not assessment.issues:
        report.judged = False
        report.notes.append("no test ran (every test was skipped or not run)")
    report.notes.extend(assessment.notes)
    return report


def _judge_health(health: HealthReport, report: TriageReport) -> None:
    judgement = judge_health(health)  # the one verdict on DCGM's health watches (health/dcgm_health.py)
    for issue in judgement.issues:
        report.findings.append(TriageFinding("dcgmi health", issue.severity, issue.message, issue.entity,
                                             issue.code, issue.fix, issue.evidence))  # fmt: skip
    report.judged = report.judged and judgement.judged
    report.notes.extend(judgement.notes)


def read_dcgmi_health(lines: Iterable[str], source: str) -> TriageReport:
    """Each entity's systems as DCGM's health watches rated them: Failure is faulty, Warning degraded; a watch DCGM
    could not evaluate leaves the report unknown."""
    report = TriageReport("dcgmi-health", source)
    parser = HealthParser()
    held: list[str] = []  # `-j` output: JSON is read whole
    for line in bounded_lines(lines, report):
        if held or (not parser.rows and not held and line.lstrip().startswith("{")):
            held.append(line)
            continue
        parser.feed(line)
    if held:
        health = parse_health_json("\n".join(held))
        parser.rows = len(health.entities) + (health.overall is not None)
    else:
        health = parser.finish()
    if health.watch_list:
        report.judged = False
        report.notes.append("this lists the health watches that are on (`dcgmi health -f`); `dcgmi health -c` checks")
        return report
    if not parser.rows:
        report.judged = False
        for error in health.errors:
            rule = classify_message(error)
            fix = "enable the watches: `dcgmi health -s a` (then wait a minute for PCIe, thermal and power data)"
            if "not enabled" not in error:
                fix = rule.fix if rule and rule.fix else "start nv-hostengine and check the group id (`-g`)"
            report.findings.append(TriageFinding("dcgmi health", Severity.info, f"dcgmi could not check: {error}",
                                                 code="dcgmi error", fix=fix, evidence=[error]))  # fmt: skip
        report.notes.append("no health report in the input" if not health.errors else "dcgmi printed no report")
        return report
    _judge_health(health, report)
    if health.gaps:
        report.complete = False
        report.notes.extend(health.gaps)
    return report
