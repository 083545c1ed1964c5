"""Topology: NVLink domains inside a node; across nodes, the fabric's leaves, spines and multi-node NVLink
domains, read from the one topology model every scheduler export uses (gpufleet.fabric.topology).

A multi-GPU pod belongs inside one NVLink domain: the whole baseboard behind an NVSwitch (HGX/DGX), or a bridged
pair (H100 NVL, PCIe cards). A gang belongs under the fewest leaf switches: in a rail-optimized fabric every node of a
scalable unit reaches the same set of rail leaves, so nodes that share that set are one switch hop apart on each rail.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.model import Node

# where nodes and gangs sit in the fabric: shared with the trace replay's gangs
from gpufleet.sched.engine.fabric import FabricPlace as FabricPlace
from gpufleet.sched.engine.fabric import Landing as Landing
from gpufleet.sched.engine.fabric import fabric_places as fabric_places
from gpufleet.sched.engine.fabric import landing as landing


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
