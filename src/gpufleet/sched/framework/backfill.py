"""EASY backfill: the head-of-line job that does not fit gets a reservation; a later job may start now only if it
does not push that reservation back.

The reservation (shadow) time is found by replaying the estimated ends of running pods, earliest first, until the head
job fits. A candidate is accepted when it ends before the shadow time, or when, with the candidate running until its
own estimated end, the head job still fits at the same shadow time. A candidate without a runtime estimate is assumed
to run forever, so it only backfills onto capacity the head job does not need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.model import Gang
from gpufleet.sched.framework.gang import build_units, place_gang
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.types import Placement, Placer, Unit


@dataclass(slots=True)
class Reservation:
    unit: str
    start: float
    nodes: list[str]


@dataclass(slots=True)
class BackfillPlan:
    started: list[Placement] = field(default_factory=list)
    backfilled: list[str] = field(default_factory=list)  # units that started ahead of the reserved head
    reservation: Reservation | None = None
    held: dict[str, str] = field(default_factory=dict)  # unit -> why it waits


def _unit_runtime(unit: Unit) -> float:
    runtimes = [p.runtime_s for p in unit.pods]
    if any(r is None for r in runtimes):
        return math.inf
    return max(r for r in runtimes if r is not None)


def shadow_time(sched: Placer, unit: Unit, now: float, ends: dict[str, float]) -> tuple[float, list[str]]:
    """When the unit could start if running pods end as estimated, and on which nodes. Changes nothing."""
    state = sched.state
    mark = state.mark()
    try:
        out = place_gang(sched, unit)
        if out.placements:
            return now, [p.node for p in out.placements]
        releases = sorted((t, k) for k, t in ends.items() if k in state.placed and math.isfinite(t))
        i = 0
        while i < len(releases):
            t = releases[i][0]
            while i < len(releases) and releases[i][0] == t:
                state.release(releases[i][1])
                i += 1
            out = place_gang(sched, unit)
            if out.placements:
                return max(t, now), [p.node for p in out.placements]
        return math.inf, []
    finally:
        state.rollback(mark)


def backfill(
    sched: Placer,
    pending: Sequence[PodInfo],
    gangs: dict[str, Gang] | None = None,
    *,
    now: float = 0.0,
    ends: dict[str, float] | None = None,
) -> BackfillPlan:
    """Start what can start now in queue order; reserve for the first unit that cannot; backfill behind it.

    `ends` holds the estimated end time of each running pod (by namespace/name); pods started here get
    `now + runtime_s` from their runtime estimate.
    """
    ends = dict(ends or {})
    plan = BackfillPlan()
    for unit in build_units(pending, gangs or {}, {}):
        if plan.reservation is None:
            out = place_gang(sched, unit)
            if out.placements:
                plan.started.extend(out.placements)
                for p in unit.pods:
                    ends[p.key] = now + _unit_runtime(unit)
                continue
            start, nodes = shadow_time(sched, unit, now, ends)
            plan.reservation = Reservation(unit.name, start, nodes)
            plan.held[unit.name] = f"head of line; reserved to start in {start - now:g}s on {len(nodes)} node(s)"
            head = unit
            continue
        mark = sched.state.mark()
        out = place_gang(sched, unit)
        if not out.placements:
            plan.held[unit.name] = "does not fit now"
            continue
        end = now + _unit_runtime(unit)
        if end <= plan.reservation.start:
            accepted = True
        else:
            trial = dict(ends)
            trial.update({p.key: end for p in unit.pods})
            new_start, _ = shadow_time(sched, head, now, trial)
            accepted = new_start <= plan.reservation.start
        if accepted:
            plan.started.extend(out.placements)
            plan.backfilled.append(unit.name)
            ends.update({p.key: end for p in unit.pods})
        else:
            sched.state.rollback(mark)
            plan.held[unit.name] = (
                f"would delay {head.name} past its reserved start in {plan.reservation.start - now:g}s"
            )
    return plan
