"""The compiled FGD kernels give the numpy path's bits: the same fragmentation, deltas and GPU choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.sched.replay import kernels
from gpufleet.sched.replay.frag import FragModel, TypicalPods
from gpufleet.sched.replay.openb import load_trace
from gpufleet.sched.replay.policies.fgd import FGD, SCORE_STEPS, fgd_score
from gpufleet.sched.replay.state import PodRequest, ReplayCluster, pod_requests


def random_states(cluster: ReplayCluster, k: int, seed: int) -> ReplayCluster:
    """``k`` nodes of the trace's cluster with random free CPU, memory and GPU shares."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(len(cluster), size=k)
    out = ReplayCluster(
        names=tuple(f"s{i}" for i in range(k)),
        models=cluster.models,
        model_idx=cluster.model_idx[idx],
        cpu_cap=cluster.cpu_cap[idx],
        mem_cap=cluster.mem_cap[idx],
        num_gpu=cluster.num_gpu[idx],
        cpu_free=rng.integers(0, cluster.cpu_cap[idx] + 1),
        mem_free=rng.integers(0, cluster.mem_cap[idx] + 1),
        gpu_free=np.where(
            cluster.gpu_exists[idx], rng.choice([0, 100, 250, 500, 600, 1000], size=(k, cluster.gpu_free.shape[1])), 0
        ),
        gpu_exists=cluster.gpu_exists[idx],
        version=np.ones(k, dtype=np.int64),
        affinity=np.zeros((k, cluster.affinity.shape[1]), dtype=np.int64),
        name_rank=np.arange(k),
    )
    return out


@pytest.fixture(scope="module")
def trace(openb: Path) -> tuple[ReplayCluster, list[PodRequest], object]:
    nodes, pods = load_trace(openb)
    return ReplayCluster.from_nodes(nodes), pod_requests(pods), pods


@pytest.mark.parametrize("memory", [False, True])
def test_fragmentation_is_bit_identical(trace: tuple[ReplayCluster, list[PodRequest], object], memory: bool) -> None:
    cluster, _, pods = trace
    model = FragModel(TypicalPods.from_pods(pods, 100.0 if memory else 95.0, with_memory=memory), cluster.models)  # type: ignore[arg-type]
    s = random_states(cluster, 4000, seed=3)
    numpy_frag = model.frag(s.cpu_free, s.gpu_free, s.model_idx, s.mem_free)
    compiled = kernels.frag_rows(model.kernel_args(), s.cpu_free, s.mem_free, s.gpu_free, s.model_idx)
    assert np.array_equal(numpy_frag, compiled)


@pytest.mark.parametrize("policy", ["fgd", "fgd-plus"])
def test_deltas_and_sharing_gpu_match_the_numpy_path(
    trace: tuple[ReplayCluster, list[PodRequest], object], policy: str
) -> None:
    from gpufleet.sched.replay.policies import make_policy

    cluster, requests, pods = trace
    s = random_states(cluster, 600, seed=5)
    fgd = make_policy(policy)
    assert isinstance(fgd, FGD)
    fgd.prepare(s, pods)  # type: ignore[arg-type]
    # one pod of every shape in the trace: CPU-only, sharing, whole and multi-GPU, with and without a GPU spec
    shapes = {(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec): p for p in requests}
    checked = 0
    for pod in list(shapes.values())[:120]:
        ref_delta, ref_gpu = fgd.deltas(s, pod)
        delta, gpu = fgd.row_deltas(s, pod)
        assert np.array_equal(fgd_score(delta), fgd_score(ref_delta)), pod
        if not pod.is_sharing:
            assert np.array_equal(delta, ref_delta), pod
        else:
            fits = ref_gpu >= 0
            assert np.array_equal(gpu[fits], ref_gpu[fits]), pod
        checked += 1
    assert checked == min(120, len(shapes))


def test_score_steps_give_the_sigmoid_integer_score() -> None:
    delta = np.random.default_rng(1).uniform(-9000, 9000, 200_000)
    with np.errstate(over="ignore"):
        expected = np.floor(100 / (1 + np.exp(-delta / 1000)))
    assert np.array_equal(fgd_score(delta), expected)
    assert len(SCORE_STEPS) == 99 and fgd_score(np.array([-np.inf]))[0] == -np.inf
