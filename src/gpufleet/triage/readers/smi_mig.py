"""`nvidia-smi mig -lgi` / `-lci`: read by parsers.nvidia.smi_mig and judged by health.mig (instances missing is a
configuration fault; what is configured is said either way); a line nvidia-smi printed instead, by
health.nvml_access."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.mig import judge_mig
from gpufleet.health.nvml_access import judge_failure
from gpufleet.parsers.nvidia.smi_mig import parse_mig_listing
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport


def read_nvidia_smi_mig(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-smi-mig", source)
    listing = parse_mig_listing(bounded_text(lines, report), source=source, strict=False)
    for line in listing.errors:
        issue = judge_failure(line)
        report.findings.append(TriageFinding("nvidia-smi", issue.severity, issue.message, "node", issue.code,
                                             issue.fix, [line]))  # fmt: skip
    judged = judge_mig(listing)
    for mig in judged.issues:
        report.findings.append(TriageFinding("mig", mig.severity, mig.message, mig.entity, mig.code, mig.fix))
    report.notes.extend(judged.configured)
    if listing.problems:
        report.notes.append(f"{len(listing.problems)} line(s) did not read, e.g. {listing.problems[0]}")
    report.judged = judged.judged or bool(listing.errors)
    return report
