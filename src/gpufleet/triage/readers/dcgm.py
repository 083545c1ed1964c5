"""DCGM outputs: `dcgmi diag` results."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.sources.dcgmi import DiagTestResult, parse_diag
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport


def read_dcgmi_diag(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("dcgmi-diag", source)
    diag = parse_diag(bounded_text(lines, report), source=source)
    for test in diag.tests:
        # a test with no per-GPU result lines (a Deployment error) stands for all GPUs with its own status
        results = test.results or [DiagTestResult(test.status, None)]
        for result in results:
            if result.status not in ("Fail", "Warn"):
                continue
            gpus = "all GPUs" if result.gpus is None else "GPU " + ", ".join(map(str, result.gpus))
            errors = [m.text for m in test.messages if m.severity == "error"] or [m.text for m in test.messages]
            report.findings.append(
                TriageFinding(
                    check=f"dcgmi: {test.name}",
                    severity="critical" if result.status == "Fail" else "warning",
                    message=f"{test.name} {result.status.lower()}ed on {gpus}" + (f": {errors[0]}" if errors else ""),
                    entity=gpus,
                    code=test.name,
                    fix="drain the node and rerun `dcgmi diag -r 3`; a repeated hardware failure means replacement",
                    evidence=errors,
                )
            )
    if not diag.tests:
        report.judged = False
        report.notes.append("no diagnostic results found")
    return report
