"""The NVIDIA device plugin's log: its events (parsers.nvidia.device_plugin) judged by health.device_plugin, one
finding per code and device (a burst of the same Xid on one GPU is one finding saying how many)."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.device_plugin import judge_plugin_event
from gpufleet.parsers.nvidia.device_plugin import read_line
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_lines
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport


def read_device_plugin_log(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("nvidia-device-plugin-log", source)
    found: dict[tuple[str, str], tuple[TriageFinding, int]] = {}
    seen = 0
    for number, line in enumerate(bounded_lines(lines, report), start=1):
        event = read_line(number, line)
        if event is None:
            continue
        seen += 1
        issue = judge_plugin_event(event)
        if issue is None:
            continue
        key = (issue.code, event.device or "")
        if key in found:
            finding, count = found[key]
            if len(finding.evidence) < MAX_EVIDENCE:
                finding.evidence.append(line.strip())
            found[key] = (finding, count + 1)
        elif len(found) < MAX_FINDINGS:
            finding = TriageFinding("device-plugin", issue.severity, issue.message, event.device or "node",
                                    issue.code, issue.fix, [line.strip()])  # fmt: skip
            found[key] = (finding, 1)
    for finding, count in found.values():
        if count > 1:
            finding.message += f" ({count} times)"
        report.findings.append(finding)
    if not seen:
        report.judged = False
        report.notes.append("no Xid, ECC or health line of the device plugin in this log")
    return report
