"""Preemption: fewest victims, lowest priority, gang-aware, and never into a gang that still won't fit."""

from __future__ import annotations

from gpufleet.model import Gang
from gpufleet.sched.framework.scheduler import Scheduler
from tests.sched.k8s_objects import knode, kpod, pod, snap

GROUP = "scheduling.x-k8s.io/pod-group"


def test_fewest_victims_then_lowest_priority() -> None:
    s = snap(
        knode("a"),
        knode("b"),
        knode("c"),
        # a: two 4-GPU pods (2 victims needed); b: one 8-GPU pod priority 5; c: one 8-GPU pod priority 1
        kpod("a1", gpus=4, node="a", priority=1),
        kpod("a2", gpus=4, node="a", priority=1),
        kpod("b1", gpus=8, node="b", priority=5),
        kpod("c1", gpus=8, node="c", priority=1),
    )
    sched = Scheduler.from_snapshot(s)
    result = sched.plan([pod("urgent", gpus=8, priority=100)], {})
    assert [e.pod for e in result.evictions] == ["default/c1"]
    assert result.placements[0].node == "c"
    assert result.evictions[0].reason == "preempted by default/urgent"


def test_reprieve_keeps_victims_that_are_not_needed() -> None:
    s = snap(
        knode("a"),
        kpod("p1", gpus=2, node="a", priority=1),
        kpod("p2", gpus=2, node="a", priority=2),
        kpod("p3", gpus=2, node="a", priority=3),
        kpod("p4", gpus=2, node="a", priority=4),
    )
    result = Scheduler.from_snapshot(s).plan([pod("hi", gpus=4, priority=10)], {})
    assert sorted(e.pod for e in result.evictions) == ["default/p1", "default/p2"]


def test_equal_or_higher_priority_is_never_preempted() -> None:
    s = snap(knode("a"), kpod("same", gpus=8, node="a", priority=10))
    result = Scheduler.from_snapshot(s).plan([pod("p", gpus=1, priority=10)], {})
    assert result.evictions == [] and result.placements == []
    never = pod("q", gpus=1, priority=100, preemptionPolicy="Never")
    assert Scheduler.from_snapshot(s).plan([never], {}).evictions == []


def test_evicting_a_gang_member_evicts_the_gang() -> None:
    s = snap(
        knode("a"),
        knode("b"),
        knode("c"),
        knode("d"),
        kpod("g-0", gpus=8, node="a", priority=1, labels={GROUP: "g"}),
        kpod("g-1", gpus=8, node="b", priority=1, labels={GROUP: "g"}),
        kpod("g-2", gpus=8, node="d", priority=1, labels={GROUP: "g"}),
        kpod("x", gpus=4, node="c", priority=1),
        kpod("y", gpus=4, node="c", priority=1),
    )
    sched = Scheduler.from_snapshot(s)
    result = sched.plan([pod("hi", gpus=8, priority=100)], {})
    # Node a looks like one victim, but g-0 brings its gang (3 pods); node c costs 2 pods.
    assert sorted(e.pod for e in result.evictions) == ["default/x", "default/y"]
    assert result.placements[0].node == "c"
    s2 = snap(
        knode("a"),
        knode("b"),
        knode("c"),
        kpod("g-0", gpus=8, node="a", priority=1, labels={GROUP: "g"}),
        kpod("g-1", gpus=8, node="b", priority=1, labels={GROUP: "g"}),
        kpod("g-2", gpus=8, node="c", priority=1, labels={GROUP: "g"}),
    )
    result2 = Scheduler.from_snapshot(s2).plan([pod("hi", gpus=8, priority=100)], {})
    assert sorted(e.pod for e in result2.evictions) == ["default/g-0", "default/g-1", "default/g-2"]


def test_gang_preemptor_evicts_nothing_if_it_still_cannot_fit() -> None:
    s = snap(
        knode("a"),
        knode("b"),
        knode("c"),
        kpod("low", gpus=8, node="a", priority=1),
        kpod("high-1", gpus=8, node="b", priority=1000),
        kpod("high-2", gpus=8, node="c", priority=1000),
    )
    sched = Scheduler.from_snapshot(s)
    members = [pod(f"g-{i}", gpus=8, priority=100, labels={GROUP: "g"}) for i in range(2)]
    result = sched.plan(members, {"default/g": Gang("default/g", 2)})
    assert result.evictions == [] and result.placements == []
    assert set(sched.state.placed) == {"default/low", "default/high-1", "default/high-2"}
    # with a third node free of high-priority work, the gang preempts exactly what it needs
    s2 = snap(
        knode("a"),
        knode("b"),
        knode("c"),
        kpod("low", gpus=8, node="a", priority=1),
        kpod("low-2", gpus=8, node="b", priority=1),
        kpod("high-2", gpus=8, node="c", priority=1000),
    )
    result2 = Scheduler.from_snapshot(s2).plan(members, {"default/g": Gang("default/g", 2)})
    assert sorted(e.pod for e in result2.evictions) == ["default/low", "default/low-2"]
    assert sorted(p.node for p in result2.placements) == ["a", "b"]


def test_preemption_not_helpful_when_filters_reject() -> None:
    s = snap(knode("a", labels={"pool": "x"}), kpod("low", gpus=8, node="a", priority=1))
    result = Scheduler.from_snapshot(s).plan([pod("p", gpus=8, priority=100, nodeSelector={"pool": "y"})], {})
    assert result.evictions == []
    assert result.failures[0].message == (
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    never = pod("n", gpus=16, preemptionPolicy="Never")
    assert (
        Scheduler.from_snapshot(s)
        .plan([never], {})
        .failures[0]
        .message.endswith("preemption: not eligible due to preemptionPolicy=Never.")
    )
