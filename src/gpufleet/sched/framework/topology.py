"""Topology: NVLink domains inside a node; across nodes, the fabric's leaves, spines and multi-node NVLink
domains, read from the one topology model every scheduler export uses (gpufleet.fabric.topology).

A multi-GPU pod belongs inside one NVLink domain: the whole baseboard behind an NVSwitch (HGX/DGX), or a bridged
pair (H100 NVL, PCIe cards). A gang belongs under the fewest leaf switches: in a rail-optimized fabric every node of a
scalable unit reaches the same set of rail leaves, so nodes that share that set are one switch hop apart on each rail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.fabric.topology import Topology
from gpufleet.model import Node


def nvlink_domains(node: Node) -> list[frozenset[int]]:
    """Connected components of the NVLink graph over the node's GPUs (singletons for PCIe-only GPUs)."""
    by_index = {g.index: g for g in node.gpus}
    seen: set[int] = set()
    domains: list[frozenset[int]] = []
    for start in sorted(by_index):
        if start in seen:
            continue
        stack, comp = [start], set()
        while stack:
            i = stack.pop()
            if i in comp or i not in by_index:
                continue
            comp.add(i)
            stack.extend(p for p in by_index[i].nvlink_peers if p not in comp)
        seen |= comp
        domains.append(frozenset(comp))
    return domains


def max_free_in_domain(domains: Sequence[frozenset[int]], free: set[int]) -> int:
    return max((len(d & free) for d in domains), default=0)


def choose_gpus(domains: Sequence[frozenset[int]], free: set[int], count: int) -> tuple[int, ...] | None:
    """Pick `count` free GPUs: the fullest domain that still holds them all (keeps whole domains free for big pods);
    a pod larger than any domain takes whole free domains first."""
    if count <= 0:
        return ()
    if len(free) < count:
        return None
    fitting = [d & free for d in domains if len(d & free) >= count]
    if fitting:
        best = min(fitting, key=lambda f: (len(f), min(f)))
        return tuple(sorted(best)[:count])
    picked: list[int] = []
    for part in sorted((d & free for d in domains), key=lambda f: (-len(f), min(f, default=0))):
        for idx in sorted(part):
            if len(picked) == count:
                break
            picked.append(idx)
    return tuple(sorted(picked)) if len(picked) == count else None


# GPU feature discovery's label for the NVLink domain a node's GPUs joined (NVML's fabric clique, "<cluster UUID>.
# <clique id>"): the multi-node NVLink domain of an NVL72 rack where the fabric model names none
CLIQUE_LABEL = "nvidia.com/gpu.clique"


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


def leaf_groups(leaves: dict[str, frozenset[str]]) -> dict[frozenset[str], list[str]]:
    """Nodes grouped by the exact set of leaves they reach (a scalable unit / rail group)."""
    groups: dict[frozenset[str], list[str]] = {}
    for node, ls in leaves.items():
        if ls:
            groups.setdefault(ls, []).append(node)
    return groups


def leaves_spanned(leaves: dict[str, frozenset[str]], nodes: Iterable[str]) -> int:
    """How many distinct leaf switches a placement touches."""
    out: set[str] = set()
    for n in nodes:
        out |= leaves.get(n, frozenset())
    return len(out)
