"""A host's HCAs as libibverbs and the adapter firmware see them: `ibv_devinfo [-v]` and `mlxlink`, judged by the
fabric's port rules (health.ib_ports) and, for mlxlink's error counts, by the symbol-error budget
(health.symbol_errors): errors after FEC over the time since the counters were cleared, at the link's rate.

A device that libibverbs could not open or query, or that the command named and did not find, is an HCA missing
from the host: faulty, with the device as the finding's entity."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.health.ib_ports import (
    SPEEDS,
    PortIssue,
    PortReading,
    describe_port,
    judge_counter,
    judge_link,
    judge_port,
    judge_state,
    normalise_state,
)
from gpufleet.health.symbol_errors import SymbolErrorBudget
from gpufleet.model import Severity
from gpufleet.parsers.infiniband.ibv_devinfo import parse_ibv_devinfo
from gpufleet.parsers.infiniband.mlxlink import Mlxlink, ber, command_target, number, parse_mlxlink
from gpufleet.triage.paste import noted_commands
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.readers.ib import (
    _MISSING_FIX,
    _evidence,
    _Findings,
    _incomplete,
    _Rate,
    _sibling_rates,
    _unreadable,
)
from gpufleet.triage.report import TriageFinding, TriageReport


# -- ibv_devinfo ---------------------------------------------------------------------------------------------
def _device_failure(line: str, device: str | None) -> tuple[str, str] | None:
    """(entity, message) for a stderr line that says an HCA or its port is missing or cannot be queried."""
    if m := re.match(r"IB device '([^']*)' wasn't found", line):
        return m.group(1), f"the HCA {m.group(1)} was asked for and is not there: it is missing from the host"
    if line.startswith("No IB devices found"):
        return "host", "libibverbs sees no RDMA device at all: every HCA is missing (or its driver is not loaded)"
    if m := re.match(r"Failed to query port (\d+) props", line):
        where = describe_port(device=device, port=int(m.group(1))) if device else f"port {m.group(1)}"
        return where, f"{where} cannot be queried: the HCA stopped answering"
    if line.startswith(("Failed to open device", "Failed to query device props")):
        return device or "an HCA", f"{device or 'an HCA'} cannot be opened or queried: the device is failing"
    return None


def read_ibv_devinfo(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibv_devinfo", source)
    parsed = parse_ibv_devinfo(bounded_text(lines, report), source=source)
    found = _Findings(report)
    for named, line in parsed.diagnostics:
        failure = _device_failure(line, named)
        if failure is None:
            report.notes.append(f"ibv_devinfo reported: {line}")
            continue
        entity, message = failure
        found.add(TriageFinding("ib-hca", Severity.critical, message, entity, "HCA missing", _MISSING_FIX, [line]))
    if parsed.listed_count is not None and not parsed.devices:
        report.notes.append(f"`ibv_devinfo -l` lists {parsed.listed_count} device(s): {', '.join(parsed.listed)}")
        report.judged = bool(report.findings)
        if parsed.listed_count == 0 or not parsed.listed:
            found.add(TriageFinding("ib-hca", Severity.critical, "libibverbs sees no RDMA device", "host",
                                    "HCA missing", _MISSING_FIX, [f"{parsed.listed_count} HCAs found:"]))  # fmt: skip
            report.judged = True
        found.close()
        return report
    if not parsed.ports:
        report.judged = bool(report.findings)
        if not report.findings:
            report.notes.append("no port records found")
        _unreadable(report, parsed.unreadable, "ibv_devinfo")
        found.close()
        return report
    rates: list[_Rate] = []
    verbose = any("active_width" in p.fields for p in parsed.ports)
    for device in parsed.devices:
        count = device.port_count
        listed = {p.number for p in device.ports}
        if count and len(listed) > 1 and len(listed) < count and device is not parsed.devices[-1]:
            found.add(
                TriageFinding(
                    "ib-hca",
                    Severity.critical,
                    f"{device.name} says it has {count} ports but lists {len(listed)}: a port cannot be queried",
                    device.name,
                    "HCA missing ports",
                    _MISSING_FIX,
                    device.lines[:1] + [line for line in device.lines if "phys_port_cnt" in line],
                )
            )
        for port in device.ports:
            entity = describe_port(device=device.name or None, port=port.number or None, guid=device.node_guid,
                                   lid=port.lid if port.lid not in (None, 0, 65535) else None)  # fmt: skip
            reading = PortReading(
                state=port.state,
                phys_state=port.phys_state,
                link_layer=port.link_layer,
                width=port.width,
                speed=port.speed,
                rate_gbps=port.rate_gbps,
            )
            for issue in judge_port(reading):
                found.issue(issue, entity, _evidence(port.lines, "state", "active_width", "active_speed"))
            if port.rate_gbps is not None and normalise_state(port.state) == "Active":
                group = f"{device.fields.get('vendor_part_id', '')}/{port.link_layer}"
                rates.append(_Rate(group, entity, port.rate_gbps, f"{port.width}X {port.speed}", port.lines))
    _sibling_rates(found, rates)
    found.close()
    if not verbose:
        report.notes.append("without -v ibv_devinfo shows no link width, speed or physical state (`ibv_devinfo -v`)")
    if parsed.starts_mid_record:
        _incomplete(report, "the input starts inside a record: what came before it is not here")
    if parsed.truncated:
        _incomplete(report, f"the input looks cut short: {parsed.truncated}")
    return report


# -- mlxlink -------------------------------------------------------------------------------------------------
_OPERATIONAL, _TROUBLE, _COUNTERS, _SUPPORTED = (
    "Operational Info",
    "Troubleshooting Info",
    "Physical Counters and BER Info",
    "Supported Info",
)
_GENERATION = re.compile(r"\b(XDR|NDR|HDR|EDR|FDR10|FDR|QDR|DDR|SDR)\b")
_ETH_GBPS = re.compile(r"^(\d+)G(?:bE)?(?:_\d+X)?$", re.IGNORECASE)
# mlxlink's port manager states (mstflint mlxlink_maps.cpp _pmFsmState) in the port rules' words
_PM_STATES = {"disable": ("Down", "Disabled"), "polling": ("Down", "Polling"), "sleep": ("Down", "Sleep"),
              "port pll down": ("Down", "Disabled"), "close port": ("Down", "Disabled"),
              "rx disable": ("Down", "Disabled")}  # fmt: skip


def _mlx_speed(text: str | None) -> tuple[str | None, float | None]:
    """`IB-HDR` -> ("HDR", None); `200G` / `100GbE` -> (None, 200.0)."""
    value = (text or "").strip()
    if m := _GENERATION.search(value.upper()):
        return m.group(1), None
    if m := _ETH_GBPS.match(value):
        return None, float(m.group(1))
    return None, None


def _width(text: str | None) -> int | None:
    m = re.match(r"^(\d+)x$", (text or "").strip(), re.IGNORECASE)
    return int(m.group(1)) if m else None


def _state(parsed: Mlxlink) -> tuple[str | None, str | None]:
    state = parsed.get(_OPERATIONAL, "State")
    phys = parsed.get(_OPERATIONAL, "Physical state")
    if state is None:
        return None, phys
    if state.strip().lower() == "active":
        return "Active", phys if phys and phys.strip() not in ("N/A", "") else None
    down = _PM_STATES.get(state.strip().lower())
    if down:
        return down
    return "Down", state.strip()  # training, negotiation, signal detect: trying, not up


def _could_be(parsed: Mlxlink, speed: str | None) -> str | None:
    """iblinkinfo's kind of hint from mlxlink's Supported Info: the fastest speed both the port enables and the
    cable supports, when it is faster than the link runs."""
    enabled = _GENERATION.findall((parsed.get(_SUPPORTED, "Enabled Link Speed") or "").upper())
    cable = _GENERATION.findall((parsed.get(_SUPPORTED, "Supported Cable Speed") or "").upper())
    if not enabled or not cable or speed not in SPEEDS:
        return None
    common = [g for g in SPEEDS if g in enabled and g in cable]
    if not common:
        return None
    best = common[-1]
    order = list(SPEEDS)
    if order.index(best) > order.index(speed):
        return f"Could be {SPEEDS[best][0]:g} Gbps"
    return ""


def _entity(parsed: Mlxlink) -> str:
    device = parsed.device
    port = int(parsed.port) if parsed.port and parsed.port.isdigit() else None
    return describe_port(device=device, port=port) if device or port else "the port mlxlink was run on"


def read_mlxlink(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("mlxlink", source)
    parsed = parse_mlxlink(bounded_text(lines, report), source=source)
    if parsed.device is None:  # the command was pasted behind a shell prompt, which the paste cleaner took off
        targets = [t for command in noted_commands(lines) if (t := command_target(command)) is not None]
        if targets:
            parsed.device, parsed.port = targets[-1]
            report.notes.append(f"the device is {parsed.device}, as the pasted command line names it")
    found = _Findings(report)
    entity = _entity(parsed)
    for line in parsed.diagnostics:
        report.notes.append(f"mlxlink reported: {line}")
    if not any(parsed.sections.values()):
        report.judged = False
        report.notes.append("no mlxlink field found")
        return report
    state, phys = _state(parsed)
    speed, eth_gbps = _mlx_speed(parsed.get(_OPERATIONAL, "Speed"))
    width = _width(parsed.get(_OPERATIONAL, "Width"))
    op_lines = [parsed.line(_OPERATIONAL, k) for k in ("State", "Physical state", "Speed", "Width")]
    issues = judge_state(state, phys)
    up = normalise_state(state) == "Active" and not any(i.severity is Severity.critical for i in issues)
    if up and speed:
        issues += judge_link(width, speed, could_be=_could_be(parsed, speed))
    for issue in issues:
        found.issue(issue, entity, [line for line in op_lines if line])
    _recommendation(parsed, found, entity, up)
    rate = None
    if speed in SPEEDS and width:
        rate = SPEEDS[speed][1] * width
    elif eth_gbps:
        rate = eth_gbps
    _counters(parsed, found, entity, rate, report)
    found.close()
    if parsed.get(_OPERATIONAL, "State") is None:
        report.notes.append("no Operational Info State: the link's state is not in the input")
        if not report.findings and effective_unread(parsed):
            report.judged = False
    if effective_unread(parsed):
        report.notes.append("no Physical Counters and BER Info section: run `mlxlink -d <dev> -c` to see the errors")
    _unreadable(report, parsed.unreadable, "mlxlink")
    return report


def _recommendation(parsed: Mlxlink, found: _Findings, entity: str, up: bool) -> None:
    opcode = parsed.get(_TROUBLE, "Status Opcode")
    advice = (parsed.get(_TROUBLE, "Recommendation") or "").strip()
    if opcode is None or opcode.strip() in ("0", "N/A", ""):
        return
    group = parsed.get(_TROUBLE, "Group Opcode") or ""
    found.add(
        TriageFinding(
            "ib-link",
            Severity.warning if up else Severity.critical,
            f"the firmware reports a link problem (status opcode {opcode.strip()}"
            f"{f', {group.strip()}' if group.strip() and group.strip() != 'N/A' else ''}): {advice or 'no text'}",
            entity,
            f"Status Opcode {opcode.strip()}",
            advice or "read the port's Troubleshooting Info in the mlxlink documentation",
            [x for x in (parsed.line(_TROUBLE, "Status Opcode"), parsed.line(_TROUBLE, "Recommendation")) if x],
        )
    )


def effective_unread(parsed: Mlxlink) -> bool:
    """No error count after FEC in the input (`-c` not run, or cut out)."""
    return all(parsed.get(_COUNTERS, k) is None for k in ("Effective Physical Errors", "Symbol Errors"))


def _counters(parsed: Mlxlink, found: _Findings, entity: str, rate: float | None, report: TriageReport) -> None:
    if effective_unread(parsed):
        return
    minutes = number(parsed.get(_COUNTERS, "Time Since Last Clear"))
    span = minutes * 60 if minutes else None
    effective = number(parsed.get(_COUNTERS, "Effective Physical Errors"))
    if effective is None:
        effective = number(parsed.get(_COUNTERS, "Symbol Errors"))
    if effective:
        line = parsed.line(_COUNTERS, "Effective Physical Errors") or parsed.line(_COUNTERS, "Symbol Errors")
        evidence = [x for x in (line, parsed.line(_COUNTERS, "Effective Physical BER"),
                                parsed.line(_COUNTERS, "Time Since Last Clear")) if x]  # fmt: skip
        if span and rate:
            verdict = SymbolErrorBudget().judge_reading(effective, span, rate)
            if verdict is not None:
                found.add(TriageFinding(
                    "ib-counter", verdict.severity,
                    f"{effective:.0f} errors left after FEC (Effective Physical Errors): {verdict.describe()}",
                    entity, "Effective Physical Errors",
                    "reseat, clean or replace the cable or transceiver; watch the BER after clearing the counters",
                    evidence))  # fmt: skip
            else:
                report.notes.append(
                    f"{effective:.0f} errors after FEC in {minutes:g} min at {rate:g} Gb/s: within the symbol-error "
                    "budget"
                )
        else:
            issue = judge_counter("SymbolErrorCounter", int(effective))
            if issue is not None:
                found.issue(PortIssue(issue.check, issue.severity, "Effective Physical Errors",
                                      f"Effective Physical Errors {effective:.0f}: {issue.message}", issue.fix),
                            entity, evidence)  # fmt: skip
    for key, counter in (("Link Down Counter", "LinkDownedCounter"),
                         ("Link Error Recovery Counter", "LinkErrorRecoveryCounter")):  # fmt: skip
        value = number(parsed.get(_COUNTERS, key))
        if value:
            issue = judge_counter(counter, int(value), window_s=None)
            if issue is not None:
                found.issue(issue, entity, [parsed.line(_COUNTERS, key)])
    raw = ber(parsed.get(_COUNTERS, "Raw Physical BER"))
    if raw is not None and raw > 1e-250:
        report.notes.append(f"raw physical BER (before FEC) {raw:.1e}: FEC corrects these; the effective errors count")
