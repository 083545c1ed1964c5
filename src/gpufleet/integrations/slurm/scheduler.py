"""Slurm as a live scheduler backend: translate a training job into `sbatch --gres=gpu:<type>:<n>`, submit it, and
read GPU capacity (GRES, GRES in use) and node state back from `scontrol`."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import BackendError, UserError
from gpufleet.integrations.slurm.client import SlurmJob, SlurmRunner, gpu_count
from gpufleet.model.workload import TrainingJob


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """What the scheduler needs to know of one Slurm node."""

    name: str
    gpu_type: str
    gpus: int
    gpus_used: int
    state: str
    available: bool
    reason: str

    @property
    def gpus_free(self) -> int:
        return self.gpus - self.gpus_used if self.available else 0


def resolve_gres_type(model: str, available: set[str]) -> str:
    """The GRES type name a site uses for a GPU model: sites name them freely (h100, h100_80gb,
    nvidia_h100_80gb_hbm3 with AutoDetect=nvml), so match the model's family token ('h100' of 'h100-sxm')."""
    if model in available:
        return model
    family = model.lower().split("-")[0]
    found = sorted(t for t in available if family in t.lower().replace("nvidia_", "").split("_")[0])
    if len(found) == 1:
        return found[0]
    raise UserError(
        f"cannot tell which Slurm GPU type is {model!r}: the cluster has {', '.join(sorted(available)) or 'no GPUs'}",
        fix="pass the GRES type explicitly",
    )


def sbatch_args(
    job: TrainingJob,
    command: str,
    gpu_type: str,
    *,
    node_count: int | None = None,
    partition: str | None = None,
    output: str | None = None,
    workdir: str | None = None,
) -> list[str]:
    """The sbatch argv for a training job: one task per node on `node_count` nodes (default: as many as the job
    names), `--gres=gpu:<type>:<gpus_per_node>` on each node, its excluded nodes as `--exclude`, requeue allowed
    (remediation requeues jobs off broken nodes)."""
    if job.gpus_per_node < 1:
        raise UserError(f"job {job.name!r} asks for {job.gpus_per_node} GPUs per node", fix="ask for at least 1")
    if not command.strip():
        raise UserError(f"job {job.name!r} has no command to run")
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={job.name}",
        f"--nodes={node_count or max(len(job.nodes), 1)}",
        "--ntasks-per-node=1",
        f"--gres=gpu:{gpu_type}:{job.gpus_per_node}",
        "--requeue",
    ]
    if job.priority:
        args.append(f"--nice={-job.priority}")
    if job.excluded_nodes:
        args.append(f"--exclude={','.join(job.excluded_nodes)}")
    if partition:
        args.append(f"--partition={partition}")
    if output:
        args.append(f"--output={output}")
    if workdir:
        args.append(f"--chdir={workdir}")
    args += ["--wrap", command]
    return args


class SlurmScheduler:
    def __init__(self, runner: SlurmRunner | None = None) -> None:
        self.runner = runner or SlurmRunner()

    def nodes(self) -> list[NodeGpus]:
        out = []
        for n in self.runner.nodes():
            types = sorted({g.type or "" for g in n.gres if g.name == "gpu"})
            out.append(
                NodeGpus(
                    name=n.name,
                    gpu_type=",".join(t for t in types if t),
                    gpus=gpu_count(n.gres),
                    gpus_used=gpu_count(n.gres_used),
                    state=str(n.state),
                    available=n.state.available,
                    reason=n.reason,
                )
            )
        return out

    def gpu_types(self) -> set[str]:
        return {t for n in self.nodes() for t in n.gpu_type.split(",") if t}

    def submit(
        self,
        job: TrainingJob,
        command: str,
        *,
        gpu_type: str | None = None,
        model: str | None = None,
        node_count: int | None = None,
        partition: str | None = None,
        output: str | None = None,
        workdir: str | None = None,
    ) -> str:
        """Submit; returns the Slurm job id. The GRES type is `gpu_type`, else resolved from `model`, else the
        cluster's only GPU type."""
        if gpu_type is None:
            types = self.gpu_types()
            if model is not None:
                gpu_type = resolve_gres_type(model, types)
            elif len(types) == 1:
                gpu_type = next(iter(types))
            else:
                raise UserError(
                    f"the cluster has GPU types {', '.join(sorted(types)) or '(none)'}", fix="pass gpu_type or model"
                )
        argv = sbatch_args(
            job, command, gpu_type, node_count=node_count, partition=partition, output=output, workdir=workdir
        )
        out = self.runner.run(argv)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch printed no job id: {out.strip()[:200]!r}")
        return job_id

    def job(self, job_id: str) -> SlurmJob:
        found = self.runner.jobs(job_id)
        if not found:
            raise BackendError(f"Slurm has no job {job_id}")
        return found[0]

    def cancel(self, job_id: str) -> None:
        self.runner.run(["scancel", job_id])
