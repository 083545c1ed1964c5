"""NCCL logs, diagnosed against the catalog of NCCL's own messages."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport


def read_nccl_log(lines: Iterable[str], source: str) -> TriageReport:
    from gpufleet.nccl.diagnose import diagnose_texts

    report = TriageReport("nccl-log", source)
    dx = diagnose_texts([(source, bounded_text(lines, report))])
    if dx.cls == "unknown":
        report.judged = False
        report.notes.append(dx.summary)
        if dx.evidence:
            report.findings.append(TriageFinding("nccl", "info", dx.summary, code="unknown", fix=dx.fix,
                                                 evidence=dx.evidence))  # fmt: skip
        return report
    where = ", ".join([*(f"rank {r}" for r in dx.ranks), *dx.hosts])
    report.findings.append(TriageFinding("nccl", "critical", dx.summary, where, dx.cls, dx.fix, dx.evidence))
    if dx.also_seen:
        report.notes.append(f"also seen (symptoms of the cause, or secondary): {', '.join(dx.also_seen)}")
    return report
