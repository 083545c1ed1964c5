"""A fabric as a graph of named nodes and the cables between their ports: what discovery found, or what the
cluster manifest says should be there. Validation compares two of them; the fabric service keeps the latest.

Names are what people and the tools call things: a switch by its node description ("leaf-su1-r3"), an HCA as
"host/device" ("dgx-017/mlx5_3", from the "dgx-017 mlx5_3" description rdma-ndd sets). Ends read
"leaf-su1-r3/17" and "dgx-017/mlx5_3/1". GUIDs and LIDs are kept where discovery saw them, for the checks that
need them (duplicates) and for the tools that address ports by LID.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.health.ib_ports import link_rate_gbps


class NodeKind(StrEnum):
    switch = "switch"
    hca = "hca"
    router = "router"


@dataclass(frozen=True, slots=True, order=True)
class End:
    """One port: the node's name and the port number."""

    node: str
    port: int

    def __str__(self) -> str:
        return f"{self.node}/{self.port}"


@dataclass(slots=True)
class Node:
    name: str
    kind: NodeKind
    guid: str = ""  # node GUID, 0x and 16 hex digits
    ports: int = 0  # the node's port count (a switch's radix), when known
    lid: int | None = None  # a switch's LID (its management port 0); an HCA's LIDs are per port, on its links
    description: str = ""  # the node description as the subnet shows it
    tier: str = ""  # leaf, spine, core (intended fabrics; guessed for discovered ones)
    rail: int | None = None
    group: int | None = None  # scalable unit of a leaf, plane of a spine or core
    host: str = ""  # an HCA's host

    @property
    def is_switch(self) -> bool:
        return self.kind is NodeKind.switch


@dataclass(slots=True)
class Link:
    """A cable, from end `a` to end `b` (discovery keeps the order it met them in; nothing depends on it)."""

    a: End
    b: End
    width: int | None = None  # lanes: 1, 2, 4, 8, 12
    speed: str | None = None  # generation: SDR ... NDR, XDR
    up: bool = True
    a_lid: int | None = None
    b_lid: int | None = None
    a_guid: str = ""  # port GUIDs
    b_guid: str = ""
    line: int = 0  # where discovery printed it

    @property
    def key(self) -> tuple[End, End]:
        return (self.a, self.b) if self.a <= self.b else (self.b, self.a)

    @property
    def rate_gbps(self) -> float | None:
        return link_rate_gbps(self.width, self.speed)

    def other(self, end: End) -> End:
        return self.b if end == self.a else self.a

    def ends(self) -> tuple[End, End]:
        return self.a, self.b

    def __str__(self) -> str:
        return f"{self.a} <-> {self.b}"


@dataclass(slots=True)
class FabricGraph:
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    source: str = ""  # ibnetdiscover, iblinkinfo, manifest, twin, live
    # what discovery could not reconcile: a cable listed differently from its two ends, a node seen twice
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # tool diagnostics, unreadable lines
    idle_ports: dict[End, str] = field(default_factory=dict)  # ports seen without a link: "Down/Polling"
    could_be: dict[tuple[End, End], str] = field(default_factory=dict)  # iblinkinfo's hint, per link key
    _by_end: dict[End, Link] | None = field(default=None, repr=False)

    # --- building -------------------------------------------------------------------------------------------

    def add_node(self, node: Node) -> Node:
        self.nodes[node.name] = node
        return node

    def add_link(self, link: Link) -> Link:
        self.links.append(link)
        if self._by_end is not None:  # kept current: learning L links one by one stays O(L)
            self._by_end[link.a] = link
            self._by_end[link.b] = link
        return link

    # --- reading --------------------------------------------------------------------------------------------

    def link_at(self, end: End) -> Link | None:
        if self._by_end is None:
            self._by_end = {}
            for link in self.links:
                self._by_end[link.a] = link
                self._by_end[link.b] = link
        return self._by_end.get(end)

    def peer(self, end: End) -> End | None:
        link = self.link_at(end)
        return None if link is None else link.other(end)

    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind is NodeKind.switch]

    def hcas(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind is not NodeKind.switch]

    def links_of(self, node: str) -> Iterator[Link]:
        for link in self.links:
            if link.a.node == node or link.b.node == node:
                yield link

    def neighbours(self, node: str) -> set[str]:
        return {link.other(end).node for link in self.links_of(node) for end in link.ends() if end.node == node}

    def kind_of(self, end: End) -> NodeKind | None:
        node = self.nodes.get(end.node)
        return None if node is None else node.kind

    def restricted_to(self, names: set[str]) -> FabricGraph:
        """The part of this fabric among `names`: those nodes (in this fabric's order) and the links between them."""
        part = FabricGraph(source=self.source)
        for name, node in self.nodes.items():
            if name in names:
                part.add_node(node)
        for link in self.links:
            if link.a.node in names and link.b.node in names:
                part.add_link(link)
        return part

    def assign_tiers(self) -> None:
        """Leaf, spine and core for a discovered fabric, where nothing named them: a switch with an HCA below it is
        a leaf; above the leaves, each further hop is a higher tier (spine, then core)."""
        switches = {n.name for n in self.switches()}
        adjacency: dict[str, set[str]] = {name: set() for name in switches}
        leaves: set[str] = set()
        for link in self.links:
            a, b = link.a.node, link.b.node
            if a in switches and b in switches:
                adjacency[a].add(b)
                adjacency[b].add(a)
            elif a in switches:
                leaves.add(a)
            elif b in switches:
                leaves.add(b)
        depth = {name: 0 for name in leaves}
        frontier = sorted(leaves)
        while frontier:
            nxt: list[str] = []
            for name in frontier:
                for other in adjacency[name]:
                    if other not in depth:
                        depth[other] = depth[name] + 1
                        nxt.append(other)
            frontier = nxt
        names = ("leaf", "spine", "core")
        for name in switches:
            node = self.nodes[name]
            if not node.tier and name in depth:
                node.tier = names[min(depth[name], 2)]


# --- names ----------------------------------------------------------------------------------------------------
_DEVICE = re.compile(r"^(?:mlx\d+_\d+|mlx4_\d+|hfi\d+_\d+|qib\d+|irdma\d+|bnxt_re\d+|rocep\S+|ibp\S+|HCA-\d+)$")


def hca_name(description: str) -> tuple[str, str] | None:
    """(host, device) from an HCA's node description, as rdma-ndd sets it ("%h %d": "dgx-017 mlx5_3")."""
    parts = description.split()
    if len(parts) == 2 and _DEVICE.match(parts[1]):
        return parts[0], parts[1]
    return None


def node_name(description: str, guid: str, kind: NodeKind, taken: Collection[str] = frozenset()) -> str:
    """The name a discovered node goes by: "host/device" for an HCA whose description says so, the description
    for a switch, or the GUID when the description is empty, a vendor default shared by many, or taken."""
    if kind is not NodeKind.switch:
        split = hca_name(description)
        if split is not None:
            name = f"{split[0]}/{split[1]}"
            return name if name not in taken else guid
    text = description.strip()
    if not text or text in taken:
        return guid
    return text


def parse_end(text: str) -> End | None:
    """ "leaf1/35" or "dgx-001/mlx5_0/1" -> End; None when it is not one."""
    node, sep, port = text.strip().rpartition("/")
    if not sep or not node or not port.isdigit() or int(port) > 255:
        return None
    return End(node, int(port))
