"""Preemption: make room for a pod (or a whole gang) by evicting the fewest, lowest-priority pods.

Per candidate node, as kube-scheduler's DefaultPreemption does: remove every evictable pod, check that the preemptor
fits, then give back (reprieve) victims from the highest priority down while it still fits. What is left are the
victims. Gang-aware: a victim that belongs to a gang brings its whole gang (a gang below minMember is useless), and a
gang preemptor evicts nothing unless every member it needs can be placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from gpufleet.sched.framework.filters import static_mask
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.state import Assignment, ClusterState
from gpufleet.sched.framework.topology import max_free_in_domain
from gpufleet.sched.framework.types import Eviction, EvictPredicate, Placement, Placer, Unit

# (victim, preemptor) -> may the victim be evicted for the preemptor?


def lower_priority(victim: PodInfo, preemptor: PodInfo) -> bool:
    return victim.pod.priority < preemptor.pod.priority


@dataclass(slots=True)
class VictimChoice:
    node: int
    victims: list[Assignment]
    # (pods evicted, highest victim priority, sum of victim priorities, 1 if outside the gang's leaf groups)
    cost: tuple[int, int, int, int]


@dataclass(slots=True)
class PreemptionResult:
    placements: list[Placement] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)


def _victim_groups(
    sched: Placer, pods: list[PodInfo], preemptor: PodInfo, can_evict: EvictPredicate
) -> list[list[Assignment]]:
    """Evictable pods on a node, expanded to whole gangs; a gang with any member that may not go is kept."""
    state = sched.state
    groups: list[list[Assignment]] = []
    seen_gangs: set[str] = set()
    for pod in pods:
        gang = pod.pod.gang
        if gang is None:
            if can_evict(pod, preemptor):
                groups.append([state.placed[pod.key]])
            continue
        if gang in seen_gangs:
            continue
        seen_gangs.add(gang)
        members = [state.placed[k] for k in sorted(state.gang_members.get(gang, ()))]
        if all(can_evict(a.pod, preemptor) for a in members):
            groups.append(members)
    return groups


@dataclass(slots=True)
class _Group:
    members: list[Assignment]
    freed: list[int]  # what evicting the group frees on this node, per requested column
    gpus: frozenset[int]  # GPU indices it frees on this node
    priority: int


def _node_groups(sched: Placer, pod: PodInfo, node: int, idx: np.ndarray, can_evict: EvictPredicate) -> list[_Group]:
    state = sched.state
    on_node = [p for p in state.pods_on[node].values() if can_evict(p, pod)]
    out = []
    for members in _victim_groups(sched, on_node, pod, can_evict):
        freed = [0] * len(idx)
        gpus: set[int] = set()
        for a in members:
            if a.node != node:
                continue
            for j, col in enumerate(idx):
                freed[j] += a.amount_of.get(int(col), 0)
            gpus.update(a.gpus)
        out.append(_Group(members, freed, frozenset(gpus), max(a.pod.pod.priority for a in members)))
    return out


def _lower_bound(free: list[int], need: list[int], groups: list[_Group]) -> int | None:
    """Fewest groups that could free enough of every resource (None: even all of them cannot)."""
    bound = 0
    for j in range(len(need)):
        if free[j] >= need[j]:
            continue
        short = need[j] - free[j]
        sizes = sorted((g.freed[j] for g in groups), reverse=True)
        total, count = 0, 0
        for size in sizes:
            if total >= short:
                break
            total += size
            count += 1
        if total < short:
            return None
        bound = max(bound, count)
    return max(bound, 1)


def _reprieve(
    state: ClusterState, pod: PodInfo, node: int, idx: np.ndarray, need: list[int], groups: list[_Group]
) -> list[_Group] | None:
    """kube-scheduler's dry run on small local copies: evict all, then give back from the highest priority down."""
    k = state.exclusive_gpus(pod)
    domains = state.domains[node]
    check_nvlink = k >= 2 and state.max_domain[node] >= k

    def fits(free: list[int], gfree: set[int]) -> bool:
        return all(f >= n for f, n in zip(free, need, strict=True)) and (
            not check_nvlink or max_free_in_domain(domains, gfree) >= k
        )

    free = [int(v) for v in state.free_[node, idx]]
    gfree = set(state.gpu_free[node])
    for g in groups:
        free = [f + x for f, x in zip(free, g.freed, strict=True)]
        gfree |= g.gpus
    if not fits(free, gfree):
        return None
    victims = []
    for g in sorted(groups, key=lambda g: (-g.priority, len(g.members))):
        trial_free = [f - x for f, x in zip(free, g.freed, strict=True)]
        trial_gpus = gfree - g.gpus
        if fits(trial_free, trial_gpus):
            free, gfree = trial_free, trial_gpus
        else:
            victims.append(g)
    return victims


def candidate_limit(nodes: int) -> int:
    """How many nodes to dry-run (kube-scheduler's defaults: 10% of the nodes, at least 100)."""
    return min(nodes, max(100, nodes // 10))


def _bounds(
    state: ClusterState, pod: PodInfo, nodes: np.ndarray, idx: np.ndarray, need: list[int], can_evict: EvictPredicate
) -> np.ndarray:
    """A vectorised lower bound on victims per node: each resource's shortfall over the largest single pod."""
    bound = np.ones(len(nodes), dtype=np.int64)
    for col, amount in zip(idx, need, strict=True):
        biggest = state.largest_amount(int(col), pod.pod.priority if can_evict is lower_priority else None)
        short = amount - state.free_[nodes, col]
        if biggest > 0:
            bound = np.maximum(bound, -(-short // biggest))
    return bound


def _order_per_node(
    state: ClusterState, pod: PodInfo, idx: np.ndarray, need: list[int], can_evict: EvictPredicate
) -> Iterator[tuple[int, int]]:
    """(node, bound) for every node the pod's static filters pass that holds pods: fewest victims by the bound
    first, then fewest pods, then node order."""
    nodes = np.flatnonzero(static_mask(state, pod))
    counts = np.fromiter((len(state.pods_on[int(i)]) for i in nodes), dtype=np.int64, count=len(nodes))
    bound = _bounds(state, pod, nodes, idx, need, can_evict)
    for pos in np.lexsort((nodes, counts, bound)):
        if counts[pos]:
            yield int(nodes[pos]), int(bound[pos])


def _order_by_class(
    state: ClusterState, pod: PodInfo, idx: np.ndarray, need: list[int], can_evict: EvictPredicate
) -> Iterator[tuple[int, int]]:
    """The same sequence as `_order_per_node`, read from classes: the bound and the pod count are a class's (a
    node's pod count is its used `pods`), so classes are sorted, and the members of classes that tie are merged in
    node order, lazily: a search rarely looks past a few nodes. Under the plain priority rule, classes whose lowest
    priority is not below the pod's are left out: `choose_victims` would pass over their nodes (no victim groups),
    and leaving them out cannot change where it stops (bounds only grow along the order)."""
    classes = state.classes
    ids = classes.active().copy()
    reps = np.fromiter((classes.first(int(c)) for c in ids), dtype=np.int64, count=len(ids))
    keep = static_mask(state, pod)[reps]
    pods_col = state.res_index["pods"]
    counts = state.used[reps, pods_col]
    keep &= counts > 0
    if can_evict is lower_priority:  # nodes whose every pod is at or above the pod's priority have no victim
        prio = pod.pod.priority
        lowest = state.class_lowest_priority
        keep &= np.fromiter(
            ((low := lowest(int(c))) is not None and low < prio for c in ids), dtype=bool, count=len(ids)
        )
    ids, reps, counts = ids[keep], reps[keep], counts[keep]
    bound = _bounds(state, pod, reps, idx, need, can_evict)
    order = np.lexsort((counts, bound))
    start = 0
    while start < len(order):
        b, c = bound[order[start]], counts[order[start]]
        end = start
        while end < len(order) and bound[order[end]] == b and counts[order[end]] == c:
            end += 1
        tied = [classes.ordered(int(ids[p])) for p in order[start:end]]
        for node in tied[0] if len(tied) == 1 else heapq.merge(*tied):
            yield node, int(b)
        start = end


def choose_victims(
    sched: Placer, pod: PodInfo, can_evict: EvictPredicate, gang_groups: set[int] | None = None
) -> VictimChoice | None:
    """The node whose dry run evicts the fewest pods (then lowest priorities).

    Like kube-scheduler, the dry run stops after `candidate_limit` nodes where preemption works. Nodes holding fewer
    pods go first (they tend to need fewer victims), and a node whose lower bound on victims cannot beat the best
    found is skipped without a dry run.
    """
    state = sched.state
    idx, need_arr, unknown = state.request_vector(pod)
    if unknown:
        return None
    need = [int(v) for v in need_arr]
    by_class = sched.by_class(pod)
    order = (_order_by_class if by_class else _order_per_node)(state, pod, idx, need, can_evict)
    floor_priority = state.lowest_priority()
    best: VictimChoice | None = None
    tried = 0
    limit = candidate_limit(len(state))
    for node, bound in order:
        if best is not None and (
            bound > best.cost[0] or (bound == best.cost[0] and best.cost[1] == floor_priority and not best.cost[3])
        ):
            break  # no remaining node can need fewer victims, or the same number at a lower priority
        groups = _node_groups(sched, pod, node, idx, can_evict)
        if not groups:
            continue
        lb = _lower_bound([int(v) for v in state.free_[node, idx]], need, groups)
        if lb is None or (best is not None and lb > best.cost[0]):
            continue
        victim_groups = _reprieve(state, pod, node, idx, need, groups)
        if victim_groups is None:
            continue
        tried += 1
        victims = [a for g in victim_groups for a in g.members]
        prios = [a.pod.pod.priority for a in victims]
        outside = int(bool(gang_groups) and int(state.leaf_group[node]) not in (gang_groups or set()))
        cost = (len(victims), max(prios, default=0), sum(prios), outside)
        if best is None or cost < best.cost:
            best = VictimChoice(node, victims, cost)
        if tried >= limit:
            break
    return best


def preempt_for_unit(sched: Placer, unit: Unit, can_evict: EvictPredicate | None = None) -> PreemptionResult | None:
    """Place the unit by evicting victims, or change nothing and return None."""
    if not all(p.preemptible for p in unit.pods):
        return None
    rule = can_evict or lower_priority
    state = sched.state
    mark = state.mark()
    out = PreemptionResult()
    groups: set[int] = set()
    for pod in sorted(unit.pods, key=lambda p: -sum(p.requests.get(r, 0) for r in p.requests if "/" in r)):
        picked = sched.select_node(pod, None, groups)
        if picked is not None:
            out.placements.append(sched.place(pod, *picked))
            groups.add(int(state.leaf_group[picked[0]]))
            continue
        choice = choose_victims(sched, pod, rule, groups)
        if choice is None:
            continue
        groups.add(int(state.leaf_group[choice.node]))
        for a in choice.victims:
            state.release(a.pod.key)
            out.evictions.append(Eviction(a.pod.key, state.names[a.node], f"preempted by {pod.key}"))
        out.placements.append(sched.place(pod, choice.node))
    if len(out.placements) >= max(unit.min_member, 1) and out.evictions:
        return out
    state.rollback(mark)
    return None
