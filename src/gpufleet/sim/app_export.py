"""The twin's workloads as their own /metrics would show them: a training loop's series and an inference server's,
named, labelled and bucketed as `gpufleet.instrument` says, written into the source's metric frame.

What a node's agent sees is what that node hosts. A job's own values ({job}: loss, throughput, checkpoints) come
from the node of its rank 0, where the loop logs them; its progress (last step, step duration, world size) from
every node with a rank; per-rank times ({job, rank}) from the rank's own node, every few seconds. A job that stops
running takes its series with it; a service that is down has none (stale, not zero). Timestamps are Unix time:
the twin's epoch plus its clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.instrument import names
from gpufleet.model import JobState
from gpufleet.sim.app_training import TrainingValues
from gpufleet.sim.serving import ServiceState
from gpufleet.sim.twin import Twin
from gpufleet.telemetry.frame import Histogram, LabelItems, MetricFrame, label_items

GaugeKey = tuple[str, LabelItems]

RANK_EXPORT_S = 5.0
ACTIVE = (JobState.running, JobState.hung)


def _keys(labels: dict[str, str], *metrics: str) -> tuple[GaugeKey, ...]:
    items = label_items(labels)
    return tuple((m, items) for m in metrics)


@dataclass(frozen=True, slots=True)
class JobKeys:
    progress: tuple[GaugeKey, ...]  # last step, step duration, world size
    values: tuple[GaugeKey, ...]  # everything else the loop reports, in `_job_values` order
    checkpoints: tuple[GaugeKey, GaugeKey]  # success, failure

    @classmethod
    def of(cls, job: str) -> JobKeys:
        labels = {"job": job}
        return cls(
            _keys(labels, names.TRAINING_LAST_STEP, names.TRAINING_STEP_DURATION, names.TRAINING_WORLD_SIZE),
            _keys(
                labels,
                names.TRAINING_LOSS,
                names.TRAINING_VALIDATION_LOSS,
                names.TRAINING_LEARNING_RATE,
                names.TRAINING_GRADIENT_NORM,
                names.TRAINING_STEP,
                names.TRAINING_STEPS,
                names.TRAINING_SAMPLES,
                names.TRAINING_TOKENS,
                names.TRAINING_SAMPLES_PER_SECOND,
                names.TRAINING_TOKENS_PER_SECOND,
                names.TRAINING_CHECKPOINT_DURATION,
                names.TRAINING_LAST_CHECKPOINT,
            ),
            (
                (names.TRAINING_CHECKPOINTS, label_items({"job": job, "result": names.CHECKPOINT_SUCCESS})),
                (names.TRAINING_CHECKPOINTS, label_items({"job": job, "result": names.CHECKPOINT_FAILURE})),
            ),
        )


@dataclass(frozen=True, slots=True)
class RankPlacement:
    """A job's ranks on this source's GPUs, for one layout of the job."""

    nodes: tuple[str, ...]
    gpus: np.ndarray  # flat GPU index of each rank reported here
    first: bool  # rank 0 is here
    compute: list[GaugeKey]
    data_wait: list[GaugeKey]


HISTOGRAMS = (
    names.INFERENCE_REQUEST_DURATION,
    names.INFERENCE_TIME_TO_FIRST_TOKEN,
    names.INFERENCE_INTER_TOKEN_LATENCY,
)


@dataclass(frozen=True, slots=True)
class ServiceKeys:
    histograms: tuple[GaugeKey, ...]  # request duration, time to first token, inter-token latency
    gauges: tuple[GaugeKey, ...]  # requests ok, requests failed, errors, generated tokens, queue depth, in flight

    @classmethod
    def of(cls, st: ServiceState) -> ServiceKeys:
        labels = {"model": st.service.name, "version": st.service.version}
        outcome = [label_items({**labels, "outcome": o}) for o in ("ok", "error")]
        rest = _keys(
            labels,
            names.INFERENCE_ERRORS,
            names.INFERENCE_GENERATED_TOKENS,
            names.INFERENCE_QUEUE_DEPTH,
            names.INFERENCE_IN_FLIGHT,
        )
        requests = ((names.INFERENCE_REQUESTS, outcome[0]), (names.INFERENCE_REQUESTS, outcome[1]))
        return cls(_keys(labels, *HISTOGRAMS), (*requests, *rest))


class AppSeries:
    """Fills a frame with the application series of the workloads on one source's GPUs (`node` None: all)."""

    def __init__(self, twin: Twin, gpu_idx: np.ndarray, node: str | None) -> None:
        self.twin = twin
        self.node = node
        self.mine = np.zeros(twin.gpus.n, dtype=bool)
        self.mine[gpu_idx] = True
        self._job_keys: dict[str, JobKeys] = {}
        self._placement: dict[str, RankPlacement] = {}
        self._live_jobs: set[str] = set()
        self._service_keys: dict[str, ServiceKeys] = {}
        self._live_services: set[str] = set()
        self._values: tuple[np.ndarray, int, TrainingValues] | None = None

    def fill(self, frame: MetricFrame) -> None:
        self._jobs(frame)
        self._services(frame)

    # --- training ------------------------------------------------------------------------------------------------

    def _jobs(self, frame: MetricFrame) -> None:
        twin = self.twin
        ts = twin.training
        rank_due = twin.time % RANK_EXPORT_S < twin.tick  # frameworks export per-rank times every few seconds
        gauges = frame.gauges
        values: TrainingValues | None = None
        for j, job in enumerate(ts.jobs):
            placed = self._place(frame, j) if job.state in ACTIVE else None
            if placed is None or not placed.gpus.size:
                if job.name in self._live_jobs:
                    self._drop_job(frame, job.name)
                continue
            self._live_jobs.add(job.name)
            keys = self._job_keys.get(job.name) or self._job_keys.setdefault(job.name, JobKeys.of(job.name))
            last, duration, world = keys.progress
            gauges[last] = twin.epoch + job.last_step_time
            gauges[duration] = job.step_time_s
            gauges[world] = float(job.world_size)
            if placed.first and job.step > 0:
                values = values or self._training_values()
                self._job_values(gauges, keys, j, values)
            # a hung job completes no steps, so it has no new per-rank times to export
            if rank_due and job.state is JobState.running:
                compute, wait = ts.rank_compute_s[placed.gpus], ts.data_wait_s(j, placed.gpus)
                for key, value in zip(placed.compute, compute, strict=True):
                    if math.isfinite(value):
                        gauges[key] = float(value)
                gauges.update(zip(placed.data_wait, wait.tolist(), strict=True))

    def _job_values(self, gauges: dict[GaugeKey, float], keys: JobKeys, j: int, v: TrainingValues) -> None:
        twin, ts = self.twin, self.twin.training
        job, app = ts.jobs[j], ts.app
        samples_per_step = job.samples_per_step
        step_s = job.step_time_s
        values = (
            float(v.loss[j]),
            float(v.validation_loss[j]) if v.evaluated[j] else None,
            float(v.learning_rate[j]),
            float(v.grad_norm[j]),
            float(job.step),
            float(job.step),
            job.step * samples_per_step,
            float(job.step * job.tokens_per_step),
            samples_per_step / step_s if step_s > 0 else None,
            job.tokens_per_step / step_s if step_s > 0 else None,
            float(app.last_checkpoint_s[j]) if math.isfinite(app.last_checkpoint_s[j]) else None,
            twin.epoch + float(app.last_checkpoint_time[j]) if math.isfinite(app.last_checkpoint_time[j]) else None,
        )
        for key, value in zip(keys.values, values, strict=True):
            if value is not None:
                gauges[key] = value
        ok, failed = keys.checkpoints
        gauges[ok] = float(app.checkpoints_ok[j])
        gauges[failed] = float(app.checkpoints_failed[j])

    def _training_values(self) -> TrainingValues:
        """Every job's loop values now; computed again only when a job stepped or a fault changed them."""
        ts = self.twin.training
        steps = np.fromiter((job.step for job in ts.jobs), dtype=np.int64, count=len(ts.jobs))
        cached = self._values
        if cached is None or cached[1] != ts.app.version or not np.array_equal(cached[0], steps):
            cached = self._values = (steps, ts.app.version, ts.app.values(steps))
        return cached[2]

    def _place(self, frame: MetricFrame, j: int) -> RankPlacement:
        ts = self.twin.training
        job = ts.jobs[j]
        nodes = tuple(job.nodes)
        placed = self._placement.get(job.name)
        if placed is not None and placed.nodes == nodes:
            return placed
        if placed is not None:  # the job moved: the ranks it had here are gone
            self._drop_ranks(frame, placed)
        ranks = ts.ranks_of(j)
        here = np.flatnonzero(self.mine[ranks])
        compute = [(names.TRAINING_RANK_COMPUTE, label_items({"job": job.name, "rank": str(int(r))})) for r in here]
        wait = [(names.TRAINING_RANK_DATA_WAIT, label_items({"job": job.name, "rank": str(int(r))})) for r in here]
        placed = RankPlacement(nodes, ranks[here], bool(self.mine[ranks[0]]), compute, wait)
        self._placement[job.name] = placed
        return placed

    @staticmethod
    def _drop_ranks(frame: MetricFrame, placed: RankPlacement) -> None:
        for key in (*placed.compute, *placed.data_wait):
            frame.gauges.pop(key, None)

    def _drop_job(self, frame: MetricFrame, job: str) -> None:
        self._live_jobs.discard(job)
        keys = self._job_keys.get(job)
        if keys is not None:
            for key in (*keys.progress, *keys.values, *keys.checkpoints):
                frame.gauges.pop(key, None)
        placed = self._placement.get(job)
        if placed is not None:
            self._drop_ranks(frame, placed)

    # --- inference -----------------------------------------------------------------------------------------------

    def _services(self, frame: MetricFrame) -> None:
        live: set[str] = set()
        gauges = frame.gauges
        for st in self.twin.services:
            name = st.service.name
            if st.down or (self.node is not None and st.service.node != self.node):
                continue
            live.add(name)
            keys = self._service_keys.get(name) or self._service_keys.setdefault(name, ServiceKeys.of(st))
            for key, counts in zip(keys.histograms, (st.duration, st.ttft, st.inter_token), strict=True):
                hist = frame.histograms.get(key)
                if hist is None:
                    hist = frame.histograms[key] = Histogram.empty(counts.bounds.tolist())
                np.cumsum(counts.buckets[:-1], out=hist.bucket_counts)  # Prometheus buckets are cumulative
                hist.sum, hist.count = counts.sum, int(hist.bucket_counts[-1] + counts.buckets[-1])
            values = (st.requests - st.errors, st.errors, st.errors, st.tokens, round(st.queue), round(st.in_flight))
            gauges.update(zip(keys.gauges, map(float, values), strict=True))
        for name in self._live_services - live:  # down, drained or moved: its series go stale
            keys = self._service_keys.pop(name)
            for key in keys.histograms:
                frame.histograms.pop(key, None)
            for key in keys.gauges:
                gauges.pop(key, None)
        self._live_services = live
