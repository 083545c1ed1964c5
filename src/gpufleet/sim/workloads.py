"""Training jobs and inference services running on the twin, vectorized over jobs and ranks.

A training step is compute (which runs at the speed of the slowest rank's clock, times any straggler factor) plus
an AllReduce of the gradients (NCCL's cost for this fabric). A job stops making progress when a rank's GPU is lost,
one of its rail links is down longer than InfiniBand's retry budget, or a rank's process is stuck: it is *hung*.
NCCL's watchdog then fails it `nccl_timeout_s` after its last completed step, as PyTorch's ProcessGroupNCCL does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import InferenceService, JobState, TrainingJob
from gpufleet.sim.fabric_state import PortArrays
from gpufleet.sim.gpu_state import GpuArrays

MODEL_FLOPS_UTILIZATION = 0.40
TRAINING_UTIL = 97.0
# NCCL_IB_TIMEOUT=20 (4.3 s per try) x NCCL_IB_RETRY_CNT=7: a link must stay down about 30 s to break a QP.
IB_RETRY_BUDGET_S = 30.0
LATENCY_BUCKETS_S = np.array([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])

# (gpu model, nodes, gpus per node, nics per node, nic Gb/s, transport, bytes) -> seconds
AllReduceModel = Callable[[str, int, int, int, float, str, int], float]


def alpha_beta_allreduce_s(
    gpu_model: str, nodes: int, gpus_per_node: int, nics: int, nic_gbps: float, transport: str, nbytes: int
) -> float:
    """Ring AllReduce under a latency-bandwidth model: used when no better collective model is wired in."""
    from gpufleet.catalog.gpus import get_gpu_model

    spec = get_gpu_model(gpu_model)
    ranks = nodes * gpus_per_node
    if ranks <= 1:
        return 0.0
    intra = spec.nvlink_bw_gbps if spec.nvlink_links else 12.0 * spec.pcie_gen / 3
    inter = nics * nic_gbps / 8.0 * 0.92 if nodes > 1 else float("inf")
    busbw_gbs = min(intra, inter) if nodes > 1 else intra
    latency_s = (2 * (ranks - 1)) * (5e-6 if nodes > 1 else 2e-6)
    return latency_s + nbytes * 2 * (ranks - 1) / ranks / (busbw_gbs * 1e9)


def nccl_allreduce_s(
    gpu_model: str, nodes: int, gpus_per_node: int, nics: int, nic_gbps: float, transport: str, nbytes: int
) -> float:
    """AllReduce time from NCCL's own cost model for this fabric; the latency-bandwidth model where NCCL's
    model has no answer (an undisclosed GPU, a multi-node job without NICs)."""
    from gpufleet.errors import UserError
    from gpufleet.nccl import allreduce_time_s

    if transport not in ("ib", "roce", "efa", "socket"):
        raise UserError(f"unknown transport {transport!r}")
    try:
        return allreduce_time_s(gpu_model, nodes, gpus_per_node, nics, nic_gbps, transport, nbytes)  # type: ignore[arg-type]
    except UserError:
        return alpha_beta_allreduce_s(gpu_model, nodes, gpus_per_node, nics, nic_gbps, transport, nbytes)


@dataclass(slots=True)
class HangCause:
    kind: str  # gpu_lost, link_down, rank_stuck
    detail: str
    since: float


@dataclass(slots=True)
class TrainingSet:
    jobs: list[TrainingJob]
    gpu_order: np.ndarray  # GPU indices of every rank, job after job
    starts: np.ndarray  # offset of each job in gpu_order
    compute_s: np.ndarray
    allreduce_s: np.ndarray
    progress: np.ndarray  # fractional steps since the last completed step
    ports: list[np.ndarray]  # HCA port indices per job
    port_bytes_per_step: np.ndarray
    straggle: np.ndarray  # per GPU compute multiplier (1.0 = healthy)
    stuck: np.ndarray  # per GPU: the rank's process stopped participating
    hang: dict[str, HangCause] = field(default_factory=dict)
    rank_compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rank_job: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # job index of each rank
    port_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    port_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    port_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    memory_fraction: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def active(self) -> np.ndarray:
        return np.array([j.state in (JobState.running, JobState.hung) for j in self.jobs], dtype=bool)

    def ranks_of(self, j: int) -> np.ndarray:
        end = self.starts[j + 1] if j + 1 < len(self.starts) else len(self.gpu_order)
        return self.gpu_order[self.starts[j] : end]


def build_training(
    jobs: list[TrainingJob],
    gpu_index: dict[tuple[str, int], int],
    node_index: dict[str, int],
    gpu_model_of: dict[str, str],
    nic_count_of: dict[str, tuple[int, float]],
    transport: str,
    ports: PortArrays,
    n_gpus: int,
    allreduce: AllReduceModel,
) -> TrainingSet:
    from gpufleet.catalog.gpus import get_gpu_model

    order: list[int] = []
    starts: list[int] = []
    compute, comm, job_ports, port_bytes = [], [], [], []
    for job in jobs:
        starts.append(len(order))
        for node in job.nodes:
            order.extend(gpu_index[(node, g)] for g in range(job.gpus_per_node))
        model = gpu_model_of[job.nodes[0]]
        spec = get_gpu_model(model)
        flops = 6.0 * job.model_params_b * 1e9 * job.tokens_per_step
        compute.append(flops / (job.world_size * spec.fp16_dense_tflops * 1e12 * MODEL_FLOPS_UTILIZATION))
        nics, gbps = nic_count_of[job.nodes[0]]
        comm.append(allreduce(model, len(job.nodes), job.gpus_per_node, nics, gbps, transport, job.gradient_bytes))
        idx = [ports.nic_port[(node_index[n], r)] for n in job.nodes for r in range(nics)]
        job_ports.append(np.array(idx, dtype=np.int64))
        n_nodes = len(job.nodes)
        per_nic = job.gradient_bytes * 2 * (n_nodes - 1) / max(n_nodes, 1) / max(nics, 1)
        port_bytes.append(per_nic if n_nodes > 1 else 0.0)
    sizes = np.diff(np.append(np.array(starts, dtype=np.int64), len(order)))
    port_counts = np.array([p.size for p in job_ports], dtype=np.int64)
    return TrainingSet(
        jobs=jobs,
        gpu_order=np.array(order, dtype=np.int64),
        starts=np.array(starts, dtype=np.int64),
        compute_s=np.array(compute),
        allreduce_s=np.array(comm),
        progress=np.zeros(len(jobs)),
        ports=job_ports,
        port_bytes_per_step=np.array(port_bytes),
        straggle=np.ones(n_gpus),
        stuck=np.zeros(n_gpus, dtype=bool),
        rank_compute_s=np.zeros(n_gpus),
        rank_job=np.repeat(np.arange(len(jobs)), sizes),
        port_order=np.concatenate(job_ports) if job_ports else np.zeros(0, np.int64),
        port_starts=np.concatenate([[0], np.cumsum(port_counts)[:-1]]).astype(np.int64) if jobs else port_counts,
        port_counts=port_counts,
        memory_fraction=np.array([j.gpu_memory_fraction for j in jobs]),
    )


def _job_codes(ts: TrainingSet) -> np.ndarray:
    return np.array([_STATE_CODE.get(j.state, 2) for j in ts.jobs], dtype=np.int8)


_STATE_CODE = {JobState.running: 0, JobState.hung: 1}


def step_training(
    ts: TrainingSet, gpus: GpuArrays, ports: PortArrays, now: float, dt: float
) -> list[tuple[TrainingJob, JobState, str]]:
    """Advance every job by `dt`. Returns (job, new state, reason) for each state change.

    The common case (every rank healthy, every link up) is handled with whole-array operations; only jobs with a
    suspect rank or link, or already hung, go through the per-job checks.
    """
    changes: list[tuple[TrainingJob, JobState, str]] = []
    if not ts.jobs:
        return changes
    order = ts.gpu_order
    codes = _job_codes(ts)
    ratio = np.where(gpus.alive, gpus.sm_clock / gpus.max_clock, 0.0)[order]
    with np.errstate(divide="ignore"):
        per_rank = np.where(ratio > 0, ts.compute_s[ts.rank_job] / ratio, np.inf)
    per_rank = per_rank * ts.straggle[order]
    ts.rank_compute_s[order] = per_rank
    step_time = np.maximum.reduceat(per_rank, ts.starts) + ts.allreduce_s

    bad_gpu = (~gpus.alive | gpus.wedged | ts.stuck)[order]
    suspect = np.logical_or.reduceat(bad_gpu, ts.starts)
    if ts.port_order.size:
        suspect |= np.logical_or.reduceat(~ports.up[ts.port_order], ts.port_starts) & (ts.port_counts > 0)
    suspect |= codes == 1
    suspect &= codes <= 1

    for j in np.flatnonzero(suspect):
        job = ts.jobs[j]
        cause = _hang_cause(ts, int(j), gpus, ports, now)
        if cause is not None:
            if job.state is JobState.running:
                job.state = JobState.hung
                ts.hang[job.name] = cause
                changes.append((job, JobState.hung, f"{cause.kind}: {cause.detail}"))
            elif now - job.last_step_time >= job.nccl_timeout_s:
                job.state = JobState.failed
                ts.hang.pop(job.name, None)
                reason = (
                    f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={job.step + 1}, "
                    f"OpType=ALLREDUCE) ran for {int(job.nccl_timeout_s * 1000)} milliseconds before timing out."
                )
                changes.append((job, JobState.failed, reason))
            codes[j] = 2
        elif job.state is JobState.hung:  # the cause healed (a flap ended) before the watchdog fired
            job.state = JobState.running
            ts.hang.pop(job.name, None)
            changes.append((job, JobState.running, "collective resumed"))
            codes[j] = 0

    moving = codes == 0
    ts.progress = np.where(moving, ts.progress + dt / step_time, ts.progress)
    done = np.where(moving, np.floor(ts.progress), 0.0)
    ts.progress -= done
    for j in np.flatnonzero(done):
        job = ts.jobs[j]
        job.step += int(done[j])
        job.step_time_s = float(step_time[j])
        job.last_step_time = now + dt - float(ts.progress[j] * step_time[j])
        ports.add_traffic(ts.ports[j], np.full(ts.ports[j].size, int(ts.port_bytes_per_step[j] * done[j])))
    return changes


def _hang_cause(ts: TrainingSet, j: int, gpus: GpuArrays, ports: PortArrays, now: float) -> HangCause | None:
    job = ts.jobs[j]
    if job.name in ts.hang:
        cause = ts.hang[job.name]
        if cause.kind != "link_down" or not _link_healed(ts, j, ports):
            return cause
        return None
    ranks = ts.ranks_of(j)
    dead = ranks[~gpus.alive[ranks]]
    if dead.size:
        return HangCause("gpu_lost", f"gpu {int(dead[0])}", now)
    wedged = ranks[gpus.wedged[ranks]]
    if wedged.size:
        return HangCause("gpu_wedged", f"gpu {int(wedged[0])}", now)
    stuck = ranks[ts.stuck[ranks]]
    if stuck.size:
        rank = int(np.flatnonzero(ts.stuck[ranks])[0])
        return HangCause("rank_stuck", f"rank {rank}", now)
    job_ports = ts.ports[j]
    down = job_ports[~ports.up[job_ports]]
    if down.size:
        first = int(down[np.argmin(ports.down_since[down])])
        since = float(ports.down_since[first])
        if now - since >= IB_RETRY_BUDGET_S:
            return HangCause("link_down", ports.owner[first], since)
    return None


def _link_healed(ts: TrainingSet, j: int, ports: PortArrays) -> bool:
    return bool(ports.up[ts.ports[j]].all())


def training_demand(ts: TrainingSet, gpus: GpuArrays) -> None:
    """Utilization and memory the jobs ask of their GPUs: busy when computing, spinning at 100% when hung."""
    if not ts.jobs:
        return
    order = ts.gpu_order
    codes = _job_codes(ts)[ts.rank_job]
    quiet = (ts.stuck | gpus.wedged)[order]
    # NCCL kernels spin while waiting for a peer; a stuck rank's own GPU goes quiet.
    util = np.where(codes == 0, TRAINING_UTIL, np.where((codes == 1) & ~quiet, 100.0, 0.0))
    gpus.demand_util[order] = util
    gpus.demand_fb_mib[order] = np.where(codes <= 1, gpus.memory_mib[order] * ts.memory_fraction[ts.rank_job], 0.0)
    gpus.allocated[order] = codes <= 1


@dataclass(slots=True)
class ServiceState:
    service: InferenceService
    gpus: np.ndarray
    bucket_counts: np.ndarray = field(default_factory=lambda: np.zeros(len(LATENCY_BUCKETS_S) + 1, np.int64))
    latency_sum_s: float = 0.0
    requests: int = 0
    errors: int = 0


def step_inference(services: list[ServiceState], gpus: GpuArrays, dt: float, rng: np.random.Generator) -> None:
    for st in services:
        svc = st.service
        idx = st.gpus
        gpus.allocated[idx] = True
        gpus.demand_util[idx] = min(90.0, 20.0 + svc.requests_per_s * svc.base_latency_s * 60.0 / idx.size)
        gpus.demand_fb_mib[idx] = gpus.memory_mib[idx] * 0.6
        n = int(rng.poisson(svc.requests_per_s * dt))
        if n == 0:
            continue
        if not gpus.alive[idx].all():
            st.errors += n
            st.requests += n
            continue
        ratio = float(np.min(gpus.sm_clock[idx] / gpus.max_clock[idx])) or 1.0
        lat = svc.base_latency_s / max(ratio, 0.05) * rng.lognormal(0.0, 0.35, n)
        st.bucket_counts += np.bincount(np.searchsorted(LATENCY_BUCKETS_S, lat), minlength=st.bucket_counts.size)
        st.latency_sum_s += float(lat.sum())
        st.requests += n
