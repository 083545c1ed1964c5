"""Training metrics: what a training loop says about itself (loss, throughput, step time, checkpoints), in the names
of `names`, for the gpufleet agent to scrape.

Per-rank series (compute and data-wait seconds of the last step) carry {job, rank} and come from every rank. The
job's own series (loss, learning rate, throughput, step, checkpoints) carry {job} and come from one rank only, the
reporting rank (rank 0 unless said), so a job exports one series each, not world_size copies.

    metrics = TrainingMetrics("llm-pretrain", rank=dist.get_rank(), world_size=dist.get_world_size())
    for batch in ...:
        with metrics.step(samples=global_batch, tokens=global_batch * seq_len) as step:
            with metrics.data_wait():
                x, y = next(batches)
            loss = model(x, y); loss.backward()
            step.grad_norm = clip_grad_norm_(model.parameters(), 1.0)
            step.learning_rate = scheduler.get_last_lr()[0]
            optimizer.step()
            step.loss = loss.item()

A non-finite loss or gradient norm is exported as NaN or +Inf, never dropped: a diverged run must be seen.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import SupportsFloat

from prometheus_client import CollectorRegistry, Counter, Gauge

import gpufleet.instrument.names as names
from gpufleet.instrument._families import LazyCounter, LazyGauge, family, registry_or_default

_HELP = {
    names.TRAINING_LOSS: "The last training loss.",
    names.TRAINING_VALIDATION_LOSS: "The last evaluation's loss.",
    names.TRAINING_LEARNING_RATE: "The learning rate of the last step.",
    names.TRAINING_GRADIENT_NORM: "The global gradient norm of the last step, before clipping.",
    names.TRAINING_STEP: "The optimizer step just completed.",
    names.TRAINING_STEPS: "Optimizer steps completed by this process.",
    names.TRAINING_SAMPLES: "Samples trained on, across the job.",
    names.TRAINING_TOKENS: "Tokens trained on, across the job.",
    names.TRAINING_SAMPLES_PER_SECOND: "Samples per second over the last step, across the job.",
    names.TRAINING_TOKENS_PER_SECOND: "Tokens per second over the last step, across the job.",
    names.TRAINING_LAST_STEP: "Unix time the last step completed.",
    names.TRAINING_STEP_DURATION: "Wall time of the last step, its input wait included.",
    names.TRAINING_RANK_COMPUTE: "Seconds of the rank's last step not spent waiting for input.",
    names.TRAINING_RANK_DATA_WAIT: "Seconds the rank's last step waited for input.",
    names.TRAINING_CHECKPOINTS: "Checkpoint writes by result.",
    names.TRAINING_CHECKPOINT_DURATION: "Duration of the last checkpoint write, failed or not.",
    names.TRAINING_LAST_CHECKPOINT: "Unix time of the last successful checkpoint write.",
    names.TRAINING_WORLD_SIZE: "Ranks in the job.",
    names.TRAINING_BARRIER_TIMEOUTS: "Monitored barriers that timed out, by the rank that did not arrive.",
}
_JOB = ("job",)


class Step:
    """One optimizer step, as `TrainingMetrics.step()` opens it. Set what the loop knows before the block ends;
    unset values leave their series as they were. Values may be tensors: they are read with float() at the end."""

    __slots__ = ("_metrics", "_start", "grad_norm", "learning_rate", "loss", "number", "samples", "tokens")

    def __init__(self, metrics: TrainingMetrics, number: int, samples: float, tokens: float) -> None:
        self._metrics = metrics
        self.number = number
        self.samples = samples
        self.tokens = tokens
        self.loss: SupportsFloat | None = None
        self.grad_norm: SupportsFloat | None = None
        self.learning_rate: SupportsFloat | None = None
        self._start = 0.0

    def __enter__(self) -> Step:
        self._metrics._begin(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._metrics._end(self, completed=exc_type is None)


class _DataWait:
    """Times one wait for input; reused, since waits do not nest."""

    __slots__ = ("_metrics", "_start")

    def __init__(self, metrics: TrainingMetrics) -> None:
        self._metrics = metrics
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._metrics._waited(time.perf_counter() - self._start)


class TrainingMetrics:
    """A training job's metrics, as seen from one rank.

    `samples` and `tokens` given to `step()` are the whole job's for that step (the global batch): the reporting
    rank exports them for the job. `gpu` (the node-local GPU index the rank drives, its LOCAL_RANK when each rank
    uses the GPU of that index) adds a `gpu` label to the per-rank series so the agent can place the rank on its
    GPU. Children are bound once, here or at their first value, never per step; gauges (and the sample and token
    counts) appear only once they hold a value (bound earlier they would export 0: a loss of 0, a last step in 1970).
    """

    def __init__(
        self,
        job: str,
        rank: int = 0,
        world_size: int = 1,
        registry: CollectorRegistry | None = None,
        *,
        reporting_rank: int = 0,
        gpu: int | None = None,
        initial_step: int = 0,
    ) -> None:
        if not job:
            raise ValueError("job must name the training job (it becomes the `job` label)")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of {world_size}")
        if not 0 <= reporting_rank < world_size:
            raise ValueError(f"reporting rank {reporting_rank} is not in a world of {world_size}")
        if initial_step < 0:
            raise ValueError(f"initial_step must be >= 0, not {initial_step}")
        self.job, self.rank, self.world_size = job, rank, world_size
        self.reporting_rank = reporting_rank
        self.reports_job = rank == reporting_rank
        self.registry = registry_or_default(registry)
        self.last_step = initial_step  # the number of the last completed step
        self._open: Step | None = None
        self._wait_in_step = 0.0  # input wait inside the open step
        self._wait_before = 0.0  # input wait since the last step ended, outside any step
        self._data_wait = _DataWait(self)

        rank_labels = ("job", "rank") if gpu is None else ("job", "rank", names.RANK_GPU_LABEL)
        rank_values = (job, str(rank)) if gpu is None else (job, str(rank), str(gpu))
        self._rank_compute = LazyGauge(self._gauge(names.TRAINING_RANK_COMPUTE, rank_labels), *rank_values)
        self._rank_wait = LazyGauge(self._gauge(names.TRAINING_RANK_DATA_WAIT, rank_labels), *rank_values)
        if self.reports_job:
            self._bind_job()

    def _gauge(self, name: str, labels: tuple[str, ...] = _JOB) -> Gauge:
        return family(self.registry, Gauge, name, _HELP[name], labels)

    def _counter(self, name: str, labels: tuple[str, ...] = _JOB) -> Counter:
        return family(self.registry, Counter, name, _HELP[name], labels)

    def _bind_job(self) -> None:
        job = self.job
        lazy = {
            name: LazyGauge(self._gauge(name), job)
            for name in (
                names.TRAINING_LOSS,
                names.TRAINING_VALIDATION_LOSS,
                names.TRAINING_LEARNING_RATE,
                names.TRAINING_GRADIENT_NORM,
                names.TRAINING_STEP,
                names.TRAINING_SAMPLES_PER_SECOND,
                names.TRAINING_TOKENS_PER_SECOND,
                names.TRAINING_LAST_STEP,
                names.TRAINING_STEP_DURATION,
                names.TRAINING_CHECKPOINT_DURATION,
                names.TRAINING_LAST_CHECKPOINT,
            )
        }
        self._loss = lazy[names.TRAINING_LOSS]
        self._validation_loss = lazy[names.TRAINING_VALIDATION_LOSS]
        self._learning_rate = lazy[names.TRAINING_LEARNING_RATE]
        self._grad_norm = lazy[names.TRAINING_GRADIENT_NORM]
        self._step = lazy[names.TRAINING_STEP]
        self._samples_rate = lazy[names.TRAINING_SAMPLES_PER_SECOND]
        self._tokens_rate = lazy[names.TRAINING_TOKENS_PER_SECOND]
        self._last_step = lazy[names.TRAINING_LAST_STEP]
        self._duration = lazy[names.TRAINING_STEP_DURATION]
        self._checkpoint_duration = lazy[names.TRAINING_CHECKPOINT_DURATION]
        self._last_checkpoint = lazy[names.TRAINING_LAST_CHECKPOINT]
        # Steps, checkpoints and the world size are true from the start: no steps yet is 0 steps.
        self._steps = self._counter(names.TRAINING_STEPS).labels(job)
        self._samples = LazyCounter(self._counter(names.TRAINING_SAMPLES), job)
        self._tokens = LazyCounter(self._counter(names.TRAINING_TOKENS), job)
        checkpoints = self._counter(names.TRAINING_CHECKPOINTS, ("job", "result"))
        self._checkpoints_ok = checkpoints.labels(job, names.CHECKPOINT_SUCCESS)
        self._checkpoints_failed = checkpoints.labels(job, names.CHECKPOINT_FAILURE)
        self._gauge(names.TRAINING_WORLD_SIZE).labels(job).set(self.world_size)

    # --- steps ---------------------------------------------------------------------------------------------------

    def step(self, samples: float = 0, tokens: float = 0, number: int | None = None) -> Step:
        """A context manager around one optimizer step. `number` is the step's number (default: the last one + 1,
        counted from `initial_step`). A block that raises records nothing: the step did not complete."""
        return Step(self, self.last_step + 1 if number is None else number, samples, tokens)

    def data_wait(self) -> _DataWait:
        """A context manager around fetching the next batch, inside the step or just before it: the wait counts
        into the step it belongs to, and is not compute."""
        return self._data_wait

    def _begin(self, step: Step) -> None:
        if self._open is not None:
            raise RuntimeError("a training step is already open: steps do not nest")
        self._open = step
        self._wait_in_step = 0.0
        step._start = time.perf_counter()

    def _waited(self, seconds: float) -> None:
        if self._open is not None:
            self._wait_in_step += seconds
        else:
            self._wait_before += seconds

    def _end(self, step: Step, completed: bool) -> None:
        block = time.perf_counter() - step._start
        wait_before, wait_in_step = self._wait_before, self._wait_in_step
        self._open, self._wait_before, self._wait_in_step = None, 0.0, 0.0
        if not completed:
            return
        duration = block + wait_before
        self._rank_compute.set(max(block - wait_in_step, 0.0))
        self._rank_wait.set(wait_before + wait_in_step)
        self.last_step = step.number
        if not self.reports_job:
            return
        self._duration.set(duration)
        self._step.set(step.number)
        self._steps.inc()
        if step.samples:
            self._samples.inc(step.samples)
            self._samples_rate.set(step.samples / duration)
        if step.tokens:
            self._tokens.inc(step.tokens)
            self._tokens_rate.set(step.tokens / duration)
        if step.loss is not None:
            self._loss.set(float(step.loss))
        if step.grad_norm is not None:
            self._grad_norm.set(float(step.grad_norm))
        if step.learning_rate is not None:
            self._learning_rate.set(float(step.learning_rate))
        self._last_step.set(time.time())  # wall clock: compared with Prometheus' time()

    # --- evaluation and checkpoints ------------------------------------------------------------------------------

    def validation(self, loss: SupportsFloat) -> None:
        """The loss of an evaluation just finished."""
        if self.reports_job:
            self._validation_loss.set(float(loss))

    @contextmanager
    def checkpoint(self) -> Iterator[None]:
        """A context manager around one checkpoint write: a block that raises is a failure (and the exception goes
        on); one that ends is a success and sets the last checkpoint's time. Either way its duration is kept."""
        if not self.reports_job:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self._checkpoint_duration.set(time.perf_counter() - start)
            self._checkpoints_failed.inc()
            raise
        self._checkpoint_duration.set(time.perf_counter() - start)
        self._checkpoints_ok.inc()
        self._last_checkpoint.set(time.time())

    # --- barriers ------------------------------------------------------------------------------------------------

    def barrier_timeout(self, barrier: str, missing_ranks: list[int]) -> None:
        """Count one timed-out barrier against each rank that did not arrive (the monitored barrier calls this on
        the one rank that reports the timeout)."""
        counter = self._counter(names.TRAINING_BARRIER_TIMEOUTS, ("job", "barrier", "missing_rank"))
        for rank in missing_ranks:
            counter.labels(self.job, barrier, str(rank)).inc()
