"""Fault schedules: the faults a scenario lists, and random campaigns expanded reproducibly from a seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.errors import ManifestError
from gpufleet.model import Cluster, InferenceService, Node, TrainingJob
from gpufleet.spec.scenario_spec import (
    GPU_FAULTS,
    INFRASTRUCTURE_FAULTS,
    JOB_FAULTS,
    NODE_FAULTS,
    PORT_FAULTS,
    SERVICE_FAULTS,
    TRAINING_APP_FAULTS,
    VENDOR_FAULTS,
    CampaignSpec,
    FaultSpec,
    FaultType,
    fault_fits_vendor,
)

# Faults that heal by themselves after a while unless a duration is given.
DEFAULT_DURATION_S = {
    FaultType.power_brake: 900.0,
    FaultType.link_flap: 600.0,
    FaultType.straggler: 3600.0,
    FaultType.error_burst: 600.0,
    FaultType.traffic_ramp: 1800.0,
}


@dataclass(slots=True)
class InjectedFault:
    """Ground truth: what was injected, when and where. Detectors are scored against these."""

    id: int
    type: FaultType
    time: float
    node: str | None = None
    gpu: int | None = None
    rail: int | None = None
    job: str | None = None
    rank: int | None = None
    duration: float | None = None
    code: int | None = None
    factor: float | None = None
    effects: list[str] = field(default_factory=list)  # what followed: "job train-3 hung", ...
    service: str | None = None
    block: str | None = None  # the RAS block of a `ras-error` on an AMD GPU

    @property
    def target(self) -> str:
        if self.service is not None:
            return f"service/{self.service}"
        if self.job is not None:
            return f"job/{self.job}" + (f"/rank{self.rank}" if self.rank is not None else "")
        if self.gpu is not None:
            return f"{self.node}/gpu{self.gpu}"
        if self.rail is not None:
            return f"{self.node}/mlx5_{self.rail}"
        return f"{self.node}"

    @property
    def label(self) -> str:
        return f"{self.type.value}" + (f" {self.code}" if self.code is not None else "")


def from_specs(
    specs: list[FaultSpec],
    cluster: Cluster,
    jobs: list[TrainingJob],
    source: str,
    services: Sequence[InferenceService] = (),
) -> list[InjectedFault]:
    nodes = {n.name: n for n in cluster.nodes}
    job_names = {j.name: j for j in jobs}
    service_names = {s.name for s in services}
    out = []
    for i, spec in enumerate(sorted(specs, key=lambda s: s.at)):
        where = f"spec.faults ({spec.type.value} at {spec.at:g}s)"
        if spec.node is not None:
            node = nodes.get(spec.node)
            if node is None:
                raise ManifestError(source, f"{where}: no node named {spec.node!r}", fix="use a node of the cluster")
            if spec.gpu is not None and spec.gpu >= len(node.gpus):
                raise ManifestError(source, f"{where}: node {spec.node} has {len(node.gpus)} GPUs, no GPU {spec.gpu}")
            if spec.rail is not None and spec.rail >= len(node.nics):
                raise ManifestError(source, f"{where}: node {spec.node} has {len(node.nics)} NICs, no rail {spec.rail}")
            if not fault_fits_vendor(spec.type, node.gpu_vendor):
                allowed = ", ".join(sorted(VENDOR_FAULTS[spec.type]))
                raise ManifestError(
                    source,
                    f"{where}: node {spec.node} has {node.gpu_vendor or 'no'} accelerators; "
                    f"{spec.type.value!r} is a fault of {allowed} devices",
                    fix=_vendor_fix(spec.type),
                )
        if spec.job is not None:
            job = job_names.get(spec.job)
            if job is None:
                known = ", ".join(sorted(job_names)) or "none"
                raise ManifestError(source, f"{where}: no training job named {spec.job!r}", fix=f"jobs: {known}")
            if spec.rank is not None and spec.rank >= job.world_size:
                raise ManifestError(source, f"{where}: job {spec.job} has {job.world_size} ranks")
        if spec.service is not None and spec.service not in service_names:
            known = ", ".join(sorted(service_names)) or "none"
            raise ManifestError(
                source, f"{where}: no inference service named {spec.service!r}", fix=f"services: {known}"
            )
        out.append(
            InjectedFault(
                id=i,
                type=spec.type,
                time=spec.at,
                node=spec.node,
                gpu=spec.gpu,
                rail=spec.rail,
                job=spec.job,
                rank=spec.rank,
                duration=spec.duration or DEFAULT_DURATION_S.get(spec.type),
                code=spec.code,
                factor=spec.factor,
                service=spec.service,
                block=spec.block,
            )
        )
    return out


def _vendor_fix(fault: FaultType) -> str:
    if fault is FaultType.xid:
        return "on AMD or Gaudi devices use ras-error, gpu-hang, ecc-dbe or gpu-off-bus (their drivers print no Xid)"
    if fault is FaultType.ras_error:
        return "on NVIDIA GPUs use xid (e.g. code 48, 13) or ecc-dbe"
    return "target a node of the vendor the fault belongs to"


def expand_campaign(
    campaign: CampaignSpec,
    cluster: Cluster,
    jobs: list[TrainingJob],
    duration: float,
    first_id: int,
    services: Sequence[InferenceService] = (),
) -> list[InjectedFault]:
    """`per_type` faults of each type at random times, each on a different node, job faults on their own jobs.

    Job faults get jobs no other fault touches, service faults services of their own, and hardware faults land on
    nodes outside those jobs, so every injected fault has exactly one root cause to find.
    """
    rng = np.random.default_rng(campaign.seed)
    vendors = {n.gpu_vendor for n in cluster.nodes if n.gpus}
    if campaign.types == "all":  # the infrastructure faults this cluster's accelerators can have
        types = [t for t in INFRASTRUCTURE_FAULTS if any(fault_fits_vendor(t, v) for v in vendors)]
    else:
        types = list(campaign.types)
    end = campaign.end if campaign.end is not None else max(campaign.start + 1.0, duration - 1800.0)
    job_faults = [t for t in types if t in JOB_FAULTS]
    reserved: list[TrainingJob] = []
    need_jobs = len(job_faults) * campaign.per_type
    if need_jobs:
        if len(jobs) < need_jobs:
            raise ManifestError(
                "campaign",
                f"{need_jobs} job faults need as many training jobs, the workload has {len(jobs)}",
                fix="add training jobs or lower perType",
            )
        picks = rng.choice(len(jobs), size=need_jobs, replace=False)
        reserved = [jobs[int(i)] for i in picks]
    service_faults = [t for t in types if t in SERVICE_FAULTS]
    need_services = len(service_faults) * campaign.per_type
    if need_services > len(services):
        raise ManifestError(
            "campaign",
            f"{need_services} service faults need as many inference services, the workload has {len(services)}",
            fix="add inference services or lower perType",
        )
    service_picks = iter(
        [services[int(i)] for i in rng.permutation(len(services))[:need_services]] if need_services else []
    )
    reserved_nodes = {n for j in reserved for n in j.nodes}
    gpu_nodes = [n for n in cluster.nodes if n.gpus and n.name not in reserved_nodes]
    hw_types = [t for t in types if t not in JOB_FAULTS and t not in SERVICE_FAULTS]
    need_nodes = len(hw_types) * campaign.per_type
    if need_nodes > len(gpu_nodes):
        raise ManifestError(
            "campaign",
            f"{need_nodes} hardware faults need as many distinct GPU nodes, {len(gpu_nodes)} are free of job faults",
            fix="use a larger cluster or lower perType",
        )
    # An idle GPU is one a workload holds without using: it lands on nodes outside the training jobs (a job's
    # rank that idles is a hang, which has its own fault).
    in_jobs = {n for j in jobs for n in j.nodes}
    idle_count = campaign.per_type if FaultType.idle_gpu in hw_types else 0
    order = [int(i) for i in rng.permutation(len(gpu_nodes))]
    idle_nodes = [i for i in order if gpu_nodes[i].name not in in_jobs][:idle_count]
    if len(idle_nodes) < idle_count:
        raise ManifestError(
            "campaign",
            f"{idle_count} idle-gpu faults need GPU nodes outside the training jobs; {len(idle_nodes)} are free",
            fix="lower autoTrainingFill so some nodes stay out of jobs",
        )
    node_picks = [i for i in order if i not in idle_nodes]
    idle_picks = iter(idle_nodes)
    jobs_iter = iter(reserved)
    faults: list[InjectedFault] = []
    for ftype in types:
        for _ in range(campaign.per_type):
            at = float(rng.uniform(campaign.start, end))
            fault = InjectedFault(id=first_id + len(faults), type=ftype, time=round(at))
            fault.duration = DEFAULT_DURATION_S.get(ftype)
            if ftype in SERVICE_FAULTS:
                fault.service = next(service_picks).name
            elif ftype in JOB_FAULTS:
                job = next(jobs_iter)
                fault.job = job.name
                # an application fault is the whole job's (its loss, its checkpoints, its input pipeline)
                fault.rank = None if ftype in TRAINING_APP_FAULTS else int(rng.integers(job.world_size))
                fault.factor = 1.6 if ftype is FaultType.straggler else None
            else:
                node = gpu_nodes[
                    next(idle_picks) if ftype is FaultType.idle_gpu else _take(node_picks, gpu_nodes, ftype)
                ]
                fault.node = node.name
                if ftype in GPU_FAULTS:
                    fault.gpu = int(rng.integers(len(node.gpus)))
                if ftype in PORT_FAULTS:
                    if not node.nics:
                        raise ManifestError("campaign", f"node {node.name} has no NIC for a {ftype.value} fault")
                    fault.rail = int(rng.integers(len(node.nics)))
                if ftype is FaultType.xid:
                    fault.code = int(rng.choice(campaign.xid_codes))
                assert ftype in GPU_FAULTS | PORT_FAULTS | NODE_FAULTS
            faults.append(fault)
    faults.sort(key=lambda f: f.time)
    return faults


def _take(picks: list[int], nodes: list[Node], fault: FaultType) -> int:
    """The next picked node whose accelerators can have this fault (an Xid needs an NVIDIA GPU)."""
    for position, i in enumerate(picks):
        if fault_fits_vendor(fault, nodes[i].gpu_vendor):
            return picks.pop(position)
    allowed = ", ".join(sorted(VENDOR_FAULTS.get(fault, ())))
    raise ManifestError(
        "campaign",
        f"no free node has {allowed} accelerators for a {fault.value} fault",
        fix="drop the fault type from the campaign, or add such nodes",
    )
