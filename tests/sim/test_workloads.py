"""Training on the twin: the per-tick shortcuts (ranks as one run of GPUs, every job running, one traffic call per
tick) give what the general path gives, and every step's traffic lands on the job's ports."""

from __future__ import annotations

import numpy as np

from gpufleet.model import JobState, TrainingJob
from gpufleet.sim.twin import Twin
from gpufleet.sim.workloads import _ranges
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody


def twin_with(jobs: list[TrainingJob], nodes: int = 4) -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "n", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"leafRadix": 16},
        }
    )
    return Twin(build_cluster("t", body), seed=4, jobs=jobs, restart_backoff_s=None)


def job(name: str, nodes: list[str], **kw: object) -> TrainingJob:
    return TrainingJob(name=name, nodes=nodes, gpus_per_node=8, model_params_b=1.0, **kw)  # type: ignore[arg-type]


def test_ranges() -> None:
    got = _ranges(np.array([5, 0, 9]), np.array([2, 0, 3]))
    assert got.tolist() == [5, 6, 9, 10, 11]
    assert _ranges(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).size == 0


def test_ranks_in_gpu_order_and_out_of_it_train_alike() -> None:
    """A job on n-000, n-001 has its ranks on GPUs 0..15 (read as a slice); on n-001, n-000 they are out of order
    (read by index). The GPUs, their noise and so every step are the same."""
    ordered, shuffled = twin_with([job("a", ["n-000", "n-001"])]), twin_with([job("a", ["n-001", "n-000"])])
    ordered.run(400)
    shuffled.run(400)
    assert isinstance(ordered.training.rank_facts.gpus, slice)  # type: ignore[union-attr]
    assert not isinstance(shuffled.training.rank_facts.gpus, slice)  # type: ignore[union-attr]
    a, b = ordered.cluster.job("a"), shuffled.cluster.job("a")
    assert a.step == b.step > 0 and a.last_step_time == b.last_step_time
    for name in ("demand_util", "demand_fb_mib", "allocated", "sm_clock", "temp_c", "energy_mj"):
        np.testing.assert_array_equal(getattr(ordered.gpus, name), getattr(shuffled.gpus, name), err_msg=name)
    np.testing.assert_array_equal(ordered.training.rank_compute_s, shuffled.training.rank_compute_s)


def test_every_step_sends_its_gradient_bytes_on_each_port_once() -> None:
    """Two jobs stepping in the same ticks: one traffic call a tick carries both, each port counting its own job's
    bytes once per step."""
    twin = twin_with([job("a", ["n-000", "n-001"]), job("b", ["n-002", "n-003"], tokens_per_step=2_000_000)])
    twin.run(300)
    ts, counters = twin.training, twin.ports.counters
    for j, name in enumerate(("a", "b")):
        steps = twin.cluster.job(name).step
        assert steps > 10
        per_step = int(ts.port_bytes_per_step[j])
        for port in ts.ports[j]:
            leaf = int(twin.ports.peer[port])
            assert counters["xmit_bytes"][port] == counters["rcv_bytes"][leaf] == steps * per_step
            assert counters["xmit_pkts"][port] == steps * (per_step // 4096)


def test_a_hung_job_leaves_the_shortcut_and_its_gpus_spin() -> None:
    """Every job running takes the shortcut; a hung one does not, and its ranks spin at 100% as NCCL's kernels do,
    while the other job's stay at the training load."""
    twin = twin_with([job("a", ["n-000", "n-001"]), job("b", ["n-002", "n-003"])])
    twin.run(30)
    assert (twin.gpus.demand_util[:32] == 97.0).all()
    twin.training.stuck[twin.gpu("n-000", 3)] = True
    twin.run(5)
    assert twin.cluster.job("a").state is JobState.hung
    util = twin.gpus.demand_util
    assert util[twin.gpu("n-000", 3)] == 0.0  # the stuck rank's own GPU goes quiet
    assert (util[:16][np.arange(16) != 3] == 100.0).all()
    assert (util[16:32] == 97.0).all()
