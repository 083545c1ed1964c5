"""InfiniBand tools: infiniband-diags' local ports (`ibstat`, `ibstatus`), their counters (`perfquery`,
`ibqueryerrors`) and the fabric (`iblinkinfo`, `ibnetdiscover`); libibverbs' `ibv_devinfo`; MFT's `mlxlink`."""

from __future__ import annotations

from gpufleet.parsers.infiniband.diags import (
    FabricTopology,
    LinkInfo,
    PortCounters,
    QueryErrorsReport,
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_perfquery,
)
from gpufleet.parsers.infiniband.ibdiagnet import Ibdiagnet, parse_ibdiagnet
from gpufleet.parsers.infiniband.ibstat import parse_ibstat, parse_ibstatus
from gpufleet.parsers.infiniband.ibv_devinfo import Devinfo, parse_ibv_devinfo
from gpufleet.parsers.infiniband.mlxlink import Mlxlink, parse_mlxlink
from gpufleet.triage.formats.registry import Format, Table, View, cell
from gpufleet.triage.readers.ib import (
    read_iblinkinfo,
    read_ibnetdiscover,
    read_ibqueryerrors,
    read_ibstat,
    read_ibstatus,
    read_perfquery,
)
from gpufleet.triage.readers.ib_diagnet import read_ibdiagnet
from gpufleet.triage.readers.ib_hca import read_ibv_devinfo, read_mlxlink

IBSTAT = Format(
    name="ibstat",
    summary="`ibstat`: each HCA port's state, physical state, rate and link layer",
    signs=(
        (r"^(?:CA|Switch|Router) '[^']+'\s*$", 8),
        (r"^(?:CA|Switch|Router): '[^']+'\s*$", 8),  # `ibstat <ca> <port>`
        (r"^\s*(?:CA|Switch|Router) type: ", 4),
        (r"^\s*Port \d+:\s*$", 3),
        (r"^\s*Physical state: ", 4),
        (r"^\s*Link layer: ", 3),
        (r"^\s*Port GUID: 0x[0-9a-fA-F]+", 3),
        (r"^(?:\S+: )?ibpanic: \[\d+\] main: stat of IB device '[^']*' failed", 10),  # ibstat.c, a vanished HCA
    ),
    parse=parse_ibstat,
    judge=read_ibstat,
)

IBSTATUS = Format(
    name="ibstatus",
    summary="`ibstatus`: each HCA port's state, physical state and rate as sysfs gives them",
    signs=(
        (r"^Infiniband device '[^']+' port \S+ status:", 10),
        (r"^\s+phys state:\s+\d+: ", 4),
        (r"^\s+rate:\s+\d+(?:\.\d+)? Gb/sec", 4),
        (r"^\s+default gid:\s", 3),
        (r"^Fatal error:\s+device '[^']*': sys files not found", 10),  # the ibstatus script, no such device
    ),
    parse=parse_ibstatus,
    judge=read_ibstatus,
)


def _perfquery_view(ports: list[PortCounters], source: str) -> View:
    rows = [[p.lid, p.port, "yes" if p.extended else "no", k, v] for p in ports for k, v in p.counters.items()]
    return View((Table(("LID", "PORT", "EXTENDED", "COUNTER", "VALUE"), rows, source),))


PERFQUERY = Format(
    name="perfquery",
    summary="`perfquery` or `perfquery -x`: a port's counters, by the PMA names the catalog uses",
    signs=(
        (r"^# Port (?:extended )?counters: .*\bport \d+", 10),
        (r"^# Port\w+(?: counters)?: .*\bport \d+", 8),  # -E, -D and the other attributes
        (r"^PortSelect:\.+\d+", 6),
        (r"^(?:SymbolErrorCounter|PortXmitData|LinkDownedCounter|SymbolErrors|XmtData|LinkDowned):\.+", 4),
        # libibmad's dotted fields, for an excerpt without the header
        (
            r"^(?:Port[A-Z]\w+|SymbolError\w*|Link\w+(?:Counter|Errors|Recovers|Downed)|ExcessiveBuffer\w+|"
            r"ExcBufOverrunErrors|VL15Dropped|QP1Dropped|(?:Xmt|Rcv)\w+):\.{2,}\d+\s*$",
            6,
        ),
        (r"^perfquery: iberror: ", 10),
    ),
    parse=parse_perfquery,
    judge=read_perfquery,
    render=_perfquery_view,
)


def _ibqueryerrors_view(report: QueryErrorsReport, source: str) -> View:
    rows = [
        [p.node, p.guid, "ALL" if p.port is None else p.port, ", ".join(f"{k}={v}" for k, v in p.counters.items())]
        for p in report.ports
    ]
    checked = f"bad ports: {cell(report.bad_ports)} of {cell(report.ports_checked)} checked"
    return View((Table(("NODE", "GUID", "PORT", "ERRORS"), rows, source),), (checked,))


IBQUERYERRORS = Format(
    name="ibqueryerrors",
    summary="`ibqueryerrors`: the ports whose error counters are over threshold",
    signs=(
        (r"^(?:Errors|Data Counters) for\s+(?:0x[0-9a-fA-F]+\s+)?\"", 8),
        (r"^\s+GUID 0x[0-9a-fA-F]+ port (?:\d+|ALL):", 8),
        (r"^## Summary: \d+ nodes checked", 10),
        (r"^##\s+\d+ ports checked, \d+ ports have errors", 6),
    ),
    parse=parse_ibqueryerrors,
    judge=read_ibqueryerrors,
    render=_ibqueryerrors_view,
)


def _iblinkinfo_view(links: list[LinkInfo], source: str) -> View:
    rows = [
        [
            link.node, link.port, link.state, link.phys_state, cell(link.width), cell(link.speed_gbps),
            f"{link.remote_name} [{cell(link.remote_port)}]" if link.remote_lid is not None else "-", link.note,
        ]
        for link in links
    ]  # fmt: skip
    columns = ("NODE", "PORT", "STATE", "PHYSICAL", "WIDTH", "GBPS", "REMOTE", "NOTE")
    return View((Table(columns, rows, source),))


IBLINKINFO = Format(
    name="iblinkinfo",
    summary="`iblinkinfo`: every port with its state, width, speed and the far end",
    signs=(
        (r"^(?:Switch|CA|Router):? (?:0x[0-9a-fA-F]+ )?\S.*:\s*$", 4),
        (r"^(?:Switch|CA|Router): 0x[0-9a-fA-F]+ ", 4),
        (r"\d+\[[\s\d]*\]\s+==\(", 8),
    ),
    parse=parse_iblinkinfo,
    judge=read_iblinkinfo,
    render=_iblinkinfo_view,
)


def _ibnetdiscover_view(fabric: FabricTopology, source: str) -> View:
    rows = [[n.id, n.type, n.ports, n.description, cell(n.lid)] for n in fabric.nodes.values()]
    return View((Table(("ID", "TYPE", "PORTS", "DESCRIPTION", "LID"), rows, source),), (f"{len(fabric.links)} links",))


IBNETDISCOVER = Format(
    name="ibnetdiscover",
    summary="`ibnetdiscover`: the fabric's nodes (switches and HCAs) and the links between them",
    signs=(
        (r"^# Topology file: generated on", 10),
        (r"^(?:Switch|Ca|Rt)\s+\d+ \"[SHR]-[0-9a-fA-F]+\"", 8),
        (r"^\[\d+\](?:\[ext \d+\])?(?:\([0-9a-fA-F]+\))?\s+\"[SHR]-[0-9a-fA-F]+\"\[\d+\]", 6),
        (r"^vendid=0x", 4),
        (r"^sysimgguid=0x", 4),
        # `ibnetdiscover -p`: one port a line, with its far end or its own name
        (r"^(?:CA|SW|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]{16} (?:\d+x|\?\?) \S+\s+(?:- (?:CA|SW|RT)\s|')", 8),
    ),
    parse=parse_ibnetdiscover,
    judge=read_ibnetdiscover,
    render=_ibnetdiscover_view,
)


def _devinfo_view(parsed: Devinfo, source: str) -> View:
    rows = [
        [d.name, p.number, cell(p.state), cell(p.phys_state), cell(p.link_layer), cell(p.width and f"{p.width}X"),
         cell(p.speed), cell(p.rate_gbps), cell(p.lid)]
        for d in parsed.devices for p in d.ports
    ]  # fmt: skip
    columns = ("HCA", "PORT", "STATE", "PHYSICAL", "LINK LAYER", "WIDTH", "SPEED", "GBPS", "LID")
    return View((Table(columns, rows, source),), tuple(f"{d}: {line}" for d, line in parsed.diagnostics))


IBV_DEVINFO = Format(
    name="ibv_devinfo",
    summary="`ibv_devinfo [-v]`: each RDMA device libibverbs sees and its ports' state, width and speed",
    signs=(
        (r"^hca_id:\s*\S+\s*$", 10),
        (r"^\s+phys_port_cnt:\s+\d+", 4),
        (r"^\s+state:\s+PORT_(?:ACTIVE|DOWN|INIT|ARMED)\b", 6),
        (r"^\s+(?:active_width|active_speed|phys_state|link_layer):\s", 3),
        (r"^\d+ HCAs? found:\s*$", 8),
        (r"^(?:No IB devices found|IB device '[^']*' wasn't found)", 8),
    ),
    parse=parse_ibv_devinfo,
    judge=read_ibv_devinfo,
    render=_devinfo_view,
)


def _mlxlink_view(parsed: Mlxlink, source: str) -> View:
    rows = [[section, key, value] for section, values in parsed.sections.items() for key, value in values.items()]
    return View((Table(("SECTION", "FIELD", "VALUE"), rows, source),), tuple(parsed.diagnostics))


MLXLINK = Format(
    name="mlxlink",
    summary="`mlxlink -d <dev> [-m] [-c] [-e]`: a port's link state, speed, FEC, errors and BER, as its firmware sees",
    signs=(
        (r"^Operational Info\s*$", 6),
        (r"^Troubleshooting Info\s*$", 6),
        (r"^Physical Counters and BER Info\s*$", 8),
        (r"^Physical state\s+: ", 3),
        (r"^Recommendation\s+: ", 5),
        (r"^(?:Effective|Raw) Physical (?:Errors|BER)", 6),
        (r"\"Operational Info\"\s*:", 10),
    ),
    parse=parse_mlxlink,
    judge=read_mlxlink,
    render=_mlxlink_view,
)


def _ibdiagnet_view(parsed: Ibdiagnet, source: str) -> View:
    rows = [[s.stage, s.warnings, s.errors, s.comment] for s in parsed.summary]
    tables = [Table(("STAGE", "WARNINGS", "ERRORS", "COMMENT"), rows, source)]
    entries = [[m.stage, m.level, m.text] for m in parsed.messages if m.level in "EW"]
    if entries:
        tables.append(Table(("STAGE", "LEVEL", "ENTRY"), entries, "errors and warnings"))
    return View(tuple(tables), tuple(f"db_csv {name}: {len(rows)} rows" for name, rows in parsed.tables.items()))


IBDIAGNET = Format(
    name="ibdiagnet",
    summary="`ibdiagnet`: its stages' errors and warnings (console, ibdiagnet2.log) and db_csv PM_INFO/PORTS sections",
    signs=(
        (r"^-I-\s+Stage\s+Warnings\s+Errors", 10),
        (r"^-[IEW]-\s.*\bfinished (?:successfully|with (?:errors|warnings))", 6),
        (r"^-I- You can find detailed errors/warnings in:", 8),
        (r"^Loading IBDIAGNET from:", 8),
        (r"^-I- (?:Discovering|Fabric Discover|Duplicated GUIDs detection)", 4),
        (r"^START_(?:PM_INFO|NODES|PORTS|LINKS|SWITCHES)\s*$", 8),
        (r"^NodeGUID,PortGUID,PortNumber,", 4),
    ),
    parse=parse_ibdiagnet,
    judge=read_ibdiagnet,
    render=_ibdiagnet_view,
)
