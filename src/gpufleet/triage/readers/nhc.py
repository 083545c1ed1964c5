"""NHC / Azure HPC node health check `.health.log`: the kernel lines its failed checks quote are judged by the Xid
policy, through the kernel-log reader (so they read as they would in the node's own log); the checks triage does
not judge (bandwidth, ECC counts, IB ports) are listed as NHC's own results, and keep the log from reading as
healthy."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.model import Severity
from gpufleet.parsers.nhc import parse_health_log
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.readers.kernel import read_kernel_log
from gpufleet.triage.report import TriageFinding, TriageReport


def read_nhc(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nhc", source)
    text = bounded_text(lines, report)
    nodes = parse_health_log(text, source=source)
    kernel = read_kernel_log(text.splitlines(), source)
    kernel.format, kernel.complete = "nhc", report.complete
    kernel.notes[:0] = report.notes
    if not nodes:
        kernel.judged = False
        kernel.notes.append("no `node | status` line")
        return kernel
    failed = [n for n in nodes if not n.healthy]
    unjudged = [n for n in failed if not n.kernel_events]
    for node in unjudged[:MAX_FINDINGS]:
        what = f"NHC check {node.check} failed" if node.check else "NHC reports an error"
        kernel.findings.append(
            TriageFinding("nhc", Severity.info, f"{what}: {node.message}", node.node, node.check or "nhc",
                          "NHC's own result, which triage does not judge: read the check's message",
                          [f"{node.node} | ERROR: {node.message}"])
        )  # fmt: skip
    kernel.notes.append(f"NHC: {len(nodes) - len(failed)} node(s) healthy, {len(failed)} failed")
    if unjudged and kernel.verdict == "healthy":
        kernel.judged = False
        kernel.notes.append("NHC failed checks triage does not judge: no verdict beyond the kernel lines they quote")
    return kernel
