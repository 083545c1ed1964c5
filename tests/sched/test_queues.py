"""Queues: guaranteed quota, borrowing of idle quota, and reclaim when the lender needs it back."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.sched.framework.queues import QueueBook, QueueSpec, load_queues
from gpufleet.sched.framework.scheduler import Scheduler
from tests.sched.k8s_objects import knode, pod, snap

Q = "kueue.x-k8s.io/queue-name"


def _book() -> QueueBook:
    return QueueBook.of(
        [
            QueueSpec(name="research", guaranteed={"nvidia.com/gpu": 16}),
            QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 16}),
            QueueSpec(name="strict", guaranteed={"nvidia.com/gpu": 8}, borrowing=False),
        ]
    )


def test_borrowing_idle_quota_then_reclaim() -> None:
    s = snap(*(knode(f"n{i}") for i in range(5)))  # 40 GPUs; guarantees sum to 40
    sched = Scheduler.from_snapshot(s)
    book = _book()
    research = [pod(f"r{i}", gpus=8, labels={Q: "research"}) for i in range(4)]
    first = sched.plan(research, {}, queues=book)
    # 16 guaranteed + 16 borrowed from prod's idle quota (strict's 8 idle too, but the nodes hold 5 x 8)
    assert len(first.placements) == 4
    assert book.used("research", "nvidia.com/gpu") == 32 and book.is_borrowing("research")

    # prod wants its guarantee back: the cluster has 8 GPUs free; the second pod reclaims a borrowed one
    prod = [pod(f"p{i}", gpus=8, labels={Q: "prod"}) for i in range(2)]
    second = sched.plan(prod, {}, queues=book)
    assert len(second.placements) == 2
    assert len(second.evictions) == 1 and second.evictions[0].pod.startswith("default/r")
    assert book.used("research", "nvidia.com/gpu") == 24
    assert book.used("prod", "nvidia.com/gpu") == 16


def test_borrowing_is_bounded_by_idle_quota() -> None:
    s = snap(*(knode(f"n{i}") for i in range(8)))  # plenty of nodes: quota is the limit
    sched = Scheduler.from_snapshot(s)
    book = _book()
    pods = [pod(f"r{i}", gpus=8, labels={Q: "research"}) for i in range(6)]
    result = sched.plan(pods, {}, queues=book)
    # 16 own + 24 idle (prod 16 + strict 8) = 40 GPUs = 5 pods; the sixth is held by quota
    assert len(result.placements) == 5
    assert result.failures[-1].message == "queue research: no idle nvidia.com/gpu quota left to borrow"


def test_non_borrowing_queue_and_limits() -> None:
    book = QueueBook.of(
        [
            QueueSpec(name="strict", guaranteed={"nvidia.com/gpu": 8}, borrowing=False),
            QueueSpec(name="capped", guaranteed={"nvidia.com/gpu": 8}, limit={"nvidia.com/gpu": 12}),
        ]
    )
    sched = Scheduler.from_snapshot(snap(*(knode(f"n{i}") for i in range(4))))
    result = sched.plan([pod(f"s{i}", gpus=8, labels={Q: "strict"}) for i in range(2)], {}, queues=book)
    assert len(result.placements) == 1
    assert "may not borrow" in result.failures[0].message
    capped = sched.plan([pod(f"c{i}", gpus=8, labels={Q: "capped"}) for i in range(2)], {}, queues=book)
    assert len(capped.placements) == 1 and "exceed its limit of 12" in capped.failures[0].message


def test_in_quota_pod_does_not_reclaim_from_queues_within_their_guarantee() -> None:
    s = snap(knode("a"), knode("b"))
    sched = Scheduler.from_snapshot(s)
    book = QueueBook.of(
        [QueueSpec(name="x", guaranteed={"nvidia.com/gpu": 8}), QueueSpec(name="y", guaranteed={"nvidia.com/gpu": 16})]
    )
    assert len(sched.plan([pod("y0", gpus=8, labels={Q: "y"})], {}, queues=book).placements) == 1
    assert len(sched.plan([pod("x0", gpus=8, labels={Q: "x"})], {}, queues=book).placements) == 1
    # y is within its 16 guarantee and the cluster is full: x0 is not borrowing, so nothing can be reclaimed
    late = sched.plan([pod("y1", gpus=8, labels={Q: "y"})], {}, queues=book)
    assert late.evictions == [] and late.placements == []


def test_queue_config_errors() -> None:
    with pytest.raises(UserError):
        load_queues([{"name": "q", "guarenteed": {}}])
    assert "q" in load_queues([{"name": "q", "guaranteed": {"nvidia.com/gpu": 4}}]).specs
