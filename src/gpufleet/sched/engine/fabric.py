"""Where nodes sit in the fabric and where a gang landed, read from the one topology model every scheduler export
uses (gpufleet.fabric.topology): shared by the scheduling framework and the trace replay."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.fabric.topology import Topology


@dataclass(frozen=True, slots=True)
class FabricPlace:
    """Where a node sits in the fabric: the leaves its rails reach, the switches one tier up from them (spines)
    and one more (cores), and its NVLink domain where one is known."""

    leaves: frozenset[str] = frozenset()
    spines: frozenset[str] = frozenset()
    cores: frozenset[str] = frozenset()
    domain: str | None = None
    rails: int = 0  # cabled HCA ports
    rail_gbps: float | None = None  # the slowest of them


def fabric_places(topology: Topology, names: Sequence[str]) -> dict[str, FabricPlace]:
    """Each scheduler node's place in `topology`: a fabric host is the node of the same name, else of the same
    short name (dgx-001 for dgx-001.cluster.local). Nodes the fabric does not name are left out."""
    exact = set(names)
    short = {name.split(".", 1)[0]: name for name in names}
    parents = topology.parents()
    out: dict[str, FabricPlace] = {}
    for host in topology.hosts.values():
        node = host.name if host.name in exact else short.get(host.name.split(".", 1)[0])
        if node is None:
            continue
        spines = frozenset(s for leaf in host.leaves for s in parents.get(leaf, ()))
        cores = frozenset(c for spine in spines for c in parents.get(spine, ()))
        out[node] = FabricPlace(frozenset(host.leaves), spines, cores, host.nvlink_domain, host.rails, host.rail_gbps)
    return out


@dataclass(frozen=True, slots=True)
class Landing:
    """Where a placed gang landed: the nodes, the leaves and spines it spans, and the switches a message between
    its two farthest members crosses on one rail (0 on one node, 1 under one leaf, 3 over a spine, 5 over a
    core; None where the fabric is not known)."""

    nodes: tuple[str, ...]
    leaves: tuple[str, ...] = ()
    spines: tuple[str, ...] = ()  # the spines above its leaves, when it spans more than one leaf group
    nvlink_domains: tuple[str, ...] = ()
    switch_hops: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "nodes": list(self.nodes),
            "leaves": list(self.leaves),
            "spines": list(self.spines),
            "nvlink_domains": list(self.nvlink_domains),
            "switch_hops": self.switch_hops,
        }


def landing(
    places: Mapping[str, FabricPlace],
    leaves: Mapping[str, frozenset[str]],
    domains: Mapping[str, str],
    nodes: Sequence[str],
) -> Landing:
    """Where `nodes` (one gang's) sit: `leaves` is the leaf set the scheduler groups each node by (the fabric's,
    or a leaf-group label's), `domains` each node's NVLink domain (the fabric's, or the clique label's)."""
    ordered = tuple(sorted(dict.fromkeys(nodes)))
    sets = {leaves.get(n, frozenset()) for n in ordered}
    spanned = tuple(sorted(set().union(*sets))) if sets else ()
    known = [places[n] for n in ordered if n in places]
    spanned_domains = tuple(sorted({domains[n] for n in ordered if n in domains}))
    hops: int | None = None
    spines: tuple[str, ...] = ()
    if len(ordered) <= 1:
        hops = 0
    elif len(sets) == 1 and spanned:
        hops = 1  # one leaf group: on each rail the members share a leaf
    elif known and len(known) == len(ordered):
        spines = tuple(sorted(set().union(*(p.spines for p in known))))
        # a spine above every member's leaves carries their traffic; otherwise it goes up to a core
        common = frozenset.intersection(*(p.spines for p in known))
        hops = 3 if common else 5
    return Landing(ordered, spanned, spines, spanned_domains, hops)
