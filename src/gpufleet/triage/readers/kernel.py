"""Kernel logs: streamed line by line through the agent's kernel-log parser and judged by the Xid policy."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.xid_policy import Action, XidPolicy, XidSeverity, classify, load_policy
from gpufleet.model.kernel import KernelEvent
from gpufleet.sources.kmsg import KmsgParser
from gpufleet.triage.readers.common import MAX_FINDINGS
from gpufleet.triage.report import Severity, TriageFinding, TriageReport

_CRITICAL_ACTIONS = {Action.RESET_GPU, Action.RESTART_BM, Action.RESTART_VM, Action.CHECK_MECHANICALS}


def _kernel_severity(event: KernelEvent, policy: XidPolicy) -> tuple[Severity, str, str]:
    verdict = classify(event, policy)
    if event.kind in ("fallen_off_bus", "reset_required"):
        return "critical", verdict.action.value, verdict.reason
    if verdict.action is Action.IGNORE:
        return "info", verdict.action.value, verdict.reason
    if verdict.severity is XidSeverity.FATAL or verdict.action in _CRITICAL_ACTIONS:
        return "critical", verdict.action.value, verdict.reason
    return "warning", verdict.action.value, verdict.reason


def read_kernel_log(lines: Iterable[str], source: str) -> TriageReport:
    """Xid, SXid, fallen-off-the-bus and reset-required reports, judged by the Xid policy, line by line."""
    report = TriageReport("kernel-log", source)
    parser = KmsgParser()
    policy = load_policy()
    events: list[KernelEvent] = []
    dropped = 0
    for line in lines:
        for event in parser.feed_line(line):
            if len(events) < MAX_FINDINGS:
                events.append(event)
            else:
                dropped += 1
    tail = parser.finish()
    events += tail[: max(0, MAX_FINDINGS - len(events))]
    for event in events:
        severity, action, reason = _kernel_severity(event, policy)
        code = (
            f"Xid {event.xid}" if event.kind == "xid" else f"SXid {event.sxid}" if event.kind == "sxid" else event.kind
        )
        report.findings.append(
            TriageFinding(
                check=event.kind,
                severity=severity,
                entity=f"PCI {event.pci}" if event.pci else (event.sxid_detail.switch if event.sxid_detail else ""),
                code=code,
                message=event.message if event.known else f"{event.message} (a code NVIDIA's catalog does not list)",
                fix=f"{action}: {reason}" if reason else action,
                evidence=[event.raw],
            )
        )
    if dropped:
        report.notes.append(f"{dropped} more GPU fault reports not listed (first {MAX_FINDINGS} shown)")
    rejected = parser.scan.rejected
    for bad in rejected[:20]:
        report.findings.append(
            TriageFinding(
                "unreadable",
                "info",
                f"line {bad.line} looks like a GPU fault report but cannot be read: {bad.reason}",
                code="unreadable",
                evidence=[bad.raw],
            )
        )
    if not events:
        if rejected:  # the only GPU lines could not be read: saying healthy would be a guess
            report.judged = False
            report.notes.append("no readable GPU fault report; the lines that look like one are listed")
        else:
            report.notes.append("no GPU fault report (Xid, SXid, fallen off the bus) in this log")
    return report
