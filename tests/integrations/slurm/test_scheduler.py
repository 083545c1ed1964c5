"""Job -> sbatch translation, and submitting to a live Slurm: the job lands with its GPUs in CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.integrations.slurm.scheduler import SlurmScheduler, resolve_gres_type, sbatch_args
from gpufleet.model.workload import TrainingJob
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401


def test_sbatch_args_for_a_training_job() -> None:
    job = TrainingJob(name="llm", nodes=["a", "b"], gpus_per_node=8, excluded_nodes=["bad-1"])
    args = sbatch_args(job, "python train.py", "h100", partition="gpu", output="/tmp/%j.out")
    assert args[:2] == ["sbatch", "--parsable"]
    assert "--gres=gpu:h100:8" in args and "--nodes=2" in args and "--ntasks-per-node=1" in args
    assert "--exclude=bad-1" in args and "--partition=gpu" in args and "--requeue" in args
    assert args[-2:] == ["--wrap", "python train.py"]
    with pytest.raises(UserError):
        sbatch_args(TrainingJob(name="x", nodes=[], gpus_per_node=0), "true", "h100")


def test_gres_type_names_follow_the_site() -> None:
    assert resolve_gres_type("h100-sxm", {"h100", "a100"}) == "h100"
    assert resolve_gres_type("h100-sxm", {"nvidia_h100_80gb_hbm3"}) == "nvidia_h100_80gb_hbm3"
    assert resolve_gres_type("a100", {"a100"}) == "a100"
    with pytest.raises(UserError, match="cannot tell"):
        resolve_gres_type("b200", {"h100"})


@pytest.mark.real
def test_gres_and_node_state_from_real_slurm(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    sched = SlurmScheduler(slurm_cluster.runner)
    nodes = {n.name: n for n in sched.nodes()}
    assert all(n.gpu_type == "h100" and n.gpus == 8 and n.gpus_free == 8 for n in nodes.values())
    slurm_cluster.scontrol("update", "NodeName=gpu-01", "State=DRAIN", "Reason=maintenance")
    try:
        n = {n.name: n for n in sched.nodes()}["gpu-01"]
        assert not n.available and n.gpus_free == 0 and "DRAIN" in n.state and n.reason == "maintenance"
    finally:
        slurm_cluster.scontrol("update", "NodeName=gpu-01", "State=RESUME")
    assert sched.gpu_types() == {"h100"}


@pytest.mark.real
def test_submitted_job_lands_with_cuda_visible_devices(slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    sched = SlurmScheduler(slurm_cluster.runner)
    out = slurm_cluster.jobs_dir / "gres-%j.out"
    job = TrainingJob(name="gres-check", nodes=["x"], gpus_per_node=3, excluded_nodes=["gpu-01"])
    job_id = sched.submit(
        job,
        'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"; sleep 20',
        model="h100-sxm",
        output=str(out),
        workdir=str(slurm_cluster.jobs_dir),
    )
    slurm_cluster.wait_for(lambda: sched.job(job_id).state == "RUNNING", "job to run")
    running = sched.job(job_id)
    assert running.gres[0].type == "h100" and running.gres[0].count == 3
    [node] = running.nodes
    assert node != "gpu-01"
    used = {n.name: n for n in sched.nodes()}[node]
    assert used.gpus_used == 3 and used.gpus_free == 5
    path = slurm_cluster.jobs_dir / f"gres-{job_id}.out"
    slurm_cluster.wait_for(lambda: path.exists() and path.read_text().strip() != "", "job output")
    assert path.read_text().split() == [node, "0,1,2"]
    sched.cancel(job_id)
    slurm_cluster.reset_nodes()
