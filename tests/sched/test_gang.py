"""Gang scheduling: all-or-nothing with minMember, and rollback of partial attempts."""

from __future__ import annotations

import numpy as np

from gpufleet.model import Gang
from gpufleet.sched.framework.scheduler import Scheduler
from tests.sched.k8s_objects import knode, kpod, pod, snap


def _state_copy(sched: Scheduler) -> tuple[np.ndarray, list[set[int]], set[str]]:
    return sched.state.used.copy(), [set(f) for f in sched.state.gpu_free], set(sched.state.placed)


def test_gang_that_does_not_fit_places_nothing_and_leaves_no_trace() -> None:
    s = snap(knode("a"), knode("b"), knode("c"))
    sched = Scheduler.from_snapshot(s)
    sched.schedule_one(pod("other", gpus=4))
    before = _state_copy(sched)
    members = [pod(f"g-{i}", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "g"}) for i in range(3)]
    result = sched.plan(members, {"default/g": Gang("default/g", 3)}, preemption=False)
    assert result.placements == []
    assert len(result.failures) == 3
    assert "only 2 of minMember 3 pods fit together" in result.failures[0].message
    after = _state_copy(sched)
    assert np.array_equal(before[0], after[0]) and before[1] == after[1] and before[2] == after[2]
    # and a later ordinary pod still gets the room the gang could not use
    assert sched.schedule_one(pod("small", gpus=8)).node in ("b", "c")  # type: ignore[union-attr]


def test_min_member_allows_partial_gangs() -> None:
    s = snap(knode("a"), knode("b"))
    sched = Scheduler.from_snapshot(s)
    members = [pod(f"g-{i}", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "g"}) for i in range(3)]
    result = sched.plan(members, {"default/g": Gang("default/g", 2)}, preemption=False)
    assert len(result.placements) == 2
    assert [f.pod for f in result.failures] == []  # the third stays pending quietly once minMember is met


def test_running_members_count_toward_min_member() -> None:
    s = snap(
        knode("a"),
        knode("b"),
        kpod("g-0", gpus=8, node="a", labels={"scheduling.x-k8s.io/pod-group": "g"}),
        kpod("g-1", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "g"}),
    )
    sched = Scheduler.from_snapshot(s)
    result = sched.plan(s.pending(), s.gangs, preemption=False)
    assert [p.node for p in result.placements] == ["b"]


def test_gang_and_single_pods_in_priority_order() -> None:
    s = snap(
        knode("a"),
        knode("b"),
        *[kpod(f"g-{i}", gpus=8, priority=10, labels={"scheduling.x-k8s.io/pod-group": "g"}) for i in range(2)],
        kpod("low", gpus=8, priority=1),
    )
    sched = Scheduler.from_snapshot(s)
    result = sched.plan(s.pending(), s.gangs, preemption=False)
    assert sorted(p.pod for p in result.placements) == ["default/g-0", "default/g-1"]
    assert [f.pod for f in result.failures] == ["default/low"]


def test_rollback_undoes_releases_too() -> None:
    s = snap(knode("a"))
    sched = Scheduler.from_snapshot(s)
    sched.schedule_one(pod("x", gpus=3))
    mark = sched.state.mark()
    sched.state.release("default/x")
    sched.schedule_one(pod("y", gpus=8))
    sched.state.rollback(mark)
    assert set(sched.state.placed) == {"default/x"}
    assert sched.state.gpu_free[0] == {3, 4, 5, 6, 7}


def test_queue_order_is_priority_then_creation_time() -> None:
    from gpufleet.sched.framework.gang import build_units

    older = pod("older", priority=5)
    older.created = "2026-11-20T08:00:00Z"
    newer = pod("newer", priority=5)
    newer.created = "2026-11-20T09:00:00Z"
    urgent = pod("urgent", priority=50)
    units = build_units([newer, older, urgent], {}, {})
    assert [u.name for u in units] == ["default/urgent", "default/older", "default/newer"]
