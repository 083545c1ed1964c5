"""Topology: NVLink domains inside a node, IB leaf switches across nodes.

A multi-GPU pod belongs inside one NVLink domain: the whole baseboard behind an NVSwitch (HGX/DGX), or a bridged
pair (H100 NVL, PCIe cards). A gang belongs under the fewest leaf switches: in a rail-optimized fabric every node of a
scalable unit reaches the same set of rail leaves, so nodes that share that set are one switch hop apart on each rail.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.model import Fabric, Node


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


def leaves_of_nodes(fabric: Fabric, node_names: Iterable[str]) -> dict[str, frozenset[str]]:
    """The leaf switches each node's HCA ports are cabled to (one per rail in a rail-optimized fabric)."""
    wanted = set(node_names)
    leaves: dict[str, set[str]] = {n: set() for n in wanted}
    switch_names = {s.name for s in fabric.switches if s.tier == "leaf"} or {s.name for s in fabric.switches}
    for link in fabric.links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            node = end[0].split("/", 1)[0]
            if node in wanted and "/" in end[0] and other[0] in switch_names:
                leaves[node].add(other[0])
    return {n: frozenset(s) for n, s in leaves.items()}


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
