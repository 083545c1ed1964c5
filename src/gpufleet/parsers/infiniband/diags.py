"""infiniband-diags text output: perfquery (plain, -x, and the detail attributes of -E, -D and the like),
ibqueryerrors, iblinkinfo, ibnetdiscover (the topology and the -p ports report); and IB link flaps in syslog.

Counter names are the PMA attribute fields perfquery prints, which are also the catalog's names
(ib_counters.csv). The names libibmad printed before August 2010 (`SymbolErrors`, `LinkDowned`, `XmtDiscards`,
`XmtWait`, ...) are mapped to them, so records from any version of perfquery and ibqueryerrors, and from sysfs
(parsers/infiniband/sysfs.py), can be compared directly; `printed` keeps the name a record showed when it differs.

Each tool has a `parse_*` that refuses a line it cannot read (a command reading one file wants that) and a lenient
`scan_*` for pasted excerpts: what it cannot read is listed, and an output that starts or stops inside a record
says so. Formats follow rdma-core's infiniband-diags (perfquery.c, ibqueryerrors.c, iblinkinfo.c, ibnetdiscover.c,
libibmad dump.c and fields.c) back to the perl scripts they replaced in 2009.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.ib_counters import ib_counter_name
from gpufleet.errors import ParseError
from gpufleet.model.fabric import normalise_guid
from gpufleet.model.observe import SubnetManagerFact
from gpufleet.parsers.kernel.framing import split_frame

MAX_EVIDENCE_LINES = 40  # raw lines a record keeps to quote
MAX_LINE_CHARS = 4096  # a longer line is no tool's (node descriptions are 64 bytes): not parsed, only listed
_DIAGNOSTIC = re.compile(r"^(?:\S+: )?(?:ibwarn|ibpanic|iberror|ibdebug)\b|^\S+: iberror:|^(?:Query SA failed|WARN):")


def _pma(name: str) -> str:
    """The catalog's name for a counter; names the catalog does not describe stay as printed."""
    return ib_counter_name(name) or name


def _number(text: str) -> int | None:
    """A counter value as the tools print it: decimal, or hex for selects and masks."""
    value = text.strip()
    if value.lower().startswith("0x"):
        try:
            return int(value[2:], 16)
        except ValueError:
            return None
    return int(value) if value.isdigit() else None


# -- perfquery -----------------------------------------------------------------------------------------------
_PQ_HEAD = re.compile(
    r"^# (?P<attr>Port counters|Port extended counters|Port\w+?)(?: counters)?:\s*(?P<where>.*?)\s*"
    r"\bport (?P<port>\d+)"
    r"(?:\s*\(CapMask: (?P<cap>0x[0-9a-fA-F]+)(?: CapMask2: (?P<cap2>0x[0-9a-fA-F]+))?\))?\s*$"
)
_PQ_LID = re.compile(r"^Lid (?P<lid>\d+)\b")
_PQ_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*):\.*(?P<value>.*)$")
_PQ_META = ("PortSelect", "CounterSelect", "CounterSelect2")
_PQ_COUNTING = ("PortCounters", "PortCountersExtended", "PortRcvErrorDetails", "PortXmitDiscardDetails")
_EXTENDED_ONLY = frozenset(
    ("PortUnicastXmitPkts", "PortUnicastRcvPkts", "PortMulticastXmitPkts", "PortMulticastRcvPkts")
)
_CAP_EXT_WIDTH = 1 << 9  # PerfMgt ClassPortInfo CapabilityMask: PortCountersExtended has unicast/multicast
_CAP2_ADDL_EXT = 1 << 1  # CapabilityMask2: PortCountersExtended has the 64-bit error counters too


@dataclass
class PortCounters:
    lid: int | None  # None when the port was named by a directed route, or the header is not in the input
    port: int | None  # 255: all ports summed (`perfquery -a`)
    extended: bool  # from `perfquery -x` (PortCountersExtended, 64-bit)
    counters: dict[str, int] = field(default_factory=dict)  # catalog (PMA) names where the catalog has them
    cap_mask: str | None = None
    cap_mask2: str | None = None
    attribute: str = "PortCounters"  # PortCountersExtended, PortRcvErrorDetails, ...; "" when the header is lost
    where: str = ""  # how perfquery named the port: "Lid 2", "DR path slid 0; dlid 0; 0,1"
    printed: dict[str, str] = field(default_factory=dict)  # PMA name -> the older name the tool printed
    line: int = 0  # where the record starts in the input (1-based)
    lines: list[str] = field(default_factory=list)  # the record's lines, to quote
    complete: bool = True  # False: the record stops before the fields its attribute always prints
    _seen: set[str] = field(default_factory=set, repr=False)

    def known(self) -> dict[str, int]:
        """The counters the catalog describes (widths, meanings, thresholds)."""
        catalog = load_ib_counters()
        return {k: v for k, v in self.counters.items() if k in catalog}


@dataclass
class PerfqueryScan:
    blocks: list[PortCounters] = field(default_factory=list)
    starts_mid_record: bool = False
    truncated: str = ""  # why a record looks cut short ("" when every record is whole)
    diagnostics: list[str] = field(default_factory=list)  # ibwarn / iberror lines: a query that failed
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    bad_values: list[tuple[int, str]] = field(default_factory=list)


# The fields each record prints, in order (libibmad mad_dump_perfcounters / dump_perfcounters_ext). QP1Dropped
# (2017) is left out: older versions do not print it. PortCounters printed with the names before the 2010 renaming
# may also lack CounterSelect2 and XmtWait (added 2009-01).
_PQ_ERRORS = (
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortRcvSwitchRelayErrors",
    "PortXmitDiscards",
    "PortXmitConstraintErrors",
    "PortRcvConstraintErrors",
    "CounterSelect2",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
    "VL15Dropped",
)
_PQ_TRAFFIC = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")
_PQ_FIELDS = {
    "PortCounters": ("PortSelect", "CounterSelect", *_PQ_ERRORS, *_PQ_TRAFFIC, "PortXmitWait"),
    "PortRcvErrorDetails": (
        "PortSelect",
        "CounterSelect",
        "PortLocalPhysicalErrors",
        "PortMalformedPktErrors",
        "PortBufferOverrunErrors",
        "PortDLIDMappingErrors",
        "PortVLMappingErrors",
        "PortLoopingErrors",
    ),
    "PortXmitDiscardDetails": (
        "PortSelect",
        "CounterSelect",
        "PortInactiveDiscards",
        "PortNeighborMTUDiscards",
        "PortSwLifetimeLimitDiscards",
        "PortSwHOQLifetimeLimitDiscards",
    ),
}


def _pq_fields(block: PortCounters) -> tuple[str, ...] | None:
    """The fields a whole record of this attribute prints, as far as its header's capability masks tell."""
    if block.attribute == "PortCounters" and block.printed and "CounterSelect2" not in block._seen:
        return tuple(f for f in _PQ_FIELDS["PortCounters"] if f not in ("CounterSelect2", "PortXmitWait"))
    if block.attribute == "PortCountersExtended":
        cap = _number(block.cap_mask or "") or 0
        cap2 = _number(block.cap_mask2 or "") or 0
        fields: tuple[str, ...] = ("PortSelect", "CounterSelect", *_PQ_TRAFFIC)
        if cap & _CAP_EXT_WIDTH or _EXTENDED_ONLY & block._seen:
            fields += tuple(sorted(_EXTENDED_ONLY))
        if cap2 & _CAP2_ADDL_EXT or "CounterSelect2" in block._seen:
            fields += (*_PQ_ERRORS, "PortXmitWait")
        return fields
    return _PQ_FIELDS.get(block.attribute)


def _pq_first(block: PortCounters, fields: tuple[str, ...]) -> int:
    """Where a record whose start is cut off begins: it owes only the fields after its first."""
    return min((fields.index(f) for f in block._seen if f in fields), default=0)


def _pq_guess(block: PortCounters) -> None:
    """What a record without its header was: extended if it shows what only PortCountersExtended has."""
    catalog = load_ib_counters()
    wide = any(v > catalog[k].saturation for k, v in block.counters.items() if k in catalog)
    if wide or _EXTENDED_ONLY & set(block.counters):
        block.extended, block.attribute = True, "PortCountersExtended"
    elif set(block.counters) & set(catalog):
        block.attribute = "PortCounters"


def scan_perfquery(text: str) -> PerfqueryScan:
    """perfquery output or an excerpt of it, leniently: every record with whether it is whole."""
    scan = PerfqueryScan()
    block: PortCounters | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            scan.unreadable.append((lineno, raw[:200]))
            continue
        head = _PQ_HEAD.match(line)
        if head is not None:
            attr = head.group("attr")
            attribute = {"Port counters": "PortCounters", "Port extended counters": "PortCountersExtended"}.get(
                attr, attr
            )
            where = head.group("where").strip()
            lid = _PQ_LID.match(where)
            block = PortCounters(
                int(lid.group("lid")) if lid else None,
                int(head.group("port")),
                attribute == "PortCountersExtended",
                cap_mask=head.group("cap"),
                cap_mask2=head.group("cap2"),
                attribute=attribute,
                where=where,
                line=lineno,
                lines=[raw],
            )
            scan.blocks.append(block)
            continue
        if _DIAGNOSTIC.search(line):
            scan.diagnostics.append(line)
            continue
        if line.startswith("#"):
            continue
        match = _PQ_FIELD.match(line)
        if match is None:
            scan.unreadable.append((lineno, raw))
            continue
        if block is None:
            scan.starts_mid_record = True
            block = PortCounters(None, None, False, attribute="", line=lineno)
            scan.blocks.append(block)
        name, value = match.group("name"), match.group("value").strip()
        pma = _pma(name)
        if len(block.lines) < MAX_EVIDENCE_LINES:
            block.lines.append(raw)
        block._seen.add(pma)
        if name in _PQ_META:
            continue
        number = _number(value)
        if number is None:
            scan.bad_values.append((lineno, raw))
            continue
        block.counters[pma] = number
        if pma != name:
            block.printed[pma] = name
    for block in scan.blocks:
        headless = not block.attribute
        if headless:
            _pq_guess(block)
        fields = _pq_fields(block)
        if fields is None:
            missing = [] if block._seen else ["its counters"]
        else:
            first = _pq_first(block, fields) if headless else 0
            missing = [f for f in fields[first:] if f not in block._seen]
        if missing:
            block.complete = False
            scan.truncated = scan.truncated or (
                f"the {block.attribute or 'counter'} record of {block.where or 'a port'} port {block.port} "
                f"lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
            )
    return scan


def parse_perfquery(text: str, *, source: str = "perfquery") -> list[PortCounters]:
    """Parse one or more `perfquery [-x] [lid] [port]` blocks (and detail attributes such as `perfquery -E`)."""
    scan = scan_perfquery(text)
    if scan.unreadable:
        lineno, line = scan.unreadable[0]
        raise ParseError(
            f"{source}:{lineno}: not a perfquery counter line: {line.strip()[:60]!r}",
            fix="pass the output of `perfquery` or `perfquery -x`, unedited",
        )
    if scan.starts_mid_record:
        raise ParseError(
            f"{source}:{scan.blocks[0].line}: counter before any `# Port counters` header",
            fix="pass perfquery's whole output",
        )
    for lineno, line in scan.bad_values:
        block = next((b for b in reversed(scan.blocks) if b.line <= lineno), None)
        if block is not None and block.attribute in _PQ_COUNTING:
            name, _, value = line.strip().partition(":")
            raise ParseError(
                f"{source}:{lineno}: {name} has a non-numeric value {value.strip('.')!r}",
                fix="pass the output of `perfquery` or `perfquery -x`, unedited",
            )
    if not scan.blocks:
        why = f": {scan.diagnostics[-1]}" if scan.diagnostics else ""  # the tool's last word says what failed
        raise ParseError(f"{source}: no `# Port counters` block{why}", fix="pass the output of perfquery")
    return scan.blocks


# -- ibqueryerrors -------------------------------------------------------------------------------------------
_QE_NODE = re.compile(r'^(?P<what>Errors|Data Counters) for\s+(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?"(?P<name>.*)"\s*$')
_QE_PORT = re.compile(r"^\s*GUID (?P<guid>0x[0-9a-fA-F]+) port (?P<port>\d+|ALL):(?P<rest>.*)$")
_QE_COUNTER = re.compile(r"\[(?P<name>\w+) == (?P<value>-?\d+)(?: \((?P<human>[^)\]]*)\))?\]")
_QE_LINK = re.compile(r"^\s*Link info:\s*(?P<link>.*)$")
_QE_SUMMARY_NODES = re.compile(r"^## Summary: (?P<nodes>\d+) nodes checked, (?P<bad>\d+) bad nodes found")
_QE_SUMMARY_PORTS = re.compile(r"^##\s+(?P<ports>\d+) ports checked, (?P<bad>\d+) ports have errors")
_QE_PMA_FAILURES = re.compile(r"^##\s+(?P<n>\d+) PMA query failures")
_QE_THRESHOLD = re.compile(r"\[(?P<name>\w+) = (?P<value>\d+)\]")
_QE_SUPPRESSED = re.compile(r"^(?:## Suppres+ed:|Suppressing:)(?P<names>.*)$")


@dataclass
class PortErrors:
    node: str
    guid: str
    port: int | None  # None: the node's all-ports aggregate (`port ALL`), which switches report
    counters: dict[str, int]
    detail: str = ""  # what ibqueryerrors printed after the counters, and the port's link (`-r`)
    wide: set[str] = field(default_factory=set)  # counters printed as 64-bit values (with a human-readable size)
    printed: dict[str, str] = field(default_factory=dict)  # PMA name -> the older name the tool printed
    data_only: bool = False  # under `Data Counters for` (`--counters`): traffic, not errors
    node_guid: str | None = None  # from the `Errors for` line (switches)
    line: int = 0
    lines: list[str] = field(default_factory=list)


@dataclass
class QueryErrorsReport:
    ports: list[PortErrors]
    nodes_checked: int | None = None
    bad_nodes: int | None = None
    ports_checked: int | None = None
    bad_ports: int | None = None
    thresholds: dict[str, int] = field(default_factory=dict)  # from an error_thresholds file, as printed
    suppressed: list[str] = field(default_factory=list)  # counters not checked (`-s`, `-c`)
    pma_failures: int | None = None
    summary: bool = False  # the `## Summary` lines were seen (versions before 1.6 print none)
    diagnostics: list[str] = field(default_factory=list)
    starts_mid_record: bool = False  # port lines before any `Errors for` line


def _qe_value(text: str) -> int:
    value = int(text)
    return value + (1 << 32) if value < 0 else value  # versions before 1.5 printed 32-bit values with %d


def parse_ibqueryerrors(text: str, *, source: str = "ibqueryerrors") -> QueryErrorsReport:
    """`ibqueryerrors` output (any version, with -r, --data, --details, --counters), or an excerpt of it."""
    report = QueryErrorsReport(ports=[])
    node, node_guid, data_only = "", None, False
    last: PortErrors | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or len(line) > MAX_LINE_CHARS:
            continue
        head = _QE_NODE.match(line.strip())
        if head is not None:
            node, node_guid = head.group("name"), head.group("guid")
            data_only = head.group("what") == "Data Counters"
            last = None
            continue
        port = _QE_PORT.match(line)
        if port is not None:
            rest = port.group("rest")
            counters: dict[str, int] = {}
            printed: dict[str, str] = {}
            wide: set[str] = set()
            for m in _QE_COUNTER.finditer(rest):
                name = _pma(m.group("name"))
                counters[name] = _qe_value(m.group("value"))
                if name != m.group("name"):
                    printed[name] = m.group("name")
                if m.group("human") is not None:
                    wide.add(name)
            if not counters and "[" in rest:
                raise ParseError(
                    f"{source}:{lineno}: cannot read the counters in {rest.strip()[:60]!r}",
                    fix="pass the output of `ibqueryerrors`, unedited",
                )
            if not node:
                report.starts_mid_record = True
            detail = _QE_COUNTER.sub("", rest).strip()
            number = None if port.group("port") == "ALL" else int(port.group("port"))
            last = PortErrors(
                node, port.group("guid"), number, counters, detail, wide, printed, data_only, node_guid, lineno, [line]
            )
            report.ports.append(last)
            continue
        link = _QE_LINK.match(line)
        if link is not None and last is not None:
            last.detail = (last.detail + " " if last.detail else "") + link.group("link").strip()
            if len(last.lines) < MAX_EVIDENCE_LINES:
                last.lines.append(line)
            continue
        if _parse_qe_summary(line, report):
            continue
        if _DIAGNOSTIC.search(line.strip()):
            report.diagnostics.append(line.strip())
    return report


def _parse_qe_summary(line: str, report: QueryErrorsReport) -> bool:
    nodes = _QE_SUMMARY_NODES.match(line)
    if nodes is not None:
        report.nodes_checked, report.bad_nodes = int(nodes.group("nodes")), int(nodes.group("bad"))
        report.summary = True
        return True
    ports = _QE_SUMMARY_PORTS.match(line)
    if ports is not None:
        report.ports_checked, report.bad_ports = int(ports.group("ports")), int(ports.group("bad"))
        return True
    failures = _QE_PMA_FAILURES.match(line)
    if failures is not None:
        report.pma_failures = int(failures.group("n"))
        return True
    suppressed = _QE_SUPPRESSED.match(line.strip())
    if suppressed is not None:
        report.suppressed = [_pma(n) for n in suppressed.group("names").split()]
        return True
    if line.startswith("## Thresholds:") or line.startswith("Thresholds:"):
        report.thresholds = {_pma(m.group("name")): int(m.group("value")) for m in _QE_THRESHOLD.finditer(line)}
        return True
    return line.startswith("## ")


# -- iblinkinfo ----------------------------------------------------------------------------------------------
_LI_NODE = re.compile(
    r"^(?:[<>] )?(?P<type>Switch|CA|Router|\?\?):?\s+(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<name>.*?):?\s*$"
)
_LI_SPLIT = re.compile(r"^(?P<left>.*?)==\((?P<mid>.*?)\)(?P<extra>(?:\s*\([^()]*\))*)\s*==>(?P<right>.*)$")
_LI_NO_FAR_END = re.compile(r"^(?P<left>.*?)==\((?P<mid>.*?)\)(?P<extra>(?:\s*\([^()]*\))*)\s*$")
_LI_LEFT = re.compile(
    r"^\s*(?:[<>]\s+)?(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?:\"(?P<name>.*)\"\S*\s+)?(?P<lid>\d+)\s+(?P<port>\d+)"
    r"\[(?P<ext>[^\]]*)\]\s*$"
)
_LI_STATE = re.compile(
    r"(?P<state>[A-Za-z]+|\?\(\d+\)|\?+)\s*/\s*(?P<phys>[A-Za-z]+|\?\(\d+\)|\?+)\s*(?P<caps>\[.*\])?\s*$"
)
_LI_WIDTH = re.compile(r"^\s*(?P<width>\d+X|undefined \(\d+\))\s*")
_LI_GBPS = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?)\s*Gbp?s")
_LI_RIGHT = re.compile(
    r"^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?:(?P<lid>\d+)\s+(?P<port>\d+))?\s*\[(?P<ext>[^\]]*)\]\s*"
    r"\"(?P<name>.*)\"\s*(?:\((?P<note>.*)\))?\s*$"
)


@dataclass
class LinkInfo:
    node: str
    node_type: str  # Switch or CA (Router)
    lid: int
    port: int
    width: str | None
    speed_gbps: float | None
    state: str  # Active, Down, Initialize, Armed
    phys_state: str  # LinkUp, Polling, Disabled, ...
    remote_lid: int | None
    remote_port: int | None
    remote_name: str
    note: str  # e.g. "Could be 12X": the link runs below what both ends support
    guid: str | None = None  # the port's GUID (CAs, line mode) or the switch's
    speed: str = ""  # as printed: "53.125 Gbps", "10.0 Gbps (FDR10)", "2.5 Gbs"
    remote_guid: str | None = None
    far_end_shown: bool = True  # False: the `==> ...` part of the line is missing (cut off, or taken for a marker)
    far_end_available: bool = True  # False: iblinkinfo printed "Port not available"
    settings: str = ""  # `-p`: (HOQ:.. VL_Stall:..)
    line: int = 0
    raw: str = ""

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.phys_state == "LinkUp"


@dataclass
class LinkInfoScan:
    links: list[LinkInfo] = field(default_factory=list)
    nodes: list[tuple[str, str, str | None, int]] = field(default_factory=list)  # (type, name, guid, line)
    empty_nodes: list[str] = field(default_factory=list)  # a node header with no port lines after it
    starts_mid_record: bool = False
    diagnostics: list[str] = field(default_factory=list)
    unreadable: list[tuple[int, str]] = field(default_factory=list)


def _li_link(line: str, lineno: int, node: str, node_type: str, node_guid: str | None) -> LinkInfo | None:
    split = _LI_SPLIT.match(line)
    right: str | None = None
    if split is not None:
        right = split.group("right")
    else:
        split = _LI_NO_FAR_END.match(line)
        if split is None:
            return None
    left = _LI_LEFT.match(split.group("left"))
    state = _LI_STATE.search(split.group("mid"))
    if left is None or state is None:
        return None
    before = split.group("mid")[: state.start()]
    width = _LI_WIDTH.match(before)
    speed = before[width.end() :].strip() if width else before.strip()
    gbps = _LI_GBPS.match(speed)
    link = LinkInfo(
        node=left.group("name").strip() if left.group("name") is not None else node,
        node_type=node_type,
        lid=int(left.group("lid")),
        port=int(left.group("port")),
        width=width.group("width") if width else None,
        speed_gbps=float(gbps.group("gbps")) if gbps else None,
        state=state.group("state"),
        phys_state=state.group("phys"),
        remote_lid=None,
        remote_port=None,
        remote_name="",
        note="",
        guid=left.group("guid") or (node_guid if node_type == "Switch" else None),
        speed=speed,
        settings=split.group("extra").strip(),
        line=lineno,
        raw=line,
    )
    if right is None:
        link.far_end_shown = False
        return link
    far = _LI_RIGHT.match(right)
    if far is None:
        link.far_end_available = False
        link.note = right.strip().strip('"')
        return link
    link.remote_guid = far.group("guid")
    link.remote_lid = int(far.group("lid")) if far.group("lid") else None
    link.remote_port = int(far.group("port")) if far.group("port") else None
    link.remote_name = far.group("name")
    link.note = " ".join((far.group("note") or "").split())
    return link


def parse_link_line(text: str) -> LinkInfo | None:
    """One iblinkinfo-style link (`4   35[  ] ==( ... Down/ Polling)==> ...`), as ibqueryerrors -r prints it
    after `Link info:`; None when it is not one."""
    if len(text) > MAX_LINE_CHARS or "==(" not in text:
        return None
    return _li_link(text, 0, "", "", None)


def scan_iblinkinfo(text: str) -> LinkInfoScan:
    """iblinkinfo output (any mode: default, --switches-only, -l, -p, -d) or an excerpt of it, leniently."""
    scan = LinkInfoScan()
    node, node_type, node_guid = "", "", None
    ports_since_header = 1
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            scan.unreadable.append((lineno, line[:200]))
            continue
        if "==(" in line:
            link = _li_link(line, lineno, node, node_type, node_guid)
            if link is None:
                scan.unreadable.append((lineno, line))
                continue
            if not node_type and not link.node:
                scan.starts_mid_record = True
            scan.links.append(link)
            ports_since_header += 1
            continue
        head = _LI_NODE.match(line.strip())
        if head is not None and not _DIAGNOSTIC.search(line.strip()):
            if ports_since_header == 0:
                scan.empty_nodes.append(node)
            node_type = head.group("type")
            node = head.group("name").strip().strip('"')
            node_guid = head.group("guid")
            scan.nodes.append((node_type, node, node_guid, lineno))
            ports_since_header = 0
            continue
        if _DIAGNOSTIC.search(line.strip()):
            scan.diagnostics.append(line.strip())
        else:
            scan.unreadable.append((lineno, line))
    if ports_since_header == 0:
        scan.empty_nodes.append(node)
    _li_line_mode_types(scan.links)
    return scan


def _li_line_mode_types(links: list[LinkInfo]) -> None:
    """In line mode (`-l`) there are no `Switch:`/`CA:` headers: a node whose ports all show one GUID is a
    switch (its ports share the switch's port 0 GUID); a CA's ports each have their own."""
    guids: dict[str, set[str | None]] = {}
    counts: dict[str, int] = {}
    for link in links:
        if not link.node_type:
            guids.setdefault(link.node, set()).add(link.guid)
            counts[link.node] = counts.get(link.node, 0) + 1
    for link in links:
        if not link.node_type:
            shared = counts[link.node] > 1 and len(guids[link.node]) == 1
            link.node_type = "Switch" if shared else "CA"


def parse_iblinkinfo(text: str, *, source: str = "iblinkinfo") -> list[LinkInfo]:
    scan = scan_iblinkinfo(text)
    for lineno, line in scan.unreadable:
        if "==(" in line:
            raise ParseError(
                f"{source}:{lineno}: cannot read link line {line.strip()[:70]!r}",
                fix="pass the output of `iblinkinfo`, unedited",
            )
    return scan.links


# -- ibnetdiscover -------------------------------------------------------------------------------------------
_ND_NODE = re.compile(
    r'^(?:[<>] )?(?P<type>Switch|Ca|Rt)\s+(?P<nports>\d+)\s+"(?P<id>[^"]+)"\s*(?:#\s*"(?P<desc>.*)"(?P<rest>[^"]*))?$'
)
_ND_PORT = re.compile(
    r"^(?:[<>] )?\[(?P<port>\d+)\](?:\[ext (?P<ext>\d+)\])?(?:\((?P<portguid>[0-9a-fA-F]+)\))?\s*"
    r'"(?P<rid>[^"]+)"\[(?P<rport>\d+)\](?:\[ext (?P<rext>\d+)\])?(?:\s*\((?P<rportguid>[0-9a-fA-F]+)\))?\s*'
    r"(?:#\s*(?P<comment>.*))?$"
)
_ND_LID = re.compile(r"\blid (?P<lid>\d+)")
_ND_OWN = re.compile(r"^lid (?P<lid>\d+) lmc (?P<lmc>\d+)\s+")
_ND_REMOTE = re.compile(
    r'"(?P<desc>.*)"\s+lid (?P<lid>\d+)\s+(?P<width>\d+x|\?\?)(?P<speed>FDR10|[A-Z]{3}|\?\?\?)(?=\s|$)'
)
_ND_SPEED = re.compile(r"\b(?P<width>\d+)x(?P<speed>[A-Z0-9]+)\s*$")
_ND_EXTRA = re.compile(r"^(?:Chassis \d+|Non-Chassis Nodes|Hostname: )")
_ND_PORTS_REPORT = re.compile(
    r"^(?P<type>CA|SW|RT|\?\?)\s+(?P<lid>\d+)\s+(?P<port>\d+)\s+(?P<guid>0x[0-9a-fA-F]+)\s+"
    r"(?P<width>\d+x|\?\?)\s+(?P<speed>\S+)\s*"
    r"(?:-\s+(?P<rtype>CA|SW|RT|\?\?)\s+(?P<rlid>\d+)\s+(?P<rport>\d+)\s+(?P<rguid>0x[0-9a-fA-F]+)\s+"
    r"\(\s*'(?P<name>.*)'\s+-\s+'(?P<rname>.*)'\s*\)|'(?P<alone>.*)')\s*$"
)
_ND_TYPES = {"SW": "Switch", "CA": "Ca", "RT": "Rt"}


@dataclass
class FabricNode:
    id: str  # e.g. S-0000000000200000 or H-0000000000100000
    type: str  # Switch, Ca, Rt
    ports: int
    description: str
    lid: int | None
    line: int = 0


@dataclass
class FabricLink:
    node: str
    port: int
    remote: str
    remote_port: int
    remote_description: str
    width: str | None  # "4x"
    speed: str | None  # "HDR", "NDR"
    lid: int | None = None  # this port's LID (a switch's, or a CA port's own)
    remote_lid: int | None = None
    port_guid: str | None = None
    remote_port_guid: str | None = None
    line: int = 0
    raw: str = ""


@dataclass
class FabricTopology:
    nodes: dict[str, FabricNode] = field(default_factory=dict)
    links: list[FabricLink] = field(default_factory=list)
    unconnected: list[FabricLink] = field(default_factory=list)  # `-p`: ports with no far end (remote "")
    ports_report: bool = False  # the input was `ibnetdiscover -p`
    starts_mid_record: bool = False
    # the `# Topology file: generated on ...` header ibnetdiscover prints first (infiniband-diags ibnetdiscover.c,
    # 1.x-5x): the input starts where a whole dump starts, so nodes it leads to and lacks were cut off, not left out
    whole_start: bool = False
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)


def _nd_speed(comment: str) -> tuple[str | None, str | None, str, int | None]:
    """(width, speed, remote description, remote lid) from a port line's comment."""
    remote = _ND_REMOTE.search(comment)
    if remote is not None:
        width = remote.group("width") if remote.group("width") != "??" else None
        speed = remote.group("speed") if remote.group("speed") != "???" else None
        return width, speed, remote.group("desc"), int(remote.group("lid"))
    speed_only = _ND_SPEED.search(comment)
    desc = re.search(r'"(?P<desc>[^"]*)"', comment)
    return (
        f"{speed_only.group('width')}x" if speed_only else None,
        speed_only.group("speed") if speed_only else None,
        desc.group("desc") if desc else "",
        None,
    )


def _nd_ports_line(line: str, lineno: int, topo: FabricTopology) -> bool:
    match = _ND_PORTS_REPORT.match(line)
    if match is None:
        return False
    topo.ports_report = True
    kind = _ND_TYPES.get(match.group("type"), "?")
    name = match.group("name") if match.group("name") is not None else match.group("alone") or ""
    node_id = f"{kind}:{name}"
    node = topo.nodes.setdefault(node_id, FabricNode(node_id, kind, 0, name, None, lineno))
    node.ports += 1
    lid = int(match.group("lid"))
    if kind == "Switch":
        node.lid = lid
    width = match.group("width") if match.group("width") != "??" else None
    speed = match.group("speed") if re.fullmatch(r"FDR10|[A-Z]{3}", match.group("speed")) else None
    if match.group("rtype") is None:
        topo.unconnected.append(
            FabricLink(
                node_id,
                int(match.group("port")),
                "",
                0,
                "",
                width,
                speed,
                lid,
                None,
                match.group("guid"),
                None,
                lineno,
                line,
            )
        )
        return True
    remote_kind = _ND_TYPES.get(match.group("rtype"), "?")
    topo.links.append(
        FabricLink(
            node_id,
            int(match.group("port")),
            f"{remote_kind}:{match.group('rname')}",
            int(match.group("rport")),
            match.group("rname"),
            width,
            speed,
            lid,
            int(match.group("rlid")),
            match.group("guid"),
            match.group("rguid"),
            lineno,
            line,
        )
    )
    return True


def scan_ibnetdiscover(text: str) -> FabricTopology:
    """ibnetdiscover output (the topology, with -g, -f, -s; or the -p ports report), or an excerpt, leniently."""
    topo = FabricTopology()
    current: FabricNode | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("# Topology file:"):
            topo.whole_start = True
        if not line or line.startswith("#") or "=" in line.split()[0] or _ND_EXTRA.match(line):
            continue
        if len(line) > MAX_LINE_CHARS:
            topo.unreadable.append((lineno, raw[:200]))
            continue
        node = _ND_NODE.match(line)
        if node is not None:
            rest = node.group("rest") or ""
            lid = _ND_LID.search(rest)
            current = FabricNode(
                node.group("id"),
                node.group("type"),
                int(node.group("nports")),
                node.group("desc") or "",
                int(lid.group("lid")) if lid else None,
                lineno,
            )
            topo.nodes[current.id] = current
            continue
        port = _ND_PORT.match(line)
        if port is None:
            if _nd_ports_line(line, lineno, topo):
                continue
            if _DIAGNOSTIC.search(line):
                topo.diagnostics.append(line)
            else:
                topo.unreadable.append((lineno, raw))
            continue
        comment = port.group("comment") or ""
        own = _ND_OWN.match(comment)
        width, speed, remote_desc, remote_lid = _nd_speed(comment)
        if current is None:
            topo.starts_mid_record = True
            current = FabricNode("?", "?", 0, "", None, lineno)
        if current.type in ("Ca", "Rt") and current.lid is None and own is not None:
            current.lid = int(own.group("lid"))  # a CA's lid is on its port line: `# lid 2 lmc 0 "leaf1" ...`
        topo.links.append(
            FabricLink(
                node=current.id,
                port=int(port.group("port")),
                remote=port.group("rid"),
                remote_port=int(port.group("rport")),
                remote_description=remote_desc,
                width=width,
                speed=speed,
                lid=int(own.group("lid")) if own else current.lid,
                remote_lid=remote_lid,
                port_guid=port.group("portguid"),
                remote_port_guid=port.group("rportguid"),
                line=lineno,
                raw=raw,
            )
        )
    return topo


def parse_ibnetdiscover(text: str, *, source: str = "ibnetdiscover") -> FabricTopology:
    topo = scan_ibnetdiscover(text)
    if topo.unreadable:
        lineno, line = topo.unreadable[0]
        raise ParseError(
            f"{source}:{lineno}: not an ibnetdiscover line: {line.strip()[:70]!r}",
            fix="pass the output of `ibnetdiscover`, unedited",
        )
    if topo.starts_mid_record:
        first = next(link.line for link in topo.links if link.node == "?")
        raise ParseError(
            f"{source}:{first}: port line before any Switch/Ca line", fix="pass the whole `ibnetdiscover` output"
        )
    topo.nodes.pop("?", None)
    if not topo.nodes:
        raise ParseError(f"{source}: no Switch or Ca entries", fix="pass the output of ibnetdiscover")
    return topo


# -- link flaps in syslog ------------------------------------------------------------------------------------
_CARRIER = re.compile(r"^(?P<iface>[\w.-]+): (?P<what>lost carrier|Gained carrier)\b", re.IGNORECASE)
_MLX_LINK = re.compile(r"mlx5_core (?P<pci>[0-9a-fA-F:.]+) (?P<iface>[\w.-]+): Link (?P<what>up|down)\b")


@dataclass(frozen=True)
class LinkStateEvent:
    line: int
    interface: str
    state: Literal["down", "up"]
    wall_time: datetime | None
    host: str | None
    raw: str


def link_event(raw: str, lineno: int, *, year: int | None = None) -> LinkStateEvent | None:
    """The link event one log line reports, if any: `ib6: lost carrier` / `Gained carrier` (systemd-networkd),
    `mlx5_core ...: Link down/up` (kernel)."""
    if "carrier" not in raw and "Link " not in raw:
        return None
    frame = split_frame(raw, year=year)
    message = frame.message.strip()
    carrier = _CARRIER.match(message)
    if carrier is not None:
        state: Literal["down", "up"] = "down" if carrier.group("what").lower() == "lost carrier" else "up"
        return LinkStateEvent(lineno, carrier.group("iface"), state, frame.wall_time, frame.host, raw)
    mlx = _MLX_LINK.search(message)
    if mlx is not None:
        state = "down" if mlx.group("what") == "down" else "up"
        return LinkStateEvent(lineno, mlx.group("iface"), state, frame.wall_time, frame.host, raw)
    return None


def parse_link_events(text: str, *, year: int | None = None) -> list[LinkStateEvent]:
    """Every link event of a syslog or kernel log, in order."""
    found = (link_event(raw, lineno, year=year) for lineno, raw in enumerate(text.splitlines(), start=1))
    return [event for event in found if event is not None]


def count_flaps(events: list[LinkStateEvent]) -> dict[str, int]:
    """Link-down events per interface: each one is a flap (the link dropped), as aznhc's flapping check
    counts."""
    counts: dict[str, int] = {}
    for event in events:
        if event.state == "down":
            counts[event.interface] = counts.get(event.interface, 0) + 1
    return counts


# -- sminfo ----------------------------------------------------------------------------------------------------
_SMINFO = re.compile(
    r"sm lid (?P<lid>\d+) sm guid (?P<guid>0x[0-9a-fA-F]+), activity count (?P<act>\d+) priority (?P<prio>\d+) "
    r"state \d+ (?P<state>\w+)"
)


def parse_sminfo(text: str) -> SubnetManagerFact | None:
    """`sminfo`: "sminfo: sm lid 1 sm guid 0x200000, activity count 546 priority 0 state 3 SMINFO_MASTER"."""
    match = _SMINFO.search(text)
    if match is None:
        return None
    return SubnetManagerFact(
        int(match.group("lid")),
        normalise_guid(match.group("guid")),
        int(match.group("act")),
        min(int(match.group("prio")), 15),
        match.group("state"),
    )
