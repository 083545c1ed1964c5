"""Gang scheduling: place at least minMember pods of a group or none of them, packed under the fewest leaf switches.

A gang is tried in one multi-node NVLink domain first where the fabric names them (an NVL72 rack: its all-reduce
stays on NVLink), then leaf group by leaf group (the nodes that share one set of rail leaves): the tightest group that
holds it wins. If no single leaf group does, it is tried under one set of spines (a three-tier fabric's pod, so its
traffic does not climb to the cores), and only then are members placed one by one with a score that pulls them
toward the leaf groups the gang already uses. Either way the attempt runs on the state's journal, so a gang that
falls short of minMember leaves no trace. Members keep to nodes of the vendor whose devices they ask for (the vendor
filter): a gang of AMD pods never spans to NVIDIA nodes, and its leaf groups are ranked by their free devices of
that vendor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import Gang
from gpufleet.sched.framework.devices import vendor_resources
from gpufleet.sched.framework.filters import feasible
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.types import Placement, Placer, Unit


@dataclass(slots=True)
class GangOutcome:
    placements: list[Placement] = field(default_factory=list)
    unplaced: list[PodInfo] = field(default_factory=list)
    fitted: int = 0  # how many members fitted in the best failed attempt

    @property
    def ok(self) -> bool:
        return bool(self.placements) or not self.unplaced


def build_units(pending: Sequence[PodInfo], gangs: dict[str, Gang], placed_count: dict[str, int]) -> list[Unit]:
    """Queue order as kube-scheduler's PrioritySort: priority (high first), then creation time, then input order;
    a gang sits where its first pending member arrived."""
    units: list[Unit] = []
    by_gang: dict[str, Unit] = {}
    for pod in pending:
        g = pod.pod.gang
        if g is None:
            units.append(Unit(pod.key, [pod], 1, pod.pod.priority, pod.pod.queue))
            continue
        unit = by_gang.get(g)
        if unit is None:
            spec = gangs.get(g)
            min_member = spec.min_member if spec else 1
            # Members already running count toward minMember.
            need = max(min_member - placed_count.get(g, 0), 0)
            unit = by_gang[g] = Unit(g, [], need, pod.pod.priority, pod.pod.queue, gang=True)
            units.append(unit)
        unit.pods.append(pod)
        unit.priority = max(unit.priority, pod.pod.priority)
    units.sort(key=lambda u: (-u.priority, min(p.created for p in u.pods)))  # stable within ties
    return units


def _try_members(sched: Placer, pods: Sequence[PodInfo], restrict: np.ndarray | None, gang: bool) -> GangOutcome:
    out = GangOutcome()
    # a gang's members score by leaf and fabric health; a lone pod needs neither (None)
    groups: set[int] | None = set() if gang else None
    for pod in pods:
        picked = sched.select_node(pod, restrict, groups)
        if picked is None:
            out.unplaced.append(pod)
            continue
        placement = sched.place(pod, *picked)
        out.placements.append(placement)
        g = int(sched.state.leaf_group[picked[0]])
        if g >= 0 and groups is not None:
            groups.add(g)
    return out


MAX_GROUP_TRIALS = 4


def _candidate_groups(
    sched: Placer,
    pods: Sequence[PodInfo],
    allowed: np.ndarray | None = None,
    group_of: np.ndarray | None = None,
    ngroups: int | None = None,
) -> list[int]:
    """Groups that could hold every member (on `allowed` nodes), by a vectorised upper bound, tightest first: leaf
    groups, or the groups `group_of` numbers (per node; -1 in none) when given."""
    state = sched.state
    if group_of is None:
        group_of, ngroups = state.leaf_group, len(state.group_names)
    assert ngroups is not None
    biggest = pods[0]
    idx, amounts, unknown = state.request_vector(biggest)
    if unknown:
        return []
    usable = feasible(state, biggest) & (group_of >= 0)
    if allowed is not None:
        usable &= allowed
    ok = np.flatnonzero(usable)
    if len(ok) == 0:
        return []
    free = state.free_
    per_node = np.min(np.stack([free[ok, c] // a for c, a in zip(idx, amounts, strict=True)]), axis=0)
    capacity = np.bincount(group_of[ok], weights=per_node, minlength=ngroups)
    gpu_col = state.gpu_column(biggest)  # the vendor's devices (or partitions) the gang asks for
    member = group_of >= 0
    free_gpus = np.bincount(group_of[member], weights=free[member, gpu_col], minlength=ngroups)
    order = np.lexsort((np.arange(ngroups), free_gpus))
    return [int(g) for g in order if capacity[g] >= len(pods)]


def _candidate_groups_by_class(sched: Placer, pods: Sequence[PodInfo], limit: int, healthy: bool) -> list[int]:
    """The first `limit` groups `_candidate_groups` lists (with no node excluded, or with the nodes a gang keeps
    off excluded when `healthy`), read from the per-group indexes: groups in order of free devices, starting at the
    first with enough for every member (a group's capacity in members cannot exceed its free devices over what one
    member asks), each group's capacity summed over the classes of its nodes."""
    state = sched.state
    biggest = pods[0]
    idx, amounts, unknown = state.request_vector(biggest)
    if unknown:
        return []
    ids, copies = sched.feasible_classes(biggest)
    per_node = {
        c: n
        for c, n in zip(ids.tolist(), copies.tolist(), strict=True)
        if n > 0 and not (healthy and state.class_avoided(c))
    }
    if not per_node:
        return []
    gpu_col = state.gpu_column(biggest)  # the vendor's devices (or partitions) the gang asks for
    asked = dict(zip(idx.tolist(), amounts.tolist(), strict=True)).get(gpu_col, 0)
    order, start = state.groups_by_free(gpu_col, len(pods) * asked)
    out: list[int] = []
    for j in range(start, len(order)):
        g = order[j][1]
        capacity = sum(n * per_node.get(cls, 0) for cls, n in state.group_classes[g].items())
        if capacity >= len(pods):
            out.append(g)
            if len(out) == limit:
                break
    return out


def _in_one_group(
    sched: Placer,
    unit: Unit,
    pods: Sequence[PodInfo],
    allowed: np.ndarray | None,
    group_of: np.ndarray,
    ngroups: int,
) -> GangOutcome | None:
    """Every member in one of the groups `group_of` numbers (the tightest of a few that could hold them), or None
    with nothing left placed."""
    state = sched.state
    start = state.mark()
    for g in _candidate_groups(sched, pods, allowed, group_of, ngroups)[:MAX_GROUP_TRIALS]:
        restrict = group_of == g if allowed is None else (group_of == g) & allowed
        out = _try_members(sched, pods, restrict, unit.gang)
        if not out.unplaced:
            return out
        state.rollback(start)
    return None


def _whole(
    sched: Placer, unit: Unit, pods: Sequence[PodInfo], allowed: np.ndarray | None, healthy: bool = False
) -> GangOutcome | None:
    """Every member placed on `allowed` nodes (all when None; `healthy`: `allowed` is the nodes a gang need not
    keep off), tightest first: in one multi-node NVLink domain where the fabric names them, in one leaf group,
    under one set of spines, else anywhere; None (and nothing left placed) when some member does not fit."""
    state = sched.state
    start = state.mark()
    if unit.gang and state.domain_groups > 0 and len(pods) > 1:
        out = _in_one_group(sched, unit, pods, allowed, state.domain_group, state.domain_groups)
        if out is not None:
            return out
    if len(state.group_names) > 1:
        # Tightest leaf group first (fewest free GPUs) among those whose rough capacity can hold the gang;
        # a trial placement confirms it, trying a few groups before giving up on single-group placement.
        indexed = (allowed is None or healthy) and sched.by_class(pods[0])
        if indexed:
            groups = _candidate_groups_by_class(sched, pods, MAX_GROUP_TRIALS, healthy)
        else:
            groups = _candidate_groups(sched, pods, allowed)[:MAX_GROUP_TRIALS]
        for g in groups:
            if indexed:
                restrict = state.group_healthy[g] if healthy else state.group_members[g]
            else:
                restrict = state.leaf_group == g if allowed is None else (state.leaf_group == g) & allowed
            out = _try_members(sched, pods, restrict, unit.gang)
            if not out.unplaced:
                return out
            state.rollback(start)
    if unit.gang and state.spine_groups > 1:
        out = _in_one_group(sched, unit, pods, allowed, state.spine_group, state.spine_groups)
        if out is not None:
            return out
    if allowed is None:
        return None
    out = _try_members(sched, pods, allowed, unit.gang)
    if not out.unplaced:
        return out
    state.rollback(start)
    return None


def place_gang(sched: Placer, unit: Unit) -> GangOutcome:
    """All-or-nothing: returns placements only when at least `unit.min_member` landed; otherwise rolls back.

    A gang first keeps off nodes whose rails go through a degraded or down leaf (or whose own cable is bad); only
    when it fits nowhere else does it take them."""
    state = sched.state
    # Largest members first: they are the hardest to fit (a member keeps to its vendor's nodes by the filters).
    devices = vendor_resources()
    pods = sorted(unit.pods, key=lambda p: -sum(p.requests.get(r, 0) for r in devices))
    start = state.mark()
    if unit.gang and state.has_fabric_avoid:
        out_healthy = _whole(sched, unit, pods, ~state.fabric_avoid, healthy=True)
        if out_healthy is not None:
            return out_healthy
    found = _whole(sched, unit, pods, None)
    if found is not None:
        return found
    out = _try_members(sched, pods, None, unit.gang)
    if len(out.placements) >= unit.min_member and out.placements:
        return out
    fitted = len(out.placements)
    state.rollback(start)
    return GangOutcome(placements=[], unplaced=list(unit.pods), fitted=fitted)
