"""infiniband-diags text output: perfquery (plain and -x), ibqueryerrors, iblinkinfo, ibnetdiscover; and IB
link flaps in syslog.

Counter names are the PMA attribute fields perfquery prints, which are also the catalog's names
(ib_counters.csv), so records from perfquery, ibqueryerrors and sysfs (ib_sysfs) can be compared directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpufleet.catalog import load_ib_counters
from gpufleet.errors import ParseError
from gpufleet.sources.kmsg_framing import split_frame

# -- perfquery -----------------------------------------------------------------------------------------------
_PQ_HEAD = re.compile(
    r"^# Port (?P<kind>counters|extended counters)(?P<rest>.*?): Lid (?P<lid>\d+) port (?P<port>\d+)"
    r"(?: \(CapMask: (?P<cap>0x[0-9a-fA-F]+)(?: CapMask2: (?P<cap2>0x[0-9a-fA-F]+))?\))?"
)
_PQ_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*):\.*(?P<value>.*)$")
_PQ_META = ("PortSelect", "CounterSelect", "CounterSelect2")


@dataclass
class PortCounters:
    lid: int
    port: int
    extended: bool  # from `perfquery -x` (PortCountersExtended, 64-bit)
    counters: dict[str, int] = field(default_factory=dict)
    cap_mask: str | None = None
    cap_mask2: str | None = None

    def known(self) -> dict[str, int]:
        """The counters the catalog describes (widths, meanings, thresholds)."""
        catalog = load_ib_counters()
        return {k: v for k, v in self.counters.items() if k in catalog}


def parse_perfquery(text: str, *, source: str = "perfquery") -> list[PortCounters]:
    """Parse one or more `perfquery [-x] [lid] [port]` blocks."""
    blocks: list[PortCounters] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        head = _PQ_HEAD.match(line)
        if head is not None:
            blocks.append(
                PortCounters(
                    int(head.group("lid")),
                    int(head.group("port")),
                    head.group("kind") == "extended counters",
                    cap_mask=head.group("cap"),
                    cap_mask2=head.group("cap2"),
                )
            )
            continue
        if line.startswith("#"):
            continue
        match = _PQ_FIELD.match(line)
        if match is None:
            raise ParseError(
                f"{source}:{lineno}: not a perfquery counter line: {line[:60]!r}",
                fix="pass the output of `perfquery` or `perfquery -x`, unedited",
            )
        if not blocks:
            raise ParseError(
                f"{source}:{lineno}: counter before any `# Port counters` header",
                fix="pass perfquery's whole output",
            )
        name, value = match.group("name"), match.group("value").strip()
        if name in _PQ_META:
            continue
        try:
            blocks[-1].counters[name] = int(value, 0)
        except ValueError as exc:
            raise ParseError(
                f"{source}:{lineno}: {name} has a non-numeric value {value!r}",
                fix="pass the output of `perfquery` or `perfquery -x`, unedited",
            ) from exc
    if not blocks:
        raise ParseError(f"{source}: no `# Port counters` block", fix="pass the output of perfquery")
    return blocks


# -- ibqueryerrors -------------------------------------------------------------------------------------------
_QE_NODE = re.compile(r'^Errors for (?:(?P<guid>0x[0-9a-fA-F]+) )?"(?P<name>[^"]*)"')
_QE_PORT = re.compile(r"^\s*GUID (?P<guid>0x[0-9a-fA-F]+) port (?P<port>\d+|ALL):(?P<rest>.*)$")
_QE_COUNTER = re.compile(r"\[(?P<name>\w+) == (?P<value>\d+)\]")
_QE_SUMMARY_NODES = re.compile(r"^## Summary: (?P<nodes>\d+) nodes checked, (?P<bad>\d+) bad nodes found")
_QE_SUMMARY_PORTS = re.compile(r"^##\s+(?P<ports>\d+) ports checked, (?P<bad>\d+) ports have errors")


@dataclass
class PortErrors:
    node: str
    guid: str
    port: int | None  # None: the node's all-ports aggregate (`port ALL`), which switches report
    counters: dict[str, int]
    detail: str = ""  # what ibqueryerrors printed after the counters (link info with -d)


@dataclass
class QueryErrorsReport:
    ports: list[PortErrors]
    nodes_checked: int | None = None
    bad_nodes: int | None = None
    ports_checked: int | None = None
    bad_ports: int | None = None


def parse_ibqueryerrors(text: str, *, source: str = "ibqueryerrors") -> QueryErrorsReport:
    report = QueryErrorsReport(ports=[])
    node = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        head = _QE_NODE.match(line)
        if head is not None:
            node = head.group("name")
            continue
        port = _QE_PORT.match(line)
        if port is not None:
            rest = port.group("rest")
            counters = {m.group("name"): int(m.group("value")) for m in _QE_COUNTER.finditer(rest)}
            if not counters and "[" in rest:
                raise ParseError(
                    f"{source}:{lineno}: cannot read the counters in {rest.strip()[:60]!r}",
                    fix="pass the output of `ibqueryerrors`, unedited",
                )
            detail = _QE_COUNTER.sub("", rest).strip()
            number = None if port.group("port") == "ALL" else int(port.group("port"))
            report.ports.append(PortErrors(node, port.group("guid"), number, counters, detail))
            continue
        nodes = _QE_SUMMARY_NODES.match(line)
        if nodes is not None:
            report.nodes_checked, report.bad_nodes = int(nodes.group("nodes")), int(nodes.group("bad"))
            continue
        ports = _QE_SUMMARY_PORTS.match(line)
        if ports is not None:
            report.ports_checked, report.bad_ports = int(ports.group("ports")), int(ports.group("bad"))
    return report


# -- iblinkinfo ----------------------------------------------------------------------------------------------
_LI_NODE = re.compile(r"^(?P<type>Switch|CA):\s+(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<name>.*?):?\s*$")
_LI_LINK = re.compile(
    r"^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s+==\(\s*"
    r"(?:(?P<width>\d+X)\s+)?(?:(?P<speed>[\d.]+) Gbps\s+)?(?P<state>\w+)/\s*(?P<phys>\w+)\s*\)==>\s+"
    r"(?:(?P<rlid>\d+)\s+(?P<rport>\d+))?\[[^\]]*\]\s+\"(?P<rname>[^\"]*)\"\s*\((?P<note>[^)]*)\)"
)


@dataclass
class LinkInfo:
    node: str
    node_type: str  # Switch or CA
    lid: int
    port: int
    width: str | None
    speed_gbps: float | None
    state: str  # Active, Down, Init, Armed
    phys_state: str  # LinkUp, Polling, Disabled, ...
    remote_lid: int | None
    remote_port: int | None
    remote_name: str
    note: str  # e.g. "Could be 12X": the link runs below what both ends support

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.phys_state == "LinkUp"


def parse_iblinkinfo(text: str, *, source: str = "iblinkinfo") -> list[LinkInfo]:
    links: list[LinkInfo] = []
    node, node_type = "", ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        head = _LI_NODE.match(line)
        if head is not None:
            node, node_type = head.group("name").strip().strip('"'), head.group("type")
            continue
        link = _LI_LINK.match(line)
        if link is None:
            if "==(" in line:
                raise ParseError(
                    f"{source}:{lineno}: cannot read link line {line.strip()[:70]!r}",
                    fix="pass the output of `iblinkinfo`, unedited",
                )
            continue
        links.append(
            LinkInfo(
                node=node,
                node_type=node_type,
                lid=int(link.group("lid")),
                port=int(link.group("port")),
                width=link.group("width"),
                speed_gbps=float(link.group("speed")) if link.group("speed") else None,
                state=link.group("state"),
                phys_state=link.group("phys"),
                remote_lid=int(link.group("rlid")) if link.group("rlid") else None,
                remote_port=int(link.group("rport")) if link.group("rport") else None,
                remote_name=link.group("rname"),
                note=link.group("note").strip(),
            )
        )
    return links


# -- ibnetdiscover -------------------------------------------------------------------------------------------
_ND_NODE = re.compile(
    r'^(?P<type>Switch|Ca|Rt)\s+(?P<nports>\d+)\s+"(?P<id>[^"]+)"\s*(?:#\s*"(?P<desc>[^"]*)"(?P<rest>.*))?$'
)
_ND_PORT = re.compile(
    r'^\[(?P<port>\d+)\](?:\((?P<portguid>[0-9a-fA-F]+)\))?\s+"(?P<rid>[^"]+)"\[(?P<rport>\d+)\]'
    r"(?:\((?P<rportguid>[0-9a-fA-F]+)\))?\s*(?:#\s*(?P<comment>.*))?$"
)
_ND_LID = re.compile(r"\blid (?P<lid>\d+)")
_ND_SPEED = re.compile(r"\b(?P<width>\d+)x(?P<speed>[A-Z0-9]+)\s*$")
_ND_REMOTE_DESC = re.compile(r'"(?P<desc>[^"]*)"')


@dataclass
class FabricNode:
    id: str  # e.g. S-0000000000200000 or H-0000000000100000
    type: str  # Switch, Ca, Rt
    ports: int
    description: str
    lid: int | None


@dataclass
class FabricLink:
    node: str
    port: int
    remote: str
    remote_port: int
    remote_description: str
    width: str | None  # "4x"
    speed: str | None  # "HDR", "NDR"


@dataclass
class FabricTopology:
    nodes: dict[str, FabricNode] = field(default_factory=dict)
    links: list[FabricLink] = field(default_factory=list)


def parse_ibnetdiscover(text: str, *, source: str = "ibnetdiscover") -> FabricTopology:
    topo = FabricTopology()
    current: FabricNode | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" in line.split()[0]:
            continue
        node = _ND_NODE.match(line)
        if node is not None:
            lid = _ND_LID.search(node.group("rest") or "")
            current = FabricNode(
                node.group("id"),
                node.group("type"),
                int(node.group("nports")),
                node.group("desc") or "",
                int(lid.group("lid")) if lid else None,
            )
            topo.nodes[current.id] = current
            continue
        port = _ND_PORT.match(line)
        if port is None:
            raise ParseError(
                f"{source}:{lineno}: not an ibnetdiscover line: {line[:70]!r}",
                fix="pass the output of `ibnetdiscover`, unedited",
            )
        if current is None:
            raise ParseError(
                f"{source}:{lineno}: port line before any Switch/Ca line", fix="pass the whole `ibnetdiscover` output"
            )
        comment = port.group("comment") or ""
        if current.type == "Ca" and current.lid is None:
            own_lid = _ND_LID.match(comment)  # a CA's lid is on its port line: `# lid 2 lmc 0 "leaf1" ...`
            current.lid = int(own_lid.group("lid")) if own_lid else None
        remote_desc = _ND_REMOTE_DESC.search(comment)
        speed = _ND_SPEED.search(comment)
        topo.links.append(
            FabricLink(
                node=current.id,
                port=int(port.group("port")),
                remote=port.group("rid"),
                remote_port=int(port.group("rport")),
                remote_description=remote_desc.group("desc") if remote_desc else "",
                width=f"{speed.group('width')}x" if speed else None,
                speed=speed.group("speed") if speed else None,
            )
        )
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


def parse_link_events(text: str, *, year: int | None = None) -> list[LinkStateEvent]:
    """`ib6: lost carrier` / `Gained carrier` (systemd-networkd), `mlx5_core ...: Link down/up` (kernel)."""
    events: list[LinkStateEvent] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        frame = split_frame(raw, year=year)
        message = frame.message.strip()
        carrier = _CARRIER.match(message)
        if carrier is not None:
            state: Literal["down", "up"] = "down" if carrier.group("what").lower() == "lost carrier" else "up"
            events.append(LinkStateEvent(lineno, carrier.group("iface"), state, frame.wall_time, frame.host, raw))
            continue
        mlx = _MLX_LINK.search(message)
        if mlx is not None:
            state = "down" if mlx.group("what") == "down" else "up"
            events.append(LinkStateEvent(lineno, mlx.group("iface"), state, frame.wall_time, frame.host, raw))
    return events


def count_flaps(events: list[LinkStateEvent]) -> dict[str, int]:
    """Link-down events per interface: each one is a flap (the link dropped), as aznhc's flapping check
    counts."""
    counts: dict[str, int] = {}
    for event in events:
        if event.state == "down":
            counts[event.interface] = counts.get(event.interface, 0) + 1
    return counts
