"""EASY backfill: a small job jumps ahead only if the reserved head-of-line job starts no later."""

from __future__ import annotations

from gpufleet.sched.framework.backfill import backfill
from gpufleet.sched.framework.scheduler import Scheduler
from tests.sched.k8s_objects import knode, kpod, pod, snap

EST = "gpufleet.io/runtime-estimate"


def _cluster() -> Scheduler:
    # a: 6 of 8 GPUs busy until t=3600; b: 4 busy until t=7200. The 8-GPU head job can start at 3600 on a.
    s = snap(
        knode("a"),
        knode("b"),
        kpod("run-a", gpus=6, node="a"),
        kpod("run-b", gpus=4, node="b"),
    )
    return Scheduler.from_snapshot(s)


ENDS = {"default/run-a": 3600.0, "default/run-b": 7200.0}


def test_short_job_backfills_and_long_job_waits() -> None:
    sched = _cluster()
    head = pod("head", gpus=8, priority=10)
    short = pod("short", gpus=2, annotations={EST: "30m"})  # ends at 1800 < 3600
    long_on_a = pod("long", gpus=2, annotations={EST: "3h"})  # only fits on a (b has 4 free, fine too)
    plan = backfill(sched, [head, short, long_on_a], now=0.0, ends=ENDS)
    assert plan.reservation is not None and plan.reservation.unit == "default/head"
    assert plan.reservation.start == 3600.0 and plan.reservation.nodes == ["a"]
    started = {p.pod: p.node for p in plan.started}
    assert "default/short" in started
    # the long job may only start where it does not hold GPUs the head needs at t=3600: node b
    assert started.get("default/long") == "b"
    assert plan.backfilled == ["default/short", "default/long"]


def test_job_that_would_delay_the_head_is_held() -> None:
    s = snap(knode("a"), kpod("run-a", gpus=6, node="a"))
    sched = Scheduler.from_snapshot(s)
    head = pod("head", gpus=8, priority=10)
    greedy = pod("greedy", gpus=2, annotations={EST: "2h"})  # would end at 7200 > 3600 on the only node
    unknown = pod("unknown", gpus=1)  # no estimate: assumed to run forever
    plan = backfill(sched, [head, greedy, unknown], now=0.0, ends={"default/run-a": 3600.0})
    assert plan.started == []
    assert plan.held["default/greedy"] == "would delay default/head past its reserved start in 3600s"
    assert plan.held["default/unknown"] == "would delay default/head past its reserved start in 3600s"
    assert plan.held["default/head"] == "head of line; reserved to start in 3600s on 1 node(s)"
    assert set(sched.state.placed) == {"default/run-a"}  # nothing tentative left behind


def test_head_that_fits_starts_and_nothing_is_reserved() -> None:
    sched = _cluster()
    plan = backfill(sched, [pod("fits", gpus=4, annotations={EST: "1h"})], now=0.0, ends=ENDS)
    assert [p.node for p in plan.started] == ["b"] and plan.reservation is None
