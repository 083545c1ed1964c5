"""Training jobs running on the twin, vectorized over jobs and ranks.

A training step is compute (which runs at the speed of the slowest rank's clock, times any straggler factor) plus
the time a rank waited for its input, plus an AllReduce of the gradients (NCCL's cost for this fabric). Every
`checkpoint_every` steps a job stops stepping while it writes a checkpoint (sim/app_training.py).

A job stops making progress when a rank's GPU is lost, one of its rail links is down longer than InfiniBand's retry
budget, or a rank's process is stuck: it is *hung*. NCCL's watchdog then fails it `nccl_timeout_s` after its last
completed step, as PyTorch's ProcessGroupNCCL does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import JobState, TrainingJob
from gpufleet.sim.app_training import TrainingApp
from gpufleet.sim.fabric_state import PortArrays
from gpufleet.sim.gpu_state import GpuArrays

MODEL_FLOPS_UTILIZATION = 0.40
TRAINING_UTIL = 97.0
# A healthy data loader prefetches: what a step still waits for its input is a sliver of its compute.
DATA_WAIT_FRACTION = 0.003
# NCCL_IB_TIMEOUT=20 (4.3 s per try) x NCCL_IB_RETRY_CNT=7: a link must stay down about 30 s to break a QP.
IB_RETRY_BUDGET_S = 30.0

# (gpu model, nodes, gpus per node, nics per node, nic Gb/s, transport, bytes) -> seconds
AllReduceModel = Callable[[str, int, int, int, float, str, int], float]


def alpha_beta_allreduce_s(
    gpu_model: str, nodes: int, gpus_per_node: int, nics: int, nic_gbps: float, transport: str, nbytes: int
) -> float:
    """Ring AllReduce under a latency-bandwidth model: used when no better collective model is wired in."""
    from gpufleet.catalog.gpus import get_gpu_model
    from gpufleet.errors import UserError

    spec = get_gpu_model(gpu_model)
    ranks = nodes * gpus_per_node
    if ranks <= 1:
        return 0.0
    intra = spec.nvlink_bw_gbps if spec.nvlink_links else 12.0 * spec.pcie_gen / 3
    if nics == 0 and spec.scaleout_ports:  # a Gaudi scales out over its own RoCE ports, not host NICs
        inter_gbs = gpus_per_node * spec.scaleout_ports * spec.nvlink_bw_gbps_per_link
    else:
        inter_gbs = nics * nic_gbps / 8.0
    if nodes > 1 and inter_gbs <= 0:
        raise UserError(
            f"a {nodes}-node job on {gpu_model} nodes without NICs cannot exchange gradients",
            fix="give the pool `nics`, or keep the job on one node",
        )
    inter = inter_gbs * 0.92 if nodes > 1 else float("inf")
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
    app: TrainingApp
    # per GPU: how many times slower than the GPU its rank's data loader delivers a batch (1.0 = keeps up)
    input_slow: np.ndarray = field(default_factory=lambda: np.zeros(0))
    any_input_slow: bool = False  # some loader lags: the per-rank wait is worked out rank by rank
    hang: dict[str, HangCause] = field(default_factory=dict)
    rank_compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per job: what a step takes now
    rank_job: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # job index of each rank
    port_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    port_starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    port_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    memory_fraction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # what a tick reads per rank and never changes for this layout, worked out on first use (_RankFacts)
    rank_facts: _RankFacts | None = field(default=None, repr=False, compare=False)

    @property
    def active(self) -> np.ndarray:
        return np.array([j.state in (JobState.running, JobState.hung) for j in self.jobs], dtype=bool)

    def ranks_of(self, j: int) -> np.ndarray:
        end = self.starts[j + 1] if j + 1 < len(self.starts) else len(self.gpu_order)
        return self.gpu_order[self.starts[j] : end]

    def job_holding(self, i: int) -> str | None:
        """The running (or hung) job that has a rank on GPU `i`."""
        for j, job in enumerate(self.jobs):
            if job.state in (JobState.running, JobState.hung) and i in self.ranks_of(j):
                return job.name
        return None

    def slow_input(self, gpus: np.ndarray, factor: float) -> None:
        """The data loaders of the ranks on `gpus` deliver a batch `factor` times slower than the GPU uses it."""
        self.input_slow[gpus] = factor
        self.any_input_slow = bool((self.input_slow > 1.0).any())

    def data_wait_s(self, j: int, gpus: np.ndarray) -> np.ndarray:
        """What each of job `j`'s ranks on `gpus` waited for its input in the last step."""
        return self.compute_s[j] * (DATA_WAIT_FRACTION + self.input_slow[gpus] - 1.0)


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
    seed: int = 0,
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
        app=TrainingApp.for_jobs(jobs, seed),
        input_slow=np.ones(n_gpus),
        rank_compute_s=np.zeros(n_gpus),
        step_s=np.zeros(len(jobs)),
        rank_job=np.repeat(np.arange(len(jobs)), sizes),
        port_order=np.concatenate(job_ports) if job_ports else np.zeros(0, np.int64),
        port_starts=np.concatenate([[0], np.cumsum(port_counts)[:-1]]).astype(np.int64) if jobs else port_counts,
        port_counts=port_counts,
        memory_fraction=np.array([j.gpu_memory_fraction for j in jobs]),
    )


def carry_over(old: TrainingSet, new: TrainingSet) -> None:
    """Keep what outlives a new rank layout: progress, per-GPU fault state and what the jobs' loops know."""
    new.allreduce_s = old.allreduce_s.copy()
    new.progress = old.progress.copy()
    new.straggle, new.stuck, new.hang, new.app = old.straggle, old.stuck, old.hang, old.app
    new.input_slow, new.any_input_slow = old.input_slow, old.any_input_slow


def _job_codes(ts: TrainingSet) -> np.ndarray:
    """0 running, 1 hung, 2 anything else, per job (by identity: an Enum's hash is a Python call per job)."""
    running, hung = JobState.running, JobState.hung
    return np.array([0 if (s := j.state) is running else 1 if s is hung else 2 for j in ts.jobs], dtype=np.int8)


@dataclass(slots=True)
class _RankFacts:
    """Per rank, fixed for one rank layout: where its GPU is (a slice when the ranks are one run of GPUs, so reads
    are views and writes are copies), its GPU's max clock, its job's nominal compute time and memory use."""

    gpus: np.ndarray | slice
    max_clock: np.ndarray
    nominal_s: np.ndarray
    fb_mib: np.ndarray


def _rank_facts(ts: TrainingSet, gpus: GpuArrays) -> _RankFacts:
    facts = getattr(ts, "rank_facts", None)  # unset in a TrainingSet pickled before it had them
    if facts is None:
        order = ts.gpu_order
        first = int(order[0]) if order.size else 0
        contiguous = order.size > 0 and bool((order == np.arange(first, first + order.size)).all())
        facts = ts.rank_facts = _RankFacts(
            gpus=slice(first, first + order.size) if contiguous else order,
            max_clock=gpus.max_clock[order],
            nominal_s=ts.compute_s[ts.rank_job],
            fb_mib=gpus.memory_mib[order] * ts.memory_fraction[ts.rank_job],
        )
    return facts


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices starts[k] .. starts[k] + counts[k] - 1 of every k, one after the other."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(starts - (ends - counts), counts)


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
    facts = _rank_facts(ts, gpus)
    at = facts.gpus
    codes = _job_codes(ts)
    alive = gpus.alive
    all_alive = bool(alive.all())
    ratio = gpus.sm_clock[at] / facts.max_clock
    if not all_alive:
        ratio[~alive[at]] = 0.0
    nominal = facts.nominal_s
    with np.errstate(divide="ignore", invalid="ignore"):
        per_rank = nominal / ratio
    stopped = ratio <= 0.0
    if stopped.any():
        per_rank[stopped] = np.inf
    if (ts.straggle != 1.0).any():
        per_rank *= ts.straggle[at]
    ts.rank_compute_s[at] = per_rank
    if ts.any_input_slow:  # a lagging loader: its rank waits for the batch before it can compute
        per_rank = per_rank + nominal * (ts.input_slow[at] - 1.0)
    # the wait a healthy loader leaves is the same on every rank of a job
    step_time = np.maximum.reduceat(per_rank, ts.starts) + ts.compute_s * DATA_WAIT_FRACTION + ts.allreduce_s
    ts.step_s = step_time

    # Only jobs with a lost, wedged or stuck rank, a link down, or already hung go through the per-job checks.
    if all_alive and not gpus.wedged.any() and not ts.stuck.any():
        suspect = codes == 1
    else:
        bad_gpu = (~alive | gpus.wedged | ts.stuck)[ts.gpu_order]
        suspect = np.logical_or.reduceat(bad_gpu, ts.starts)
        suspect |= codes == 1
    if ts.port_order.size and not ports.up.all():
        # jobs on nodes without NICs (a Gaudi scales out on its own ports) have no slice: only the others are read
        has = ts.port_counts > 0
        suspect[has] |= np.logical_or.reduceat(~ports.up[ts.port_order], ts.port_starts[has])
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
    if ts.app.writes:
        moving &= ~ts.app.writing(now)
    ts.progress = np.where(moving, ts.progress + dt / step_time, ts.progress)
    done = np.where(moving, np.floor(ts.progress), 0.0)
    ts.progress -= done
    stepped = np.flatnonzero(done)
    if stepped.size:
        # every job's AllReduce traffic of this tick in one call: bytes per HCA port, truncated per job as sent
        counts = ts.port_counts[stepped]
        sent = (ts.port_bytes_per_step[stepped] * done[stepped]).astype(np.int64)
        ports.add_traffic(ts.port_order[_ranges(ts.port_starts[stepped], counts)], np.repeat(sent, counts))
        steps, times = done[stepped].astype(np.int64), step_time[stepped]
        last = (now + dt) - ts.progress[stepped] * times  # when each job's last step completed
        before = np.array([ts.jobs[s].step for s in stepped.tolist()], dtype=np.int64)
        after = before + steps
        for s, step, took, when in zip(stepped.tolist(), after.tolist(), times.tolist(), last.tolist(), strict=True):
            job = ts.jobs[s]
            job.step, job.step_time_s, job.last_step_time = step, took, when
        ts.app.stepped(stepped, before, after, last)
    ts.app.finish_writes(now + dt)
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


def training_demand(ts: TrainingSet, gpus: GpuArrays, now: float = 0.0) -> None:
    """Utilization and memory the jobs ask of their GPUs: busy when computing, spinning at 100% when hung, idle
    while a checkpoint is written; a rank starved of input idles for the share of the step it waits."""
    if not ts.jobs:
        return
    facts = _rank_facts(ts, gpus)
    at = facts.gpus
    job_codes = _job_codes(ts)
    if not job_codes.any() and not ts.any_input_slow and not ts.app.writes:  # every job running, none held up
        gpus.demand_util[at] = TRAINING_UTIL
        gpus.demand_fb_mib[at] = facts.fb_mib
        gpus.allocated[at] = True
        return
    order = ts.gpu_order
    codes = job_codes[ts.rank_job]
    quiet = (ts.stuck | gpus.wedged)[order]
    # NCCL kernels spin while waiting for a peer; a stuck rank's own GPU goes quiet.
    util = np.where(codes == 0, TRAINING_UTIL, np.where((codes == 1) & ~quiet, 100.0, 0.0))
    if ts.any_input_slow:
        slow = ts.input_slow[order]
        step = ts.step_s[ts.rank_job]
        wait = ts.compute_s[ts.rank_job] * (DATA_WAIT_FRACTION + slow - 1.0)
        waiting = np.divide(wait, step, out=np.zeros(order.size), where=step > 0)
        util = np.where((slow > 1.0) & (codes == 0), TRAINING_UTIL * (1.0 - np.clip(waiting, 0.0, 1.0)), util)
    if ts.app.writes:  # a synchronous checkpoint leaves the GPUs idle while it writes
        util = np.where(ts.app.writing(now)[ts.rank_job] & (codes == 0), 0.0, util)
    gpus.demand_util[at] = util
    gpus.demand_fb_mib[at] = np.where(codes <= 1, facts.fb_mib, 0.0)
    gpus.allocated[at] = codes <= 1
