"""The fabric's shape as schedulers take it: switch tiers (leaf, spine, core), the hosts under each leaf, the
switches under each higher switch, and each host's NVLink domain where something names one.

Every scheduler export (Slurm's topology.conf today) is written from this one model, built from the same fabric
graph that discovery and validation use (a discovered ibnetdiscover output, or the cabling a cluster manifest lays
out), so the schedulers see the fabric gpufleet checked.

A host is usually cabled to several leaves: one per rail in a rail-optimised fabric (8 HCAs on 8 leaves), or a
dual-port HCA on two leaves. Tree-shaped schedulers want one leaf per host, so each host has a `home` leaf: the leaf
that holds most of its rails, ties going to the leaf of its first rail (rails in the fabric's order, mlx5_0 first).
In a rail-optimised fabric every rail's plane has the same shape, so the first rail's plane stands for all of them.
`leaves` keeps every leaf a host reaches, for exports that can say more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.rails import FabricIndex, natural
from gpufleet.model.fabric import Fabric, PortState
from gpufleet.spec.cluster_spec import LANE_GBPS

TIERS = ("leaf", "spine", "core")


@dataclass(frozen=True, slots=True)
class TopologySwitch:
    name: str  # as the fabric names it (the switch's node description)
    tier: str  # leaf, spine or core
    hosts: tuple[str, ...] = ()  # a leaf: every host with a rail cabled to it, in natural order
    children: tuple[str, ...] = ()  # a spine or core: the switches one tier down that are cabled to it
    downlinks: int = 0  # cables to the tier below (a leaf's to HCA ports)
    uplinks: int = 0  # cables to the tier above

    @property
    def oversubscription(self) -> float | None:
        """Cables down per cable up (1.0: non-blocking, 2.0: 2:1); None for a switch with no uplink."""
        return self.downlinks / self.uplinks if self.uplinks else None

    @property
    def level(self) -> int:
        return TIERS.index(self.tier)


@dataclass(frozen=True, slots=True)
class TopologyHost:
    name: str
    home: str  # the one leaf a tree-shaped scheduler lists the host under (see the module's note)
    leaves: tuple[str, ...]  # every leaf its rails reach, in rail order, without repeats
    rails: int  # cabled HCA ports
    nvlink_domain: str | None = None  # NVLink domain (an NVL72 rack, a GPU fabric clique); None where none is known
    rail_gbps: float | None = None  # the slowest of its rails' cables as they run (None: no rate known)


@dataclass(slots=True)
class Topology:
    switches: dict[str, TopologySwitch] = field(default_factory=dict)
    hosts: dict[str, TopologyHost] = field(default_factory=dict)
    source: str = ""
    notes: list[str] = field(default_factory=list)  # what was left out and why

    def tier(self, tier: str) -> list[TopologySwitch]:
        return sorted((s for s in self.switches.values() if s.tier == tier), key=lambda s: natural(s.name))

    def homed(self, leaf: str) -> list[str]:
        """The hosts whose home is `leaf`, in natural order."""
        return [h for h in self.switches[leaf].hosts if self.hosts[h].home == leaf]

    def parents(self) -> dict[str, tuple[str, ...]]:
        """Each switch's switches one tier up (a leaf's spines, a spine's cores), in natural order."""
        out: dict[str, list[str]] = {}
        for switch in self.switches.values():
            for child in switch.children:
                out.setdefault(child, []).append(switch.name)
        return {name: tuple(sorted(up, key=natural)) for name, up in out.items()}

    def nvlink_domains(self) -> dict[str, list[str]]:
        """Each NVLink domain and its hosts."""
        out: dict[str, list[str]] = {}
        for host in sorted(self.hosts.values(), key=lambda h: natural(h.name)):
            if host.nvlink_domain is not None:
                out.setdefault(host.nvlink_domain, []).append(host.name)
        return out


def topology_from_graph(
    graph: FabricGraph, *, nvlink_domains: Mapping[str, str] | None = None, source: str = ""
) -> Topology:
    """The scheduler's view of `graph`. `nvlink_domains`: host -> domain, where the manifest or the nodes' facts
    name one. A fabric with no host behind a switch, or a switch that is not below any tier, is a UserError."""
    index = FabricIndex(graph)
    topology = Topology(source=source or graph.source)
    hosts_of: dict[str, list[str]] = {}
    for host in index.hosts():
        rails = index.rails[host]
        if not rails:
            continue
        leaves = tuple(dict.fromkeys(r.leaf for r in rails))
        counts = Counter(r.leaf for r in rails)
        home = max(leaves, key=lambda leaf: counts[leaf])  # max keeps the first of equals: the first rail's leaf
        domain = (nvlink_domains or {}).get(host)
        rates = [r.rate_gbps for r in rails if r.up and r.rate_gbps]
        rate = min(rates) if rates else None
        topology.hosts[host] = TopologyHost(host, home, leaves, len(rails), domain, rate)
        for leaf in leaves:
            hosts_of.setdefault(leaf, []).append(host)
    if not topology.hosts:
        raise UserError(
            f"{source or graph.source or 'the fabric'}: no host is cabled to a switch (no HCA's node description "
            "names its host)",
            fix="set each HCA's node description to 'host device' (rdma-ndd does), or pass a cluster manifest whose "
            "fabric cables the nodes' NICs",
        )
    unplaced = sorted(s.name for s in graph.switches() if s.tier not in TIERS and s.name not in hosts_of)
    tier_of = {s.name: s.tier for s in graph.switches()}
    for leaf in hosts_of:
        tier_of[leaf] = "leaf"  # a switch with a host below it is a leaf, whatever else it is cabled to
    level = {name: TIERS.index(tier) for name, tier in tier_of.items() if tier in TIERS}
    children: dict[str, set[str]] = {}
    down: Counter[str] = Counter()
    up: Counter[str] = Counter()
    for link in graph.links:
        a, b = link.a.node, link.b.node
        la, lb = level.get(a), level.get(b)  # None for an HCA, or a switch in no tier
        if (la is None) != (lb is None) and index.is_switch(a) != index.is_switch(b):
            down[a if la is not None else b] += 1  # a leaf's cable to an HCA port
        if la is None or lb is None or la == lb:
            continue  # a cable within one tier (or to an unplaced switch) is no parent and child
        lower, upper = (a, b) if la < lb else (b, a)
        children.setdefault(upper, set()).add(lower)
        up[lower] += 1
        down[upper] += 1
    for name, tier in tier_of.items():
        if tier == "leaf" and name in hosts_of:
            # hosts came in order
            topology.switches[name] = TopologySwitch(name, "leaf", tuple(hosts_of[name]), (), down[name], up[name])
        elif tier in ("spine", "core") and children.get(name):
            below = tuple(sorted(children[name], key=natural))
            topology.switches[name] = TopologySwitch(name, tier, (), below, down[name], up[name])
        elif tier in TIERS:
            topology.notes.append(f"{tier} {name}: nothing below it; left out")
    if unplaced:
        topology.notes.append(f"switches in no tier (not connected to a leaf): {', '.join(unplaced[:6])}")
    return topology


def topology_from_fabric(fabric: Fabric, *, nvlink_domains: Mapping[str, str] | None = None) -> Topology:
    """The scheduler's view of a cluster's modelled fabric (a manifest's, the twin's): its switches with their
    tiers and its cables, HCA ports named "host/device", read through the same `topology_from_graph`."""
    graph = FabricGraph(source="cluster fabric")
    for sw in fabric.switches:
        graph.add_node(Node(sw.name, NodeKind.switch, ports=sw.radix, description=sw.name, tier=sw.tier, rail=sw.rail))
    for link in fabric.links:
        for owner, _port in (link.a, link.b):
            if owner not in graph.nodes and "/" in owner:
                graph.add_node(Node(owner, NodeKind.hca, host=owner.split("/", 1)[0]))
        width = link.width or 4
        speed = link.speed or next(
            (g for g, rate in LANE_GBPS.items() if abs(rate * width - link.speed_gbps) < 1e-6), None
        )
        state = link.state is PortState.active
        graph.add_link(Link(End(*link.a), End(*link.b), width=width, speed=speed, up=state))
    return topology_from_graph(graph, nvlink_domains=nvlink_domains, source="cluster fabric")
