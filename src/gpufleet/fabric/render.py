"""A fabric graph printed as `ibnetdiscover` prints a subnet (infiniband-diags ibnetdiscover.c: out_switch,
out_ca, out_switch_port, out_ca_port), so every reader of the real tool's output reads it: the benchmark's
fabrics and the digital twin's discovery.

Like the tool, only cables that are up are listed, each from both ends. GUIDs and LIDs the graph has are kept;
the ones it lacks are made up deterministically (GUIDs from the node's name, LIDs counted up from 1, switches
first), so the same graph always prints the same text.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind

VENDOR_ID = 0x2C9  # Mellanox/NVIDIA
_PREFIX = {NodeKind.switch: "S", NodeKind.hca: "H", NodeKind.router: "R"}
_TYPE = {NodeKind.switch: "Switch", NodeKind.hca: "Ca", NodeKind.router: "Rt"}
_MASK = (1 << 64) - 1


def _guid_value(text: str) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _made_up_guid(name: str) -> int:
    # NVIDIA's OUI in the top bytes, as real GUIDs have; the rest from the name
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return 0x0002_C903 << 32 | digest


@dataclass
class Addresses:
    """The GUIDs and LIDs a printed fabric shows: the graph's own, and made-up ones where it has none."""

    node_guid: dict[str, int] = field(default_factory=dict)
    port_guid: dict[End, int] = field(default_factory=dict)  # HCA and router ports
    switch_lid: dict[str, int] = field(default_factory=dict)
    port_lid: dict[End, int] = field(default_factory=dict)  # HCA and router ports

    @classmethod
    def of(cls, graph: FabricGraph, ports: dict[str, list[tuple[int, End, Link]]]) -> Addresses:
        out = cls()
        taken: set[int] = set()
        for node in graph.nodes.values():
            value = _guid_value(node.guid)
            if value is not None:
                out.node_guid[node.name] = value
                taken.add(value)
        for node in graph.nodes.values():
            if node.name not in out.node_guid:
                value = _made_up_guid(node.name)
                while value in taken:
                    value = (value + 1) & _MASK
                out.node_guid[node.name] = value
                taken.add(value)
        used_lids: set[int] = set()
        for node in graph.nodes.values():
            if node.kind is NodeKind.switch and node.lid is not None:
                out.switch_lid[node.name] = node.lid
                used_lids.add(node.lid)
        port_taken: set[int] = set()
        for name, listed in ports.items():
            if graph.nodes[name].kind is NodeKind.switch:
                continue
            for number, _far, link in listed:
                end = End(name, number)
                guid = _guid_value(link.a_guid if link.a == end else link.b_guid)
                lid = link.a_lid if link.a == end else link.b_lid
                if guid is not None:
                    out.port_guid[end] = guid
                    port_taken.add(guid)
                if lid is not None:
                    out.port_lid[end] = lid
                    used_lids.add(lid)
        next_lid = 1

        def new_lid() -> int:
            nonlocal next_lid
            while next_lid in used_lids:
                next_lid += 1
            used_lids.add(next_lid)
            return next_lid

        for node in graph.nodes.values():
            if node.kind is NodeKind.switch and node.name not in out.switch_lid:
                out.switch_lid[node.name] = new_lid()
        for name, listed in ports.items():
            if graph.nodes[name].kind is NodeKind.switch:
                continue
            for number, _far, _link in listed:
                end = End(name, number)
                if end not in out.port_guid:  # a port GUID is its node's plus the port number, as ibsim makes them
                    value = (out.node_guid[name] + number) & _MASK
                    while value in port_taken:
                        value = _made_up_guid(f"{value}") & _MASK
                    out.port_guid[end] = value
                    port_taken.add(value)
                if end not in out.port_lid:
                    out.port_lid[end] = new_lid()
        return out

    def lid(self, graph: FabricGraph, end: End) -> int:
        if graph.nodes[end.node].kind is NodeKind.switch:
            return self.switch_lid[end.node]
        return self.port_lid[end]


def _width(width: int | None) -> str:
    return f"{width}x" if width else "??"


def _speed(speed: str | None) -> str:
    return speed or "???"


def _description(node: Node) -> str:
    if node.description:
        return node.description
    if node.kind is not NodeKind.switch and "/" in node.name:
        host, device = node.name.rsplit("/", 1)
        return f"{host} {device}"  # rdma-ndd's "%h %d"
    return node.name


def to_ibnetdiscover(graph: FabricGraph, *, generated: str | None = None) -> str:
    """The graph as `ibnetdiscover` prints it: switches, then HCAs, then routers, each with its cabled ports.
    `generated` is the header's time stamp (default: now)."""
    ports: dict[str, list[tuple[int, End, Link]]] = {name: [] for name in graph.nodes}
    for link in graph.links:
        if not link.up or link.a.node not in ports or link.b.node not in ports:
            continue  # a cable that is down is not discovered
        ports[link.a.node].append((link.a.port, link.b, link))
        ports[link.b.node].append((link.b.port, link.a, link))
    for listed in ports.values():
        listed.sort(key=lambda item: item[0])
    ids = Addresses.of(graph, ports)
    descriptions = {node.name: _description(node) for node in graph.nodes.values()}

    def node_id(name: str) -> str:
        return f'"{_PREFIX[graph.nodes[name].kind]}-{ids.node_guid[name]:016x}"'

    ordered = sorted(graph.nodes.values(), key=lambda n: (n.kind is not NodeKind.switch, n.kind is NodeKind.router))
    start = next((n for n in ordered if n.kind is NodeKind.hca and ports[n.name]), ordered[0] if ordered else None)
    stamp = generated or time.strftime("%a %b %d %H:%M:%S %Y")
    out = ["#", f"# Topology file: generated on {stamp}", "#"]
    if start is not None:
        start_guid = ids.node_guid[start.name]
        start_port = ids.port_guid.get(End(start.name, ports[start.name][0][0]), start_guid) if ports[start.name] else 0
        out.append(f"# Initiated from node {start_guid:016x} port {start_port or start_guid:016x}")
    for node in ordered:
        guid = ids.node_guid[node.name]
        listed = ports[node.name]
        count = max([node.ports, *(number for number, _, _ in listed)])
        out += ["", f"vendid=0x{VENDOR_ID:x}", "devid=0x0", f"sysimgguid=0x{guid:x}"]
        if node.kind is NodeKind.switch:
            out.append(f"switchguid=0x{guid:x}({guid:x})")
            lid = ids.switch_lid[node.name]
            out.append(
                f'Switch\t{count} {node_id(node.name)}\t\t# "{descriptions[node.name]}" base port 0 lid {lid} lmc 0'
            )
            for number, far, link in listed:
                far_guid = "" if graph.nodes[far.node].kind is NodeKind.switch else f"({ids.port_guid[far]:x}) "
                out.append(
                    f"[{number}]\t{node_id(far.node)}[{far.port}]{far_guid}\t\t"
                    f'# "{descriptions[far.node]}" lid {ids.lid(graph, far)} {_width(link.width)}{_speed(link.speed)}'
                )
            continue
        out.append(f"caguid=0x{guid:x}")
        out.append(f'{_TYPE[node.kind]}\t{count} {node_id(node.name)}\t\t# "{descriptions[node.name]}"')
        for number, far, link in listed:
            here = End(node.name, number)
            far_guid = "" if graph.nodes[far.node].kind is NodeKind.switch else f" ({ids.port_guid[far]:x}) "
            out.append(
                f"[{number}]({ids.port_guid[here]:x}) \t{node_id(far.node)}[{far.port}]{far_guid}\t\t"
                f'# lid {ids.port_lid[here]} lmc 0 "{descriptions[far.node]}" lid {ids.lid(graph, far)} '
                f"{_width(link.width)}{_speed(link.speed)}"
            )
    return "\n".join(out) + "\n"
