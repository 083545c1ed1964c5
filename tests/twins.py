"""Small twins for tests: `nodes` nodes of 8 GPUs and 8 rails, one training job over the first `job_nodes`."""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.model import TrainingJob
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

TwinFactory = Callable[..., Twin]


def small_twin(
    nodes: int = 3,
    job_nodes: int = 2,
    faults: list[InjectedFault] | None = None,
    seed: int = 1,
    model: str = "h100-sxm",
    restart: float | None = None,
    timeout: float = 1800.0,
) -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": nodes, "gpu": {"model": model, "count": 8}, "nics": {"count": 8}}],
            "fabric": {"leafRadix": 16},
        }
    )
    cluster = build_cluster("t", body)
    jobs = []
    if job_nodes:
        names = [f"n-{i:03d}" for i in range(job_nodes)]
        jobs.append(TrainingJob(name="job", nodes=names, gpus_per_node=8, nccl_timeout_s=timeout))
    return Twin(cluster, seed=seed, jobs=jobs, faults=faults, restart_backoff_s=restart)
