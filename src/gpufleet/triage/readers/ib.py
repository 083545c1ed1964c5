"""InfiniBand tool outputs: ibstat, ibstatus, perfquery, ibqueryerrors, iblinkinfo and ibnetdiscover, read by the
same parsers `gpufleet read` uses and judged port by port by the fabric's port rules (health.ib_ports).

A port finding names the port by its node description, device, port number, GUID and LID as far as the tool shows
them. Each reader checks what its format can tell about being whole: fields a record always prints, a device's
port count, ibqueryerrors' summary, and, for the fabric-wide tools, that every link seen from one end is also seen
from the other; an input that fails the check is `complete=False`, so it is never called healthy.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from gpufleet.health.ib_ports import (
    PortIssue,
    PortReading,
    describe_port,
    judge_counter,
    judge_counters,
    judge_link,
    judge_port,
    judge_state,
    lane_count,
    link_rate_gbps,
    normalise_phys_state,
    normalise_state,
    speed_generation,
    speed_rank,
)
from gpufleet.model import Severity
from gpufleet.parsers.infiniband.diags import (
    FabricLink,
    FabricTopology,
    LinkInfo,
    PortCounters,
    PortErrors,
    parse_ibqueryerrors,
    parse_link_line,
    scan_iblinkinfo,
    scan_ibnetdiscover,
    scan_perfquery,
)
from gpufleet.parsers.infiniband.ibstat import parse_ibstat, parse_ibstatus
from gpufleet.triage.readers.common import MAX_FINDINGS, bounded_text
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport

_NO_WINDOW = (
    "the counters count since they were last cleared and the output shows no time span, so symbol errors are "
    "judged by count, not bit error rate; to measure it clear them (`perfquery -R <lid> <port>`) and read again "
    "after a known time"
)


class _Findings:
    """Adds findings up to MAX_FINDINGS and counts the rest."""

    def __init__(self, report: TriageReport) -> None:
        self.report = report
        self.dropped = 0

    def add(self, finding: TriageFinding) -> None:
        if len(self.report.findings) < MAX_FINDINGS:
            finding.evidence = finding.evidence[:MAX_EVIDENCE]
            self.report.findings.append(finding)
        else:
            self.dropped += 1

    def issue(self, issue: PortIssue, entity: str, evidence: list[str]) -> None:
        self.add(TriageFinding(issue.check, issue.severity, issue.message, entity, issue.code, issue.fix, evidence))

    def close(self) -> None:
        if self.dropped:
            self.report.notes.append(f"{self.dropped} more findings not listed (first {MAX_FINDINGS} shown)")


def _incomplete(report: TriageReport, why: str) -> None:
    report.complete = False
    if why not in report.notes:
        report.notes.append(why)


def _diagnostics(report: TriageReport, tool: str, lines: list[str]) -> None:
    if lines:
        shown = "; ".join(lines[:3]) + (f" (and {len(lines) - 3} more)" if len(lines) > 3 else "")
        report.notes.append(f"{tool} reported: {shown}")


_VANISHED = re.compile(r"(?:IB )?device '(?P<dev>[^']+)'[^\n]*?(?:failed|not found|No such)", re.IGNORECASE)
_HCA_NAME = re.compile(r"^(?P<driver>[a-z]+\d*_)(?P<index>\d+)$")
_MISSING_FIX = (
    "check the HCA is on the PCI bus (`lspci -d 15b3:`) and its driver loaded (`dmesg | grep -i mlx5`); an HCA "
    "that vanished needs a reboot or reseat, and replacing if it stays missing"
)


def _missing_hcas(found: _Findings, tool: str, diagnostics: list[str], names: list[str]) -> None:
    """An HCA the tool names in an error (`stat of IB device 'mlx5_8' failed`), or a gap in the devices' numbering
    (the kernel numbers mlx5_0, mlx5_1, ... with the lowest free index, so a gap is one that went away after boot):
    an HCA missing from the host is never healthy."""
    named: set[str] = set()
    for line in diagnostics:
        if m := _VANISHED.search(line):
            dev = m.group("dev")
            named.add(dev)
            every = dev in ("*", "")  # ibstatus with no device: `device '*': sys files not found`
            found.add(
                TriageFinding(
                    "ib-hca",
                    Severity.critical,
                    f"{tool} finds no InfiniBand device on the host: every HCA is missing (or its driver is not loaded)"
                    if every
                    else f"{tool} cannot read the HCA {dev}: the device is missing or failing",
                    "host" if every else dev,
                    "HCA missing",
                    _MISSING_FIX,
                    [line],
                )
            )
    by_driver: dict[str, set[int]] = defaultdict(set)
    for name in names:
        if m := _HCA_NAME.match(name):
            by_driver[m.group("driver")].add(int(m.group("index")))
    for driver, indexes in by_driver.items():
        gaps = [f"{driver}{i}" for i in range(min(indexes), max(indexes)) if i not in indexes]
        gaps = [g for g in gaps if g not in named]
        if gaps and len(gaps) <= 4:
            found.add(
                TriageFinding(
                    "ib-hca",
                    Severity.warning,
                    f"{', '.join(gaps)} missing between the HCAs listed ({driver}{min(indexes)} to "
                    f"{driver}{max(indexes)}): an HCA that went away after boot, unless the paste left it out",
                    ", ".join(gaps),
                    "HCA missing",
                    _MISSING_FIX,
                    [],
                )
            )


def _unreadable(report: TriageReport, lines: list[tuple[int, str]], what: str) -> None:
    if lines:
        report.notes.append(
            f"{len(lines)} line(s) are not {what} output and were skipped (first: line {lines[0][0]}: "
            f"{lines[0][1].strip()[:60]!r})"
        )


def _evidence(lines: list[str], *keys: str) -> list[str]:
    """The record's first line (its header) and the lines that show `keys`, in order."""
    return [line for i, line in enumerate(lines) if i == 0 or any(key in line for key in keys)]


# -- ibstat and ibstatus -------------------------------------------------------------------------------------
class _Rate(NamedTuple):
    group: str  # HCA model and link layer: ports worth comparing
    entity: str
    gbps: float
    shown: str  # the rate as printed
    lines: list[str]


def _sibling_rates(found: _Findings, rates: list[_Rate]) -> None:
    """A port slower than the other active ports of the same HCA model and link layer, as a note: ibstat and
    ibstatus do not show what a port supports, and hosts mix 200 and 400 Gb/s ports of one model by design."""
    groups: dict[str, list[_Rate]] = defaultdict(list)
    for rate in rates:
        groups[rate.group].append(rate)
    for members in groups.values():
        fastest = max(m.gbps for m in members)
        faster = sum(1 for m in members if m.gbps == fastest)
        for m in members:
            if m.gbps < fastest:
                found.add(
                    TriageFinding(
                        "ib-link-speed",
                        Severity.info,
                        f"runs at {m.gbps:g} Gb/s ({m.shown.strip()}) while {faster} port(s) of the same model run "
                        f"at {fastest:g} Gb/s: if it is not a slower port by design, its link trained down (a bad "
                        "lane or cable)",
                        m.entity,
                        f"{m.gbps:g} Gb/s",
                        "compare with the port's supported rate (`iblinkinfo`, `ibportstate <lid> <port> query`)",
                        _evidence(m.lines, "Rate", "rate"),
                    )
                )


def read_ibstat(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibstat", source)
    parsed = parse_ibstat(bounded_text(lines, report), source=source)
    found = _Findings(report)
    _diagnostics(report, "ibstat", parsed.diagnostics)
    _unreadable(report, parsed.unreadable, "ibstat")
    _missing_hcas(found, "ibstat", parsed.diagnostics, [d.name for d in parsed.devices if d.name])
    ports = parsed.ports
    if parsed.short_format:
        report.judged = False
        report.notes.append("`ibstat -s` lists the devices only, without port states")
        return report
    if not ports:
        report.judged = False
        report.notes.append("no port records found")
        if parsed.truncated:
            _incomplete(report, f"the input looks cut short: {parsed.truncated}")
        return report
    devices = {id(p): d for d in parsed.devices for p in d.ports}
    rates: list[_Rate] = []
    for port in ports:
        device = devices[id(port)]
        entity = describe_port(device=port.device, port=port.number, guid=port.port_guid, lid=port.base_lid)
        management = device.node_type == "Switch" and port.number == 0  # a switch's port 0 is virtual
        reading = PortReading(state=port.state, phys_state=port.phys_state, link_layer=port.link_layer)
        for issue in judge_port(reading):
            found.issue(issue, entity, _evidence(port.lines, "State", "Physical state"))
        rate = port.rate_gbps
        if not management and rate is not None and normalise_state(port.state) == "Active":
            model = f"{device.device_type}/{port.link_layer}"
            rates.append(_Rate(model, entity, rate, port.fields.get("Rate", ""), port.lines))
    _sibling_rates(found, rates)
    found.close()
    report.notes.append("ibstat shows no link width or supported rate: use iblinkinfo to see links running below it")
    if parsed.starts_mid_record:
        _incomplete(report, "the input starts inside a record: what came before it is not here")
    if parsed.truncated:
        _incomplete(report, f"the input looks cut short: {parsed.truncated}")
    return report


def _guid_of(fields: dict[str, str]) -> str | None:
    """An InfiniBand port's GUID from its default GID (the subnet prefix, then the port GUID); a RoCE port's GID
    is made from its MAC or IP address instead."""
    gid = fields.get("default gid", "")
    groups = gid.split(":")
    if fields.get("link_layer") == "Ethernet" or len(groups) != 8 or not all(len(g) == 4 for g in groups):
        return None
    if not all(c in "0123456789abcdefABCDEF" for g in groups for c in g):
        return None
    return "0x" + "".join(groups[4:]).lower()


def read_ibstatus(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibstatus", source)
    parsed = parse_ibstatus(bounded_text(lines, report), source=source)
    found = _Findings(report)
    _diagnostics(report, "ibstatus", parsed.diagnostics)
    _unreadable(report, parsed.unreadable, "ibstatus")
    _missing_hcas(found, "ibstatus", parsed.diagnostics, sorted({p.device for p in parsed.ports if p.device}))
    if not parsed.ports:
        report.judged = False
        report.notes.append("no port records found")
        return report
    rates: list[_Rate] = []
    for port in parsed.ports:
        entity = describe_port(device=port.device, port=port.number, guid=_guid_of(port.fields), lid=port.base_lid)
        reading = PortReading(
            state=port.state,
            phys_state=port.phys_state,
            link_layer=port.link_layer,
            width=port.width,
            speed=port.speed,
            rate_gbps=port.rate_gbps,
        )
        for issue in judge_port(reading):
            found.issue(issue, entity, _evidence(port.lines, "state", "rate"))
        if port.rate_gbps is not None and normalise_state(port.state) == "Active":
            rates.append(_Rate(f"{port.link_layer}", entity, port.rate_gbps, port.fields.get("rate", ""), port.lines))
    _sibling_rates(found, rates)
    found.close()
    if parsed.starts_mid_record:
        _incomplete(report, "the input starts inside a record: what came before it is not here")
    if parsed.truncated:
        _incomplete(report, f"the input looks cut short: {parsed.truncated}")
    return report


# -- perfquery -----------------------------------------------------------------------------------------------
_DETAIL_MEANING = {
    "PortLocalPhysicalErrors": "bad packets from this link's physical layer (cable, transceiver)",
    "PortMalformedPktErrors": "malformed packets",
    "PortBufferOverrunErrors": "receive buffer overruns",
    "PortDLIDMappingErrors": "packets to a LID this port cannot route (routing)",
    "PortVLMappingErrors": "packets on a VL this port cannot map (configuration)",
    "PortLoopingErrors": "packets that looped (routing)",
    "PortInactiveDiscards": "discarded because the port was not active",
    "PortNeighborMTUDiscards": "discarded for exceeding the neighbour's MTU (configuration)",
    "PortSwLifetimeLimitDiscards": "discarded for exceeding the switch lifetime limit (congestion)",
    "PortSwHOQLifetimeLimitDiscards": "discarded at the head of a stalled queue (congestion or a dead peer)",
}


def _pq_entity(block: PortCounters) -> str:
    if block.port == 255:
        return f"{block.where or 'port'} all ports (summed)"
    if block.lid is not None:
        return describe_port(lid=block.lid, port=block.port)
    where = f"{block.where} " if block.where else ""
    return f"{where}port {block.port}" if block.port is not None else "a port (its header is not in the input)"


def _counter_line(lines: list[str], name: str, printed: str | None) -> list[str]:
    wanted = (printed or name) + ":"
    return [line for line in lines if line.strip().startswith(wanted)] or lines[:1]


def read_perfquery(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("perfquery", source)
    scan = scan_perfquery(bounded_text(lines, report))
    found = _Findings(report)
    _diagnostics(report, "perfquery", scan.diagnostics)
    _unreadable(report, scan.unreadable, "perfquery")
    if not scan.blocks:
        report.judged = False
        report.notes.append("no counter record found" + (": the query failed" if scan.diagnostics else ""))
        return report
    counted = False
    for block in scan.blocks:
        entity = _pq_entity(block)
        if block.attribute in ("PortCounters", "PortCountersExtended"):
            counted = True
            counters = dict(block.counters)
            cap = int(block.cap_mask, 16) if block.cap_mask else None
            if not block.extended and cap is not None and not cap & 0x1000:
                counters.pop("PortXmitWait", None)  # not supported: perfquery prints 0
            for issue in judge_counters(counters, extended=block.extended):
                found.issue(issue, entity, _counter_line(block.lines, issue.code, block.printed.get(issue.code)))
        elif block.attribute in ("PortRcvErrorDetails", "PortXmitDiscardDetails"):
            counted = True
            for name, value in block.counters.items():
                if value and name in _DETAIL_MEANING:
                    found.add(
                        TriageFinding(
                            "ib-counter",
                            Severity.info,
                            f"{name} {value}: {_DETAIL_MEANING[name]}",
                            entity,
                            name,
                            evidence=_counter_line(block.lines, name, None),
                        )
                    )
    found.close()
    if not counted:
        report.judged = False
        report.notes.append("no error counters in these records (only " + ", ".join(
            sorted({b.attribute for b in scan.blocks})) + ")")  # fmt: skip
    else:
        report.notes.append(_NO_WINDOW)
    if scan.bad_values:
        _incomplete(report, f"{len(scan.bad_values)} counter value(s) cannot be read (line {scan.bad_values[0][0]})")
    if scan.starts_mid_record:
        _incomplete(report, "the input starts inside a record: its header and what came before are not here")
    if scan.truncated:
        _incomplete(report, f"the input looks cut short: {scan.truncated}")
    return report


# -- ibqueryerrors -------------------------------------------------------------------------------------------
def _qe_entity(port: PortErrors) -> str:
    if port.port is None:
        return describe_port(node=port.node, guid=port.guid) + " all ports (summed)"
    return describe_port(node=port.node, guid=port.guid, port=port.port)


def read_ibqueryerrors(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibqueryerrors", source)
    parsed = parse_ibqueryerrors(bounded_text(lines, report), source=source)
    found = _Findings(report)
    _diagnostics(report, "ibqueryerrors", parsed.diagnostics)
    errors = [p for p in parsed.ports if not p.data_only]
    with_ports = {(p.node, p.guid) for p in errors if p.port is not None}
    if not errors and not parsed.summary:
        report.judged = False
        report.notes.append("no error record and no summary found")
        return report
    for port in errors:
        if port.port is None and (port.node, port.guid) in with_ports:
            continue  # the all-ports sum repeats the port lines below it
        entity = _qe_entity(port)
        for name, value in port.counters.items():
            issue = judge_counter(name, value, extended=name in port.wide)
            if issue is None and value and name in _DETAIL_MEANING:
                issue = PortIssue("ib-counter", Severity.info, name, f"{name} {value}: {_DETAIL_MEANING[name]}")
            if issue is not None:
                found.issue(issue, entity, port.lines)
        link = parse_link_line(port.detail) if port.detail else None
        if link is not None:
            for issue in _judge_link_line(link, peer_expected=True):
                found.issue(issue, entity, port.lines)
    found.close()
    _qe_notes(report, parsed.thresholds, parsed.suppressed)
    if parsed.pma_failures:
        found.add(
            TriageFinding(
                "ib-counter",
                Severity.warning,
                f"{parsed.pma_failures} port counter queries failed: those ports were not checked",
                code="PMA query failures",
                fix="check that the ports answer (`perfquery <lid> <port>`); a port that does not is suspect",
            )
        )
    per_port = sum(1 for p in errors if p.port is not None)
    if parsed.starts_mid_record:
        _incomplete(report, "the input starts inside a node's record: what came before it is not here")
    if not parsed.summary:
        _incomplete(
            report,
            "no `## Summary` at the end: the output may be cut short (ibqueryerrors before 1.6 prints none)",
        )
    elif parsed.bad_ports is not None and per_port < parsed.bad_ports:
        _incomplete(
            report,
            f"the summary counts {parsed.bad_ports} ports with errors but only {per_port} are in the input "
            "(lines left out?)",
        )
    return report


def _qe_notes(report: TriageReport, thresholds: dict[str, int], suppressed: list[str]) -> None:
    if thresholds:
        shown = ", ".join(f"{k} {v}" for k, v in thresholds.items())
        report.notes.append(f"ibqueryerrors listed only counters over its thresholds file ({shown})")
    if suppressed:
        report.notes.append(f"not checked (suppressed): {', '.join(suppressed)}")
    report.notes.append(_NO_WINDOW)


# -- iblinkinfo ----------------------------------------------------------------------------------------------
def _judge_link_line(link: LinkInfo, *, peer_expected: bool) -> list[PortIssue]:
    issues = judge_state(link.state, link.phys_state, peer_expected=peer_expected)
    state = normalise_state(link.state)
    if state == "Active" and not any(i.severity is Severity.critical for i in issues):
        if not link.far_end_available:
            issues.append(
                PortIssue(
                    "ib-link",
                    Severity.warning,
                    "far end not available",
                    f"port {link.state}/{link.phys_state} but iblinkinfo could not read its far end ({link.note})",
                    "check the far end of the cable; rerun iblinkinfo",
                )
            )
        could_be = link.note if link.far_end_shown and link.far_end_available else None
        issues += judge_link(lane_count(link.width), speed_generation(link.speed), could_be=could_be)
    return issues


def _link_entity(link: LinkInfo) -> str:
    return describe_port(node=link.node or None, guid=link.guid, lid=link.lid, port=link.port)


def _role(name: str) -> str:
    """A switch's role from its name, for comparing like with like: "leaf12" and "leaf3" are both "leaf"."""
    return re.sub(r"\d+", "#", name)


def _expected_peers(links: list[LinkInfo]) -> set[tuple[str, int]]:
    """Switch ports that are down while the same port is up on most switches of the same role (named alike):
    a missing uplink in a regular fabric. A guess, so a warning, never a fault."""
    up: dict[tuple[str, str], set[int]] = defaultdict(set)
    members: dict[str, set[str]] = defaultdict(set)
    for link in links:
        if link.node_type != "Switch" or not link.node:
            continue
        members[_role(link.node)].add(link.node)
        if normalise_state(link.state) == "Active":
            up[(link.node, _role(link.node))].add(link.port)
    expected: set[tuple[str, int]] = set()
    for link in links:
        if link.node_type != "Switch" or normalise_state(link.state) != "Down" or not link.node:
            continue
        if normalise_phys_state(link.phys_state) not in ("Polling", "Sleep", None):
            continue
        role = _role(link.node)
        others = members[role] - {link.node}
        agreeing = sum(1 for other in others if link.port in up[(other, role)])
        if len(others) >= 2 and agreeing * 3 > len(others) * 2:
            expected.add((link.node, link.port))
    return expected


def _end(lid: int | None, name: str, port: int | None) -> tuple[str, int | None]:
    return (f"lid {lid}" if lid else f"name {name}", port)


def _slower_than_switch(links: list[LinkInfo]) -> list[TriageFinding]:
    """Links slower than the fastest link of the switch they reach, where iblinkinfo prints no "Could be" hint (it
    prints one when both ends support more, libibnetdisc's speed check): the other end is the slower one, e.g. an
    EDR HCA on an HDR switch. Worth knowing (the link runs below the switch's speed), not a fault."""
    fastest: dict[int, float] = {}
    names: dict[int, str] = {}
    ends: list[tuple[int, LinkInfo]] = []  # (the switch's LID, a link it is one end of)
    for link in links:
        if not link.up or link.speed_gbps is None:
            continue
        for lid, name, is_switch in (
            (link.lid, link.node, link.node_type == "Switch"),
            (link.remote_lid, link.remote_name, link.node_type != "Switch" and link.remote_lid is not None),
        ):
            if is_switch and lid is not None:
                fastest[lid] = max(fastest.get(lid, 0.0), link.speed_gbps)
                names.setdefault(lid, name)
                ends.append((lid, link))
    slow: dict[int, list[LinkInfo]] = defaultdict(list)
    cables: dict[int, set[frozenset[tuple[int | None, int | None]]]] = defaultdict(set)
    for lid, link in ends:
        cable = frozenset(((link.lid, link.port), (link.remote_lid, link.remote_port)))
        if (link.speed_gbps or 0.0) < fastest[lid] and "Could be" not in link.note and cable not in cables[lid]:
            cables[lid].add(cable)
            slow[lid].append(link)
    out = []
    for lid, members in slow.items():
        top = speed_generation(f"{fastest[lid]:g} Gbps") or f"{fastest[lid]:g} Gbps"
        gens = sorted({speed_generation(link.speed) or link.speed for link in members})
        out.append(
            TriageFinding(
                "ib-link-speed",
                Severity.info,
                f"{len(members)} link(s) on this switch run at {', '.join(gens)} while it runs others at {top}; "
                "iblinkinfo shows no faster speed both ends support, so the far end (an older HCA or cable) "
                "limits them: below the switch's speed by design, not trained down",
                describe_port(node=names[lid] or None, lid=lid),
                f"below switch speed ({', '.join(gens)} < {top})",
                "if these links should run at the switch's speed, replace the slower HCA or cable",
                [link.raw for link in members[:MAX_EVIDENCE]],
            )
        )
    return out


def _li_last_switch_short(links: list[LinkInfo]) -> str:
    """iblinkinfo lists every port of a switch but never says how many it has: a last switch listing fewer ports
    than the other switches named like it stops early."""
    last = links[-1]
    if last.node_type != "Switch" or not last.node:
        return ""
    top: dict[str, int] = {}
    for link in links:
        if link.node_type == "Switch" and link.node != last.node and _role(link.node) == _role(last.node):
            top[link.node] = max(top.get(link.node, 0), link.port)
    shown = max(link.port for link in links if link.node == last.node)
    if top and shown < max(top.values()):
        return f"{last.node} lists ports up to {shown}, the switches named like it up to {max(top.values())}"
    return ""


def _li_completeness(report: TriageReport, links: list[LinkInfo], all_nodes: bool) -> None:
    short = _li_last_switch_short(links)
    if short:
        _incomplete(report, f"the output looks cut short: {short}")
    if any(not link.far_end_shown for link in links):
        _incomplete(
            report,
            "the far end of some links (`==> ...`) is missing, as when a paste cleaner takes `==>` for a marker: "
            "their peers and iblinkinfo's 'Could be' hints cannot be judged, nor can the output be checked whole",
        )
        return
    local = {_end(link.lid, link.node, link.port) for link in links}
    local_lids = {link.lid for link in links if link.lid}
    local_names = {link.node for link in links}
    missing = 0
    for link in links:
        if link.remote_port is None:
            continue
        far = _end(link.remote_lid, link.remote_name, link.remote_port)
        far_node_printed = (link.remote_lid in local_lids) if link.remote_lid else link.remote_name in local_names
        if far not in local and (all_nodes or far_node_printed):
            missing += 1
    if missing:
        # iblinkinfo is often run for one switch or path (`-S`, `-D`, `--switches-only`) or pasted as an excerpt:
        # each line is a whole record of its port, so what is there is judged and the rest said to be absent
        report.notes.append(
            f"{missing} link(s) lead to ports that are not in the input (an excerpt, or output for part of the "
            "fabric): only the ports shown are judged"
        )


def read_iblinkinfo(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("iblinkinfo", source)
    scan = scan_iblinkinfo(bounded_text(lines, report))
    found = _Findings(report)
    _diagnostics(report, "iblinkinfo", scan.diagnostics)
    if not scan.links:
        report.judged = False
        report.notes.append("no link lines found")
        _unreadable(report, scan.unreadable, "iblinkinfo")
        return report
    expected = _expected_peers(scan.links)
    unused: list[LinkInfo] = []
    seen: dict[frozenset[tuple[str, int | None]], int] = {}
    for link in scan.links:
        peer_expected = link.node_type != "Switch" or (link.node, link.port) in expected
        issues = _judge_link_line(link, peer_expected=peer_expected)
        if (link.node, link.port) in expected:
            issues = [
                PortIssue(
                    i.check,
                    Severity.warning,
                    i.code,
                    i.message + "; the same port is up on the other switches named like this one",
                    i.fix,
                )
                for i in issues
            ]
        if (
            link.node_type == "Switch"
            and not peer_expected
            and all(i.severity is Severity.info for i in issues)
            and issues
        ):
            unused.append(link)
            continue
        if link.remote_port is not None and issues:
            key = frozenset((_end(link.lid, link.node, link.port), _end(link.remote_lid, link.remote_name,
                                                                          link.remote_port)))  # fmt: skip
            if key in seen:  # the same cable seen from its other end: quote that line too
                if seen[key] < len(report.findings) and len(report.findings[seen[key]].evidence) < MAX_EVIDENCE:
                    report.findings[seen[key]].evidence.append(link.raw)
                continue
            seen[key] = len(report.findings)
        for issue in issues:
            found.issue(issue, _link_entity(link), [link.raw])
    for finding in _slower_than_switch(scan.links):
        found.add(finding)
    if unused:
        found.add(
            TriageFinding(
                "ib-port-state",
                Severity.info,
                f"{len(unused)} switch port(s) have no link (unused, or unplugged)",
                f"{len({link.node for link in unused})} switch(es)",
                "no link",
                evidence=[link.raw for link in unused[:MAX_EVIDENCE]],
            )
        )
    found.close()
    _unreadable(report, scan.unreadable, "iblinkinfo")
    if any("==(" in line for _, line in scan.unreadable):
        _incomplete(report, "some link lines cannot be read, so their ports are not judged")
    if scan.starts_mid_record:
        _incomplete(report, "the input starts inside a node's record: what came before it is not here")
    if scan.empty_nodes:
        _incomplete(report, "a node's header has no link lines after it: the output looks cut short")
    _li_completeness(report, scan.links, all_nodes=any(link.node_type == "CA" for link in scan.links))
    return report


# -- ibnetdiscover -------------------------------------------------------------------------------------------
def _nd_entity(topo: FabricTopology, link: FabricLink) -> str:
    node = topo.nodes.get(link.node)
    return describe_port(
        node=(node.description if node else "") or link.node,
        guid=f"0x{link.port_guid}" if link.port_guid and not link.port_guid.startswith("0x") else link.port_guid,
        lid=link.lid,
        port=link.port,
    )


def _nd_completeness(report: TriageReport, topo: FabricTopology) -> None:
    """Each link is printed from both ends (in `-p` too, one port a line), so an end seen once is missing. A dump
    that starts with ibnetdiscover's header was printed whole: what it lacks was cut off, and it is not judged
    healthy. Without the header the text is an excerpt (nodes picked out of a dump): each node's record is whole, so
    its links are judged and the nodes they lead to are said to be absent; a node header with no port lines after
    it is a record cut short. `-p` prints no header, so there a missing end is always said to be a cut."""
    ends = {(link.node, link.port) for link in topo.links}
    lost_nodes = {link.remote for link in topo.links if link.remote not in topo.nodes}
    one_sided = sum(1 for link in topo.links if (link.remote, link.remote_port) not in ends)
    bare = [
        node for node in topo.nodes.values() if node.id != "?" and node.id not in {link.node for link in topo.links}
    ]
    if not (lost_nodes or one_sided):
        return
    missing = f"{len(lost_nodes)} node(s) and {one_sided} link end(s) the output refers to are not in it"
    if topo.whole_start:
        _incomplete(report, f"{missing}, and it starts with ibnetdiscover's header: a whole dump, cut short or edited")
    elif topo.ports_report:  # `-p` prints no header: a cut cannot be told from lines picked out
        _incomplete(report, f"{missing}: `ibnetdiscover -p` cut short or edited")
    elif bare:
        _incomplete(
            report, f"{missing}, and {bare[-1].description or bare[-1].id}'s record has no port lines: cut short"
        )
    else:
        report.notes.append(
            f"{missing}: taken for an excerpt (no `# Topology file` header, each node's record whole), so only the "
            "links shown are judged"
        )


def read_ibnetdiscover(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibnetdiscover", source)
    topo = scan_ibnetdiscover(bounded_text(lines, report))
    found = _Findings(report)
    _diagnostics(report, "ibnetdiscover", topo.diagnostics)
    _unreadable(report, topo.unreadable, "ibnetdiscover")
    if not topo.links and not topo.unconnected:
        report.judged = False
        report.notes.append("no links found")
        return report
    fastest: dict[str, int] = {}
    for link in topo.links:
        rank = speed_rank(link.speed)
        if rank is not None:
            fastest[link.node] = max(fastest.get(link.node, rank), rank)
    seen: set[frozenset[tuple[str, int]]] = set()
    unassigned: list[FabricLink] = []
    for link in topo.links:
        key = frozenset(((link.node, link.port), (link.remote, link.remote_port)))
        if key in seen:
            continue
        seen.add(key)
        if link.lid == 0 or link.remote_lid == 0:
            unassigned.append(link)
        entity = _nd_entity(topo, link)
        width = lane_count(link.width)
        for issue in judge_link(width, link.speed, could_be=None):
            found.issue(issue, entity, [link.raw])
        if width is None or link.speed is None:
            found.add(
                TriageFinding(
                    "ib-link",
                    Severity.info,
                    f"link to {link.remote_description or link.remote} at an unknown width or speed "
                    f"({link.width or '??'} {link.speed or '???'})",
                    entity,
                    "unknown width/speed",
                    evidence=[link.raw],
                )
            )
        rank = speed_rank(link.speed)
        if rank is not None and rank < fastest.get(link.node, rank):
            top = next(s for s in ("XDR", "NDR", "HDR", "EDR", "FDR", "FDR10", "QDR", "DDR", "SDR")
                       if speed_rank(s) == fastest[link.node])  # fmt: skip
            rate = link_rate_gbps(width, link.speed)
            found.add(
                TriageFinding(
                    "ib-link-speed",
                    Severity.info,
                    f"link at {link.speed}{f' ({rate:g} Gb/s)' if rate else ''} while this node has {top} links: a "
                    "slower peer by design, or a link that trained down (iblinkinfo tells which)",
                    entity,
                    link.speed or "",
                    evidence=[link.raw],
                )
            )
    if unassigned:
        found.add(
            TriageFinding(
                "ib-port-state",
                Severity.critical,
                f"{len(unassigned)} link(s) have ports with no LID assigned (lid 0): the subnet manager has not "
                "configured them, so they carry no traffic",
                f"{len({link.node for link in unassigned})} node(s)",
                "lid 0",
                "check that a subnet manager runs and reaches these ports (`sminfo`, the opensm or UFM log)",
                [link.raw for link in unassigned[:MAX_EVIDENCE]],
            )
        )
    if topo.unconnected:
        report.notes.append(
            f"{len(topo.unconnected)} port(s) have no far end; `ibnetdiscover -p` does not show their state"
        )
    found.close()
    report.notes.append(
        "ibnetdiscover shows connected links only, without port states or error counters: ports without a link "
        "need iblinkinfo, error counters ibqueryerrors"
    )
    if topo.starts_mid_record:
        _incomplete(report, "the input starts inside a node's record: what came before it is not here")
    _nd_completeness(report, topo)
    return report
