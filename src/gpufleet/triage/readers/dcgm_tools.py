"""`dcgmi dmon` and `dcgmi discovery -l`: read by parsers.nvidia.dcgmi_tools, judged by health.dcgm_tools; what dcgmi
printed instead (`Error: ...`: the host engine not reachable, a bad group) says why there is nothing to judge."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.dcgm_diag import classify_message
from gpufleet.health.dcgm_tools import DcgmIssue, judge_discovery, judge_dmon
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_tools import parse_discovery, parse_dmon
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport


def _errors(errors: list[str], report: TriageReport) -> None:
    for error in errors:
        rule = classify_message(error)
        fix = rule.fix if rule and rule.fix else "start nv-hostengine (`systemctl start nvidia-dcgm`) and check `-g`"
        report.findings.append(TriageFinding("dcgmi", Severity.info, f"dcgmi could not run: {error}", "node",
                                             "dcgmi error", fix, [error]))  # fmt: skip


def _issues(issues: list[DcgmIssue], check: str, report: TriageReport) -> None:
    for issue in issues:
        report.findings.append(TriageFinding(check, issue.severity, issue.message, issue.entity, issue.code,
                                             issue.fix))  # fmt: skip


def read_dcgmi_dmon(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("dcgmi-dmon", source)
    dmon = parse_dmon(bounded_text(lines, report), source=source, strict=False)
    _errors(dmon.errors, report)
    _issues(judge_dmon(dmon), "dcgmi dmon", report)
    samples = sum(len(rows) for rows in dmon.samples.values())
    report.notes.append(f"{samples} sample(s) of {len(dmon.samples)} entities; fields {', '.join(dmon.fields)}")
    judged = {"XIDER", "EDVTL", "RRF", "RRP", "RPDBE", "RPSBE", "RPPEN", "DVCCTR"} & set(dmon.fields)
    if not judged:
        report.judged = False
        report.notes.append("none of the fields it shows is one triage judges (XIDER, EDVTL, RRF, RRP, RPDBE, RPSBE, "
                            "RPPEN, DVCCTR): usage and temperatures alone say nothing of a fault")  # fmt: skip
    if dmon.problems:
        report.notes.append(f"{len(dmon.problems)} line(s) did not read, e.g. {dmon.problems[0]}")
    return report


def read_dcgmi_discovery(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("dcgmi-discovery", source)
    found = parse_discovery(bounded_text(lines, report), source=source)
    _errors(found.errors, report)
    if found.errors and found.gpus_found is None:
        report.judged = False
        return report
    _issues(judge_discovery(found), "dcgmi discovery", report)
    for gpu in found.gpus:
        report.notes.append(f"GPU {gpu.id}: {'; '.join(gpu.info)}")
    report.notes.append(f"{found.gpus_found} GPU(s) found" + (f" ({found.shown})" if found.shown else "")
                        + (f", {found.switches} NvSwitch(es)" if found.switches is not None else ""))  # fmt: skip
    return report
