"""The placement engine makes the reference path's decisions, over classes that do not grow with the fleet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.sched.replay.engine import ReplayEngine
from gpufleet.sched.replay.frag import FragModel, FragTracker, TypicalPods
from gpufleet.sched.replay.openb import NodeList, PodList, load_trace
from gpufleet.sched.replay.policies import POLICIES, make_policy
from gpufleet.sched.replay.runner import replay
from gpufleet.sched.replay.state import PodRequest, ReplayCluster, pod_requests
from tests.sched.replay_helpers import make_cluster


def decisions(result: object) -> list[tuple[int, tuple[int, ...]] | None]:
    return [(p.node, p.gpus) if p is not None else None for p in result.placements]  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_engine_places_every_pod_of_the_trace_where_the_reference_does(openb: Path, policy: str) -> None:
    nodes, pods = load_trace(openb)
    fast = replay(nodes, pods, policy, seed=42)
    reference = replay(nodes, pods, policy, seed=42, reference=True)
    assert len(fast.placements) == len(reference.placements) > 10_000
    assert decisions(fast) == decisions(reference)
    assert fast.alloc_pct == reference.alloc_pct
    # the KPI's fragmentation is kept per class and summed incrementally: equal up to rounding
    assert np.allclose(fast.frag_curve, reference.frag_curve, rtol=0, atol=1e-9)


def test_fgd_plus_matches_the_reference_on_another_seed(openb: Path) -> None:
    nodes, pods = load_trace(openb)
    assert decisions(replay(nodes, pods, "fgd-plus", seed=47)) == decisions(
        replay(nodes, pods, "fgd-plus", seed=47, reference=True)
    )


def identical_nodes(n: int) -> NodeList:
    return NodeList(
        names=tuple(f"n{i:05d}" for i in range(n)),
        cpu_milli=np.full(n, 128000),
        memory_mib=np.full(n, 1 << 20),
        num_gpu=np.full(n, 8),
        model=("H100",) * n,
    )


def whole_gpu_pods(n: int) -> PodList:
    gpus = np.array([1, 1, 2, 4, 8, 1, 2, 1])[np.arange(n) % 8]
    return PodList(
        names=tuple(f"p{i:05d}" for i in range(n)),
        cpu_milli=gpus * 4000,
        memory_mib=gpus * 16384,
        num_gpu=gpus,
        gpu_milli=np.full(n, 1000),
        gpu_spec=("",) * n,
        qos=("LS",) * n,
    )


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "fgd"])
def test_classes_a_decision_reads_do_not_grow_with_the_fleet(policy: str) -> None:
    pods = whole_gpu_pods(600)
    seen = []
    for n in (400, 4000):
        cluster = ReplayCluster.from_nodes(identical_nodes(n))
        chosen = make_policy(policy)
        chosen.prepare(cluster, pods)
        engine = ReplayEngine(cluster, chosen)
        rng = np.random.default_rng(0)
        most_active = 0
        for pod in pod_requests(pods):
            assert engine.schedule(pod, rng) is not None
            most_active = max(most_active, engine.classes.n_active)
        seen.append((len(engine.classes), most_active))
    # ten times the nodes, the same pods: the same classes (idle nodes are one class however many)
    assert seen[0] == seen[1]
    assert seen[0][1] < 50


def test_ties_go_by_the_run_order_and_first_fit_by_node_index() -> None:
    cluster = make_cluster([("a", 32000, 1000, 2, "T4"), ("b", 32000, 1000, 2, "T4"), ("c", 32000, 1000, 2, "T4")])
    cluster.name_rank = np.array([2, 0, 1])
    pod = PodRequest(1000, 0, 1, 1000)
    best = make_policy("best-fit")
    assert ReplayEngine(cluster, best).choose(pod, np.random.default_rng(0)).node == 1  # type: ignore[union-attr]
    first = make_policy("first-fit")
    assert ReplayEngine(cluster, first).choose(pod, np.random.default_rng(0)).node == 0  # type: ignore[union-attr]


def test_a_pod_that_fits_nowhere_changes_nothing() -> None:
    cluster = make_cluster([("a", 4000, 1000, 2, "T4")])
    engine = ReplayEngine(cluster, make_policy("best-fit"))
    assert engine.schedule(PodRequest(8000, 0, 1, 1000), np.random.default_rng(0)) is None
    assert engine.schedule(PodRequest(1000, 0, 3, 1000), np.random.default_rng(0)) is None
    assert int(cluster.version[0]) == 0 and engine.classes.n_active == 1


def test_tracked_fragmentation_follows_every_placement(openb: Path) -> None:
    nodes, pods = load_trace(openb)
    cluster = ReplayCluster.from_nodes(nodes)
    policy = make_policy("fgd")
    policy.prepare(cluster, pods)
    engine = ReplayEngine(cluster, policy)
    model = FragModel(TypicalPods.from_pods(pods), cluster.models)
    k = engine.track_frag(model)
    rng = np.random.default_rng(3)
    for pod in pod_requests(pods)[:1500]:
        engine.schedule(pod, rng)
    assert engine.frag_total[k] == pytest.approx(FragTracker(model, cluster).total, rel=1e-12)
