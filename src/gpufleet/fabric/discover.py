"""The discovered fabric, from what `ibnetdiscover` and `iblinkinfo` print.

ibnetdiscover lists every cable twice, once from each end; the two listings must agree (A port 3 sees B port 7 and
B port 7 sees A port 3). When they do not, two nodes share a GUID or the output was edited, and the graph says so
in `conflicts` instead of picking one. iblinkinfo adds what ibnetdiscover leaves out: ports with no link
(`Down/Polling`), and iblinkinfo's "Could be" hint for links below what both ends support.
"""

from __future__ import annotations

from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind, hca_name, node_name
from gpufleet.health.ib_ports import lane_count, speed_generation
from gpufleet.model.fabric import normalise_guid
from gpufleet.parsers.infiniband.diags import FabricTopology, LinkInfo

_KINDS = {"Switch": NodeKind.switch, "Ca": NodeKind.hca, "CA": NodeKind.hca, "Rt": NodeKind.router}


def from_ibnetdiscover(topo: FabricTopology, *, source: str = "ibnetdiscover") -> FabricGraph:
    graph = FabricGraph(source=source)
    names: dict[str, str] = {}  # ibnetdiscover's node id -> our name
    taken: set[str] = set()
    by_guid: dict[str, str] = {}
    for node_id, found in topo.nodes.items():
        kind = _KINDS.get(found.type, NodeKind.hca)
        guid = normalise_guid(node_id.split(":", 1)[0] if ":" not in node_id else "")
        if guid and guid in by_guid:
            graph.conflicts.append(f"GUID {guid} is listed twice: {by_guid[guid]!r} and {found.description!r}")
        name = node_name(found.description, guid or node_id, kind, taken)
        taken.add(name)
        names[node_id] = name
        if guid:
            by_guid[guid] = found.description
        split = hca_name(found.description) if kind is not NodeKind.switch else None
        graph.add_node(
            Node(
                name=name,
                kind=kind,
                guid=guid,
                ports=found.ports,
                lid=found.lid if kind is NodeKind.switch else None,
                description=found.description,
                host=split[0] if split else "",
            )
        )
    seen: dict[tuple[End, End], Link] = {}
    claimed: dict[End, End] = {}  # each port's far end, as the listing of that port says
    for found_link in topo.links:
        here = names.get(found_link.node)
        there = names.get(found_link.remote)
        if here is None:
            continue
        if there is None:  # a far end that has no record of its own: name it from the comment
            kind = NodeKind.switch if found_link.remote.startswith("S-") else NodeKind.hca
            guid = normalise_guid(found_link.remote)
            there = node_name(found_link.remote_description, guid or found_link.remote, kind, taken)
            if there not in graph.nodes:
                graph.add_node(Node(there, kind, guid, description=found_link.remote_description))
                taken.add(there)
            names[found_link.remote] = there
        a, b = End(here, found_link.port), End(there, found_link.remote_port)
        earlier = claimed.get(a)
        if earlier is not None and earlier != b:
            graph.conflicts.append(f"{a} is listed as cabled to both {earlier} and {b}")
            continue
        claimed[a] = b
        back = claimed.get(b)
        if back is not None and back != a:
            graph.conflicts.append(f"{a} sees {b}, but {b} sees {back}: duplicate GUIDs or an edited output")
            continue
        key = (a, b) if a <= b else (b, a)
        link = seen.get(key)
        if link is None:
            link = graph.add_link(
                Link(
                    a,
                    b,
                    width=lane_count(found_link.width),
                    speed=speed_generation(found_link.speed),
                    a_lid=found_link.lid,
                    b_lid=found_link.remote_lid,
                    a_guid=normalise_guid(found_link.port_guid),
                    b_guid=normalise_guid(found_link.remote_port_guid),
                    line=found_link.line,
                )
            )
            seen[key] = link
            continue
        # the same cable from its other end: fill in what the first listing did not print
        if link.a == b:
            link.b_lid = link.b_lid if link.b_lid is not None else found_link.lid
            link.a_lid = link.a_lid if link.a_lid is not None else found_link.remote_lid
            link.b_guid = link.b_guid or normalise_guid(found_link.port_guid)
        link.width = link.width or lane_count(found_link.width)
        link.speed = link.speed or speed_generation(found_link.speed)
    for node in topo.nodes.values():
        if node.type == "Switch" and node.lid is not None:
            graph.nodes[names[node.id]].lid = node.lid
    graph.notes.extend(topo.diagnostics)
    graph.notes.extend(f"line {n}: not read: {text.strip()[:80]}" for n, text in topo.unreadable)
    graph.assign_tiers()
    return graph


def from_iblinkinfo(links: list[LinkInfo], *, source: str = "iblinkinfo") -> FabricGraph:
    """The fabric iblinkinfo shows: its links, and its ports without one in `idle_ports`."""
    graph = FabricGraph(source=source)
    taken: set[str] = set()

    def ensure(description: str, kind: NodeKind, guid: str) -> str:
        split = hca_name(description) if kind is not NodeKind.switch else None
        name = f"{split[0]}/{split[1]}" if split else description.strip() or guid
        if name not in graph.nodes:
            graph.add_node(Node(name, kind, guid, description=description, host=split[0] if split else ""))
            taken.add(name)
        return name

    seen: dict[tuple[End, End], Link] = {}
    for info in links:
        kind = _KINDS.get(info.node_type, NodeKind.hca)
        here = ensure(info.node, kind, normalise_guid(info.guid) if kind is NodeKind.switch else "")
        node = graph.nodes[here]
        node.ports = max(node.ports, info.port)
        if kind is NodeKind.switch:
            node.lid = info.lid
        end = End(here, info.port)
        if not info.remote_name or info.remote_port is None:
            graph.idle_ports[end] = f"{info.state}/{info.phys_state}"
            continue
        far_kind = NodeKind.hca if hca_name(info.remote_name) else NodeKind.switch
        there = ensure(info.remote_name, far_kind, "")
        far = End(there, info.remote_port)
        key = (end, far) if end <= far else (far, end)
        if key in seen:
            continue
        seen[key] = graph.add_link(
            Link(
                end,
                far,
                width=lane_count(info.width),
                speed=speed_generation(info.speed),
                up=info.up,
                a_lid=info.lid if kind is not NodeKind.switch else None,
                b_lid=info.remote_lid if far_kind is not NodeKind.switch else None,
                line=info.line,
            )
        )
        if info.note.startswith("Could be"):
            graph.could_be[key] = info.note
    graph.assign_tiers()
    return graph


def add_link_states(graph: FabricGraph, links: list[LinkInfo]) -> None:
    """iblinkinfo's view on top of ibnetdiscover's: idle ports, link states and "Could be" hints."""
    other = from_iblinkinfo(links)
    graph.idle_ports.update(other.idle_ports)
    graph.could_be.update(other.could_be)
    for link in other.links:
        mine = graph.link_at(link.a)
        if mine is not None and mine.key == link.key:
            mine.up = link.up
