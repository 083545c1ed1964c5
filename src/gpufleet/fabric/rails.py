"""A host's rails as the discovered fabric shows them, and a job's rails as NCCL will use them.

A rail is one cabled HCA port of a host and the leaf switch at the other end of its cable (on a dual-port HCA
each port is a rail: NCCL opens one net device per active port). Each leaf's uplinks are its cables to switches
that are not leaves. Placement, `nccl predict`/`compare` and hang attribution all read the fabric through this
one view, so they agree on which leaf a node hangs off and which uplinks its traffic crosses.

For NCCL, a job's rails per node are the fewest any of its hosts has up, and their speed the slowest of those
links: a ring runs at the pace of its slowest hop. NCCL's tuning model charges no per-switch latency, so the
number of switches between the job's hosts is reported, not modelled.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind, parse_end


@dataclass(frozen=True, slots=True)
class Rail:
    host: str
    end: End  # the HCA port
    rail: int  # the rail the fabric names (the HCA's or its leaf's), else the port's place among the host's
    leaf: str  # the switch at the other end of the cable
    link: Link

    @property
    def up(self) -> bool:
        return self.link.up

    @property
    def rate_gbps(self) -> float | None:
        return self.link.rate_gbps

    @property
    def port(self) -> str:
        """The HCA port without the host: "mlx5_0/1"."""
        return str(self.end).removeprefix(f"{self.host}/")


def natural(text: str) -> tuple[Any, ...]:
    """mlx5_2 before mlx5_10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def host_of(node: Node) -> str:
    if node.host:
        return node.host
    return node.name.split("/", 1)[0] if "/" in node.name else ""


def rate_text(link: Link) -> str:
    rate = link.rate_gbps
    shape = f"{link.width}x{link.speed}" if link.width and link.speed else "width/speed unknown"
    return f"{rate:g} Gb/s ({shape})" if rate is not None else shape


class FabricIndex:
    """One pass over the links: each node's links, each host's rails and HCAs, the leaves and their uplinks."""

    def __init__(self, graph: FabricGraph) -> None:
        self.graph = graph
        self.by_node: dict[str, list[Link]] = {}
        for link in graph.links:
            self.by_node.setdefault(link.a.node, []).append(link)
            if link.b.node != link.a.node:
                self.by_node.setdefault(link.b.node, []).append(link)
        self.hcas: dict[str, list[Node]] = {}  # host -> its HCAs
        for node in graph.nodes.values():
            if node.kind is NodeKind.hca and host_of(node):
                self.hcas.setdefault(host_of(node), []).append(node)
        self.leaves: set[str] = {n.name for n in graph.switches() if n.tier == "leaf"}
        self.rails: dict[str, list[Rail]] = {}
        for host, hcas in self.hcas.items():
            found: list[tuple[End, str, Link]] = []
            for hca in hcas:
                for link in self.by_node.get(hca.name, ()):
                    for end in link.ends():
                        far = link.other(end)
                        if end.node == hca.name and self.is_switch(far.node):
                            found.append((end, far.node, link))
                            self.leaves.add(far.node)
            found.sort(key=lambda item: (natural(item[0].node), item[0].port))
            self.rails[host] = [
                Rail(host, end, self._rail_number(end, leaf, i), leaf, link)
                for i, (end, leaf, link) in enumerate(found)
            ]

    def is_switch(self, name: str) -> bool:
        node = self.graph.nodes.get(name)
        return node is not None and node.kind is NodeKind.switch

    def _rail_number(self, end: End, leaf: str, order: int) -> int:
        for name in (end.node, leaf):
            node = self.graph.nodes.get(name)
            if node is not None and node.rail is not None:
                return node.rail
        return order

    def uplinks(self, leaf: str) -> list[Link]:
        """The leaf's cables to switches that are not leaves (spines, or a core)."""
        out = []
        for link in self.by_node.get(leaf, ()):
            far = link.b if link.a.node == leaf else link.a
            if far.node != leaf and self.is_switch(far.node) and far.node not in self.leaves:
                out.append(link)
        return out

    def hosts(self) -> list[str]:
        return sorted(self.hcas, key=natural)

    def resolve(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """The fabric's host names for `names` (exact, else the same short name: dgx-001 for
        dgx-001.cluster.local), and the names it does not know."""
        known = set(self.hcas)
        short: dict[str, str] = {}
        for known_host in known:
            short.setdefault(known_host.split(".", 1)[0], known_host)
        found: list[str] = []
        missing: list[str] = []
        for name in names:
            host = name if name in known else short.get(name.split(".", 1)[0])
            if host is None:
                missing.append(name)
            elif host not in found:
                found.append(host)
        return found, missing

    def switch_distances(self, start: str) -> tuple[dict[str, int], dict[str, str]]:
        """Switch hops from `start` over links that are up, and each switch's parent on a shortest path."""
        dist, parent = {start: 0}, {}
        queue = deque([start])
        while queue:
            name = queue.popleft()
            for link in self.by_node.get(name, ()):
                far = link.b.node if link.a.node == name else link.a.node
                if link.up and far not in dist and self.is_switch(far):
                    dist[far] = dist[name] + 1
                    parent[far] = name
                    queue.append(far)
        return dist, parent


@dataclass
class JobFabric:
    """The rails and link speed a job's hosts give NCCL, and what the model should be told about them."""

    hosts: list[str]
    rails: dict[str, list[Rail]]  # per host: its cabled HCA ports
    nics_per_node: int  # rails up on the host with the fewest
    nic_gbps: float | None  # the slowest rail that is up; None when the fabric does not say
    hops: int | None  # switches between the job's two farthest hosts (1: one leaf, 3: leaf-spine-leaf)
    path: list[str] = field(default_factory=list)  # the switches on that path
    notes: list[str] = field(default_factory=list)  # rails that differ, are down or slow; what was assumed
    source: str = ""

    def flags(self) -> dict[str, object]:
        """Topology fields for the NCCL model."""
        out: dict[str, object] = {"nics_per_node": self.nics_per_node, "transport": "ib"}
        if self.nic_gbps is not None:
            out["nic_gbps"] = self.nic_gbps
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "hosts": self.hosts,
            "nics_per_node": self.nics_per_node,
            "nic_gbps": self.nic_gbps,
            "switch_hops": self.hops,
            "path": self.path,
            "rails": {
                host: [
                    {"port": r.port, "rail": r.rail, "leaf": r.leaf, "up": r.up, "rate_gbps": r.rate_gbps}
                    for r in rails
                ]
                for host, rails in self.rails.items()
            },
            "notes": self.notes,
        }


def _listed(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def job_fabric(graph: FabricGraph, hosts: Sequence[str] | None = None, *, source: str = "the fabric") -> JobFabric:
    """The rails of the job's `hosts` (all the fabric's hosts when None) and what NCCL gets from them. A host the
    fabric does not know, or one with no rail up, is a UserError saying how to fix it."""
    index = FabricIndex(graph)
    known = index.hosts()
    if not known:
        raise UserError(
            f"{source} shows no HCA named after its host",
            fix='HCAs are named by their node description ("dgx-017 mlx5_3", as rdma-ndd sets it); pass the '
            "output of `ibnetdiscover` run on the cluster",
        )
    notes: list[str] = []
    if hosts:
        chosen, missing = index.resolve(hosts)
        if missing:
            raise UserError(
                f"{_listed(missing)} not in {source}",
                fix=f"name the job's hosts as the fabric's HCAs do (it has {_listed(known)})",
            )
    else:
        chosen = known
    rails = {host: index.rails.get(host, []) for host in chosen}
    up = {host: [r for r in rs if r.up] for host, rs in rails.items()}
    dead = [host for host in chosen if not up[host]]
    if dead:
        raise UserError(
            f"{_listed(dead)} {'has' if len(dead) == 1 else 'have'} no HCA port with a link up in {source}",
            fix="check the host's cables (`ibstat`), or leave it out of the job's hosts",
        )
    notes += _down_rails(index, chosen, rails)
    counts = {host: len(rs) for host, rs in up.items()}
    nics = min(counts.values())
    if len(set(counts.values())) > 1:
        by_count: dict[int, list[str]] = {}
        for host, n in counts.items():
            by_count.setdefault(n, []).append(host)
        parts = [f"{_listed(hs)} {'has' if len(hs) == 1 else 'have'} {n}" for n, hs in sorted(by_count.items())]
        notes.append(
            f"rails up per host differ ({'; '.join(parts)}): a ring runs at the pace of the host with the fewest, "
            f"so the model uses {nics} per node"
        )
    rates = [(r.rate_gbps, r) for rs in up.values() for r in rs if r.rate_gbps is not None]
    gbps = min((rate for rate, _ in rates), default=None)
    if gbps is None:
        notes.append(f"{source} does not say the links' width and speed: give --nic-gbps")
    elif len({rate for rate, _ in rates}) > 1:
        usual = Counter(rate for rate, _ in rates).most_common(1)[0][0]
        slow = [f"{r.end} <-> {r.link.other(r.end)} at {rate_text(r.link)}" for rate, r in rates if rate < usual]
        notes.append(
            f"rail speeds differ: {_listed(slow, 4)}, the others at {usual:g} Gb/s; a degraded rail slows the ring "
            f"to its slowest link, so the model uses {gbps:g} Gb/s"
        )
    hops, path = _farthest(index, up, notes)
    return JobFabric(chosen, rails, nics, gbps, hops, path, notes, source)


def _down_rails(index: FabricIndex, hosts: Sequence[str], rails: Mapping[str, list[Rail]]) -> list[str]:
    """Rails that are cabled but down, and HCA ports without a link that other hosts of the fabric use."""
    notes = []
    used: set[tuple[str, int]] = set()  # (device, port) pairs with a link on some host
    for rs in index.rails.values():
        for r in rs:
            used.add((r.end.node.split("/", 1)[-1], r.end.port))
    for host in hosts:
        for r in rails[host]:
            if not r.up:
                notes.append(f"rail {r.end} <-> {r.leaf} is down: NCCL leaves it out on {host}")
        linked = {(r.end.node, r.end.port) for r in rails[host]}
        for hca in sorted(index.hcas.get(host, []), key=lambda n: natural(n.name)):
            device = hca.name.split("/", 1)[-1]
            for port in range(1, hca.ports + 1):
                if (hca.name, port) not in linked and (device, port) in used:
                    notes.append(
                        f"{hca.name}/{port} has no link (down, or not cabled) while other hosts use {device} "
                        f"port {port}: {host} has a rail less"
                    )
    return notes


def _farthest(index: FabricIndex, up: Mapping[str, list[Rail]], notes: list[str]) -> tuple[int | None, list[str]]:
    """The most switches a message between two of the job's hosts crosses on one rail, and that path."""
    by_rail: dict[int, set[str]] = {}
    for rs in up.values():
        for r in rs:
            by_rail.setdefault(r.rail, set()).add(r.leaf)
    best: tuple[int, list[str]] | None = None
    unreachable: list[str] = []
    for leaves in by_rail.values():
        ordered = sorted(leaves, key=natural)
        for i, a in enumerate(ordered):
            dist, parent = index.switch_distances(a)
            for b in ordered[i + 1 :]:
                if b not in dist:
                    unreachable.append(f"{a} and {b}")
                    continue
                if best is None or dist[b] + 1 > best[0]:
                    path = [b]
                    while path[-1] != a:
                        path.append(parent[path[-1]])
                    best = (dist[b] + 1, path[::-1])
        if best is None and ordered:
            best = (1, [ordered[0]])
    if unreachable:
        notes.append(f"no path up between {_listed(unreachable, 3)}: the job cannot run across them")
    if best is None:
        return None, []
    return best


# --- the control plane's view, as `GET /api/v1/fabric/systems` and `/links` answer ------------------------------


def graph_from_rows(systems: Iterable[Mapping[str, Any]], links: Iterable[Mapping[str, Any]]) -> FabricGraph:
    """The fabric the control plane shows, back into a graph (its expected cables that are down, down)."""
    graph = FabricGraph(source="control plane")
    kinds = {k.value: k for k in NodeKind}
    for row in systems:
        name = str(row.get("name") or "")
        if not name or name in graph.nodes:
            continue
        graph.add_node(
            Node(
                name,
                kinds.get(str(row.get("type")), NodeKind.hca),
                str(row.get("guid") or ""),
                int(row.get("ports") or 0),
                description=str(row.get("description") or ""),
                tier=str(row.get("tier") or ""),
                host=str(row.get("host") or ""),
            )
        )
    for row in links:
        a, b = parse_end(str(row.get("a") or "")), parse_end(str(row.get("b") or ""))
        if a is None or b is None:
            continue
        width = str(row.get("width") or "").lower().removesuffix("x")
        graph.add_link(
            Link(a, b, int(width) if width.isdigit() else None, row.get("speed") or None, bool(row.get("up", True)))
        )
    return graph
