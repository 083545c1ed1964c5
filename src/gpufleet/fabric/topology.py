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
from gpufleet.fabric.graph import FabricGraph
from gpufleet.fabric.rails import FabricIndex, natural

TIERS = ("leaf", "spine", "core")


@dataclass(frozen=True, slots=True)
class TopologySwitch:
    name: str  # as the fabric names it (the switch's node description)
    tier: str  # leaf, spine or core
    hosts: tuple[str, ...] = ()  # a leaf: every host with a rail cabled to it, in natural order
    children: tuple[str, ...] = ()  # a spine or core: the switches one tier down that are cabled to it

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
        topology.hosts[host] = TopologyHost(host, home, leaves, len(rails), domain)
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
    for link in graph.links:
        a, b = link.a.node, link.b.node
        la, lb = level.get(a), level.get(b)  # None for an HCA, or a switch in no tier
        if la is None or lb is None or la == lb:
            continue  # a cable within one tier (or to an unplaced switch) is no parent and child
        lower, upper = (a, b) if la < lb else (b, a)
        children.setdefault(upper, set()).add(lower)
    for name, tier in tier_of.items():
        if tier == "leaf" and name in hosts_of:
            topology.switches[name] = TopologySwitch(name, "leaf", tuple(hosts_of[name]))  # hosts came in order
        elif tier in ("spine", "core") and children.get(name):
            topology.switches[name] = TopologySwitch(name, tier, children=tuple(sorted(children[name], key=natural)))
        elif tier in TIERS:
            topology.notes.append(f"{tier} {name}: nothing below it; left out")
    if unplaced:
        topology.notes.append(f"switches in no tier (not connected to a leaf): {', '.join(unplaced[:6])}")
    return topology
