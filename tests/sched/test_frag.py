"""FGD fragmentation on hand-computed examples, typical-pod selection, and the incremental tracker."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.sched.replay.frag import FragModel, FragTracker, TypicalPods
from gpufleet.sched.replay.openb import PodList
from gpufleet.sched.replay.state import PodRequest, ReplayPlacement
from tests.sched.replay_helpers import make_cluster, set_free


def typical() -> TypicalPods:
    # t1: 4 cores + 500m of a GPU (p 0.5); t2: CPU-only, 2 cores (p 0.25); t3: 8 cores + 2 whole GPUs (p 0.25)
    return TypicalPods(
        cpu_milli=np.array([4000, 2000, 8000]),
        gpu_milli=np.array([500, 0, 1000]),
        num_gpu=np.array([1, 0, 2]),
        gpu_spec=("", "", ""),
        weight=np.array([0.5, 0.25, 0.25]),
    )


def frag_of(cpu: int, gpus: list[int], model: str = "T4", tp: TypicalPods | None = None) -> float:
    models = ("T4", "V100M16")
    fm = FragModel(tp or typical(), models)
    return float(fm.frag(np.array([cpu]), np.array([gpus]), np.array([models.index(model)]))[0])


def test_hand_computed_fragmentation() -> None:
    # free GPUs [1000, 700, 300, 0] = 2000m, 6 cores free
    # t1 fits (two GPUs have >= 500, CPU ok): only GPUs below 500 are fragment: 300 -> 0.5 * 300 = 150
    # t2 needs no GPU: every free GPU share is fragment to it: 0.25 * 2000 = 500
    # t3 lacks CPU (8 > 6 cores): all free share is fragment: 0.25 * 2000 = 500
    assert frag_of(6000, [1000, 700, 300, 0]) == pytest.approx(1150.0)
    # with 10 cores t3 still lacks GPUs (one idle GPU, needs two): unchanged
    assert frag_of(10000, [1000, 700, 300, 0]) == pytest.approx(1150.0)
    # two idle GPUs, 10 cores: t1 150, t2 0.25 * 2300 = 575, t3 fits, fragment = GPUs below 1000 = 300 -> 75
    assert frag_of(10000, [1000, 1000, 300, 0]) == pytest.approx(800.0)


def test_gpu_spec_mismatch_makes_everything_fragment() -> None:
    tp = TypicalPods(
        cpu_milli=np.array([1000]),
        gpu_milli=np.array([500]),
        num_gpu=np.array([1]),
        gpu_spec=("V100M16",),
        weight=np.array([1.0]),
    )
    assert frag_of(8000, [1000, 1000], "T4", tp) == pytest.approx(2000.0)
    assert frag_of(8000, [1000, 300], "V100M16", tp) == pytest.approx(300.0)


def test_typical_pods_follow_popularity_threshold() -> None:
    # 6 x A, 3 x B, 1 x C: 60% threshold keeps A only; 90% keeps A and B (renormalised 6/9, 3/9)
    cpu = [1000] * 6 + [2000] * 3 + [3000]
    pods = PodList(
        names=tuple(f"p{i}" for i in range(10)),
        cpu_milli=np.array(cpu),
        memory_mib=np.zeros(10, dtype=np.int64),
        num_gpu=np.array([1] * 9 + [0]),
        gpu_milli=np.array([500] * 9 + [0]),
        gpu_spec=("",) * 10,
        qos=("",) * 10,
    )
    assert TypicalPods.from_pods(pods, 60).cpu_milli.tolist() == [1000]
    tp = TypicalPods.from_pods(pods, 90)
    assert tp.cpu_milli.tolist() == [1000, 2000]
    assert tp.weight.tolist() == pytest.approx([6 / 9, 3 / 9])
    assert len(TypicalPods.from_pods(pods, 100)) == 3


def test_tracker_recomputes_only_the_changed_node() -> None:
    c = make_cluster([("a", 16000, 1000, 4, "T4"), ("b", 16000, 1000, 4, "T4")])
    model = FragModel(typical(), c.models)
    tracker = FragTracker(model, c)
    before_b = tracker.values[1]
    c.place(PodRequest(2000, 0, 1, 700), ReplayPlacement(0, (2,)))
    assert tracker.values[1] == before_b
    assert tracker.values[0] == pytest.approx(model.node_frag(c)[0])
    set_free(c, 1, 1000, [0, 0, 0, 0])  # bypasses place(): the tracker only follows placements
    assert tracker.values[1] == before_b
