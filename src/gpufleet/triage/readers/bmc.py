"""A pasted `ipmitool sdr` (list, elist, type) or `ipmitool sel` (list, elist), judged by health/bmc.py: the same
judgement the agent's BMC detectors give the node's own BMC."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.health.bmc import BmcVerdict, judge_sel, judge_sensor
from gpufleet.model import Severity
from gpufleet.parsers.bmc.ipmitool import parse_sdr, parse_sel
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport


def _finding(verdict: BmcVerdict, entity: str, evidence: str) -> TriageFinding:
    return TriageFinding(f"bmc: {verdict.cause.value}", verdict.severity, verdict.summary, entity, verdict.cause.value,
                         verdict.fix, [evidence])  # fmt: skip


def read_sdr(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ipmitool-sdr", source)
    sdr = parse_sdr(bounded_text(lines, report), source=source)
    judged = [s for s in sdr.sensors if s.kind in ("fan", "psu", "temperature")]
    for sensor in judged:
        verdict = judge_sensor(sensor)
        if verdict is not None and len(report.findings) < MAX_FINDINGS:
            report.findings.append(_finding(verdict, sensor.name, sensor.raw))
    kinds = {kind: sum(1 for s in judged if s.kind == kind) for kind in ("fan", "psu", "temperature")}
    unread = sum(1 for s in judged if s.status == "ns" and not s.states)
    report.notes.append(
        f"{len(sdr.sensors)} sensor(s): {kinds['fan']} fan, {kinds['psu']} power supply, {kinds['temperature']} "
        f"temperature judged" + (f"; {unread} of them without a reading (ns: disabled or not fitted)" if unread else "")
    )
    if not judged:
        report.judged = False
        report.notes.append("no fan, power supply or temperature sensor to judge")
    report.notes += sdr.problems[:5]
    return report


def read_sel(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ipmitool-sel", source)
    sel = parse_sel(bounded_text(lines, report), source=source)
    cleared: set[tuple[str, str]] = set()  # (sensor, event) deasserted after its assertion
    for entry in reversed(sel.entries):
        key = (entry.sensor or entry.sensor_type, entry.event)
        if not entry.asserted:
            cleared.add(key)
            continue
        verdict = judge_sel(entry)
        if verdict is None or len(report.findings) >= MAX_FINDINGS:
            continue
        finding = _finding(verdict, entry.sensor or entry.sensor_type, entry.raw.strip())
        if key in cleared:  # it happened, and ended: worth a look, no longer a fault
            finding.severity = Severity.warning
            finding.message += " (deasserted later in the log)"
        report.findings.insert(0, finding)
    report.notes.append(f"{len(sel.entries)} SEL record(s); a fault the log deasserts later is a warning, not a fault")
    report.notes += sel.problems[:5]
    return report
