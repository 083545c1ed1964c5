"""Preemption: make room for a pod (or a whole gang) by evicting the fewest, lowest-priority pods.

Per candidate node, as kube-scheduler's DefaultPreemption does: remove every evictable pod, check that the preemptor
fits, then give back (reprieve) victims from the highest priority down while it still fits. What is left are the
victims. Gang-aware: a victim that belongs to a gang brings its whole gang (a gang below minMember is useless), and a
gang preemptor evicts nothing unless every member it needs can be placed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.sched.cluster_state import Assignment
from gpufleet.sched.filters import affinity_mask, feasible, taint_mask, unschedulable_mask
from gpufleet.sched.k8s import PodInfo

if TYPE_CHECKING:
    from gpufleet.sched.gang import Unit
    from gpufleet.sched.scheduler import Eviction, Placement, Scheduler

# (victim, preemptor) -> may the victim be evicted for the preemptor?
EvictPredicate = Callable[[PodInfo, PodInfo], bool]


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
    sched: Scheduler, pods: list[PodInfo], preemptor: PodInfo, can_evict: EvictPredicate
) -> list[list[Assignment]]:
    """Evictable pods on a node, expanded to whole gangs; a gang with any member that may not go is kept."""
    placed = sched.state.placed
    groups: list[list[Assignment]] = []
    seen_gangs: set[str] = set()
    for pod in pods:
        gang = pod.pod.gang
        if gang is None:
            if can_evict(pod, preemptor):
                groups.append([placed[pod.key]])
            continue
        if gang in seen_gangs:
            continue
        seen_gangs.add(gang)
        members = [a for a in placed.values() if a.pod.pod.gang == gang]
        if all(can_evict(a.pod, preemptor) for a in members):
            groups.append(members)
    return groups


def choose_victims(
    sched: Scheduler, pod: PodInfo, can_evict: EvictPredicate, gang_groups: set[int] | None = None
) -> VictimChoice | None:
    state = sched.state
    static = unschedulable_mask(state, pod) & taint_mask(state, pod) & affinity_mask(state, pod)
    best: VictimChoice | None = None
    for i in np.flatnonzero(static):
        node = int(i)
        groups = _victim_groups(sched, list(state.pods_on[node].values()), pod, can_evict)
        if not groups:
            continue
        mark = state.mark()
        for group in groups:
            for a in group:
                state.release(a.pod.key)
        if not feasible(state, pod)[node]:
            state.rollback(mark)
            continue
        victims: list[Assignment] = []
        for group in sorted(groups, key=lambda g: (-max(a.pod.pod.priority for a in g), len(g))):
            keep = state.mark()
            for a in group:
                state.assign(a.pod, a.node, a.gpus)
            if not feasible(state, pod)[node]:
                state.rollback(keep)
                victims.extend(group)
        state.rollback(mark)
        prios = [a.pod.pod.priority for a in victims]
        outside = int(bool(gang_groups) and int(state.leaf_group[node]) not in (gang_groups or set()))
        cost = (len(victims), max(prios, default=0), sum(prios), outside)
        if best is None or cost < best.cost:
            best = VictimChoice(node, victims, cost)
    return best


def preempt_for_unit(sched: Scheduler, unit: Unit, can_evict: EvictPredicate | None = None) -> PreemptionResult | None:
    """Place the unit by evicting victims, or change nothing and return None."""
    from gpufleet.sched.scheduler import Eviction

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
