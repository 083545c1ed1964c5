"""ibdiagnet judged per stage: its Summary table (warnings and errors per stage), the `-E-`/`-W-` entries that name
the ports, and the PM_INFO counters of a pasted db_csv by the fabric's port rules (health.ib_ports).

Per stage (ibutils2's stage names): errors in a stage that checks the fabric's working (Discovery: duplicated GUIDs
or nodes that do not answer; Lids Check; Links Check; Subnet Manager) are faulty; errors elsewhere (Speed / Width
checks, Partition Keys, Nodes Information, Temperature Sensing, ...) and warnings in the link stages are degraded;
warnings in the other stages are listed. A Port Counters entry's counters are judged one by one, as perfquery's are,
so the same counts get the same verdict whichever tool read them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.health.ib_ports import describe_port, judge_counters, judge_state
from gpufleet.model import Severity
from gpufleet.parsers.infiniband.ibdiagnet import Message, parse_ibdiagnet
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.readers.ib import _Findings, _incomplete, _unreadable
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport

FAULTY_STAGES = frozenset({"Discovery", "Lids Check", "Links Check", "Subnet Manager"})
LINK_STAGES = frozenset({"Links Check", "Port Counters", "Speed / Width checks", "Cable Report"})
STAGE_FIX = {
    "Discovery": "fix what stops discovery: duplicated GUIDs, or nodes that do not answer (their links and power)",
    "Lids Check": "check the subnet manager's LID assignment (duplicated or zero LIDs); restart or fix the SM",
    "Links Check": "check the listed links: cable, transceiver and both ports' state (`iblinkinfo`)",
    "Subnet Manager": "make sure one master subnet manager runs and reaches the fabric (`sminfo`)",
    "Port Counters": "reseat or replace the cables of the ports with link errors; clear the counters and rerun",
    "Speed / Width checks": "reseat or replace the cables of links below their speed or width",
}
_PORT = re.compile(r"(?P<node>[^\s/<>]+(?:/[^\s/<>]+)*?)/P(?P<port>\d+)\b")
_LID = re.compile(r"\blid=(?P<lid>0x[0-9a-fA-F]+|\d+)")


def _entity(message: Message) -> str:
    """The port an entry names: `lid=0x0003 dev=51000 S248a.../N248a.../P9` or `Link: A/P9<-->B/P1`."""
    ports = _PORT.findall(message.text)
    lid = _LID.search(message.text)
    lid_value = int(lid.group("lid"), 0) if lid else None
    if not ports:
        return f"LID {lid_value}" if lid_value is not None else ""
    named = []
    for node, port in ports[:2]:
        last = node.split("/")[-1]
        lid_here = lid_value if len(ports) == 1 else None
        if re.fullmatch(r"N[0-9a-fA-F]{16}", last):  # S<system GUID>/N<node GUID>: no description known
            named.append(describe_port(guid="0x" + last[1:].lower(), port=int(port), lid=lid_here))
        else:
            named.append(describe_port(node=node, port=int(port), lid=lid_here))
    return " <-> ".join(named)


def read_ibdiagnet(lines: Iterable[str], source: str) -> TriageReport:
    report = TriageReport("ibdiagnet", source)
    parsed = parse_ibdiagnet(bounded_text(lines, report), source=source)
    found = _Findings(report)
    judged_stages = set()
    for row in parsed.summary:
        entries = [m for m in parsed.in_stage(row.stage) if m.level in "EW" and not _is_stage_result(m)]
        if row.errors == 0 and row.warnings == 0:
            continue
        judged_stages.add(row.stage)
        _stage(found, row.stage, row.errors, row.warnings, row.line, entries)
    for stage in parsed.stages:  # a log or an excerpt without the Summary: its entries
        if stage in judged_stages or stage == "Summary":
            continue
        entries = [m for m in parsed.in_stage(stage) if m.level in "EW" and not _is_stage_result(m)]
        errors = sum(1 for m in entries if m.level == "E")
        if entries:
            _stage(found, stage, errors, len(entries) - errors, "", entries)
    failed = [m for m in parsed.in_stage("") if m.level == "E"]
    if failed:  # before any stage: ibdiagnet could not start its run (no port, no fabric)
        found.add(
            TriageFinding(
                "ibdiagnet",
                Severity.critical,
                f"ibdiagnet failed before its stages: {failed[0].text[:200]}",
                "the host's port",
                "ibdiagnet failed",
                "check the local HCA port is up and sees the fabric (`ibstat`), then rerun ibdiagnet",
                [f"-E- {m.text}"[:300] for m in failed[:MAX_EVIDENCE]],
            )
        )
    _pm_info(found, parsed.tables)
    _ports(found, parsed.tables)
    found.close()
    if not parsed.summary and not parsed.tables and not parsed.messages:
        report.judged = False
        report.notes.append("no ibdiagnet stage, summary or db_csv section found")
    elif not parsed.summary and not parsed.tables:
        _incomplete(report, "no Summary table: the run's other stages are not in the input")
    if parsed.open_tables:
        _incomplete(report, f"the db_csv section {', '.join(parsed.open_tables)} has no END line: it is cut short")
    if parsed.log_path:
        report.notes.append(f"ibdiagnet wrote the details to {parsed.log_path} (and its .db_csv beside it)")
    _unreadable(report, parsed.unreadable, "ibdiagnet")
    return report


def _is_stage_result(message: Message) -> bool:
    return bool(re.search(r"finished (?:successfully|with (?:errors|warnings))", message.text))


def _stage(found: _Findings, stage: str, errors: int, warnings: int, line: str, entries: list[Message]) -> None:
    if stage == "Port Counters" and any(m.counters for m in entries):
        _counter_entries(found, entries, line)
        return
    if errors:
        severity = Severity.critical if stage in FAULTY_STAGES else Severity.warning
    else:
        severity = Severity.warning if stage in LINK_STAGES else Severity.info
    named = [e for m in entries if (e := _entity(m))]
    entity = named[0] if len(set(named)) == 1 else (f"{len(set(named))} ports" if named else "the fabric")
    counts = ", ".join(p for p in (f"{errors} error(s)" if errors else "", f"{warnings} warning(s)" if warnings
                                   else "") if p)  # fmt: skip
    first = f": {entries[0].text[:200]}" if entries else ""
    evidence = [x for x in [line] if x]
    for m in entries[: MAX_EVIDENCE - len(evidence)]:
        evidence.append(f"-{m.level}- {m.text}"[:300])
    found.add(
        TriageFinding(
            "ibdiagnet",
            severity,
            f"ibdiagnet stage {stage}: {counts}{first}",
            entity,
            f"{stage}: {counts}",
            STAGE_FIX.get(stage, "read the stage's entries in ibdiagnet2.log"),
            evidence,
        )
    )


def _counter_entries(found: _Findings, entries: list[Message], line: str) -> None:
    for m in entries:
        counters = {_camel(k): v for k, v in m.counters.items()}
        issues = judge_counters(counters)
        evidence = [x for x in [f"-{m.level}- {m.text}", *m.detail, line] if x]
        for issue in issues:
            found.issue(issue, _entity(m) or "a port", evidence)


def _camel(name: str) -> str:
    """ibdiagnet's `symbol_error_counter` as the PMA name `SymbolErrorCounter` (the catalog's names)."""
    if "_" not in name and name[:1].isupper():
        return name
    camel = "".join(part.capitalize() for part in name.split("_"))
    return {
        "PortXmitDiscard": "PortXmitDiscards",
        "Vl15Dropped": "VL15Dropped",
        "PortRcvRemotePhysicalErrors": "PortRcvRemotePhysicalErrors",
    }.get(camel, camel)


def _names(tables: dict[str, list[dict[str, str]]]) -> dict[str, str]:
    return {row.get("NodeGUID", ""): row.get("NodeDesc", "").strip('"') for row in tables.get("NODES", [])}


def _pm_info(found: _Findings, tables: dict[str, list[dict[str, str]]]) -> None:
    names = _names(tables)
    for row in tables.get("PM_INFO", []):
        counters = {}
        for key, value in row.items():
            if value.isdigit() and key not in ("PortNumber",):
                counters[_camel(key)] = int(value)
        port = row.get("PortNumber", "")
        entity = describe_port(node=names.get(row.get("NodeGUID", "")) or None, guid=row.get("PortGUID") or None,
                               port=int(port) if port.isdigit() else None)  # fmt: skip
        for issue in judge_counters(counters, extended=True):
            found.issue(issue, entity, [",".join(f"{k}={v}" for k, v in row.items() if v not in ("0", ""))[:300]])


_PORT_STATES = {"1": "Down", "2": "Init", "3": "Armed", "4": "Active"}
_PHYS_STATES = {"1": "Sleep", "2": "Polling", "3": "Disabled", "4": "PortConfigurationTraining", "5": "LinkUp",
                "6": "LinkErrorRecovery", "7": "PhyTest"}  # fmt: skip


def _ports(found: _Findings, tables: dict[str, list[dict[str, str]]]) -> None:
    """PORTS rows of ports that are cabled (a LINKS end) and not Active: a link that does not carry traffic."""
    linked = {(r.get("NodeGuid1", ""), r.get("PortNum1", "")) for r in tables.get("LINKS", [])}
    linked |= {(r.get("NodeGuid2", ""), r.get("PortNum2", "")) for r in tables.get("LINKS", [])}
    names = _names(tables)
    for row in tables.get("PORTS", []):
        key = (row.get("NodeGuid", row.get("NodeGUID", "")), row.get("PortNum", row.get("PortNumber", "")))
        state = _PORT_STATES.get(row.get("PortState", ""), row.get("PortState"))
        phys = _PHYS_STATES.get(row.get("PortPhyState", ""), row.get("PortPhyState"))
        if key not in linked or state in (None, "Active"):
            continue
        entity = describe_port(node=names.get(key[0]) or key[0] or None, port=int(key[1]) if key[1].isdigit() else None)
        for issue in judge_state(state, phys):
            found.issue(issue, entity, [",".join(f"{k}={v}" for k, v in row.items())[:300]])
