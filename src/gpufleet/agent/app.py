"""The application layer as the agent reads it: a training job's own series (the `gpufleet.instrument` names) from
the node's metric frame, into the contract's `TrainingSignals`, one per job.

The series come from the job's /metrics (scraped by `sources.app_scrape`) or from the twin's jobs; both fill the
same frame gauges, so both travel this one path. What the job does not export stays None, never zero. A series
without its `job` label cannot be placed and is counted as a problem, not guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from gpufleet.instrument import names
from gpufleet.model.observe import LATEST_TIME, JobFact, RankFact, TrainingSignals
from gpufleet.telemetry.frame import LabelItems

GaugeKey = tuple[str, LabelItems]

# job-level gauge -> the TrainingSignals field it fills
_JOB_GAUGES = {
    names.TRAINING_STEP: "step",
    names.TRAINING_LOSS: "loss",
    names.TRAINING_VALIDATION_LOSS: "validation_loss",
    names.TRAINING_LEARNING_RATE: "learning_rate",
    names.TRAINING_GRADIENT_NORM: "grad_norm",
    names.TRAINING_SAMPLES_PER_SECOND: "samples_per_s",
    names.TRAINING_TOKENS_PER_SECOND: "tokens_per_s",
    names.TRAINING_CHECKPOINT_DURATION: "checkpoint_s",
    names.TRAINING_LAST_CHECKPOINT: "last_checkpoint_time",
}
# values a NaN or infinity means something in (a diverged model), rather than "not exported"
_FINITE_MATTERS = frozenset({"loss", "validation_loss", "grad_norm"})
_NON_NEGATIVE = frozenset({"step", "samples_per_s", "tokens_per_s", "checkpoint_s", "last_checkpoint_time"})
# what places a job on the node rather than describing its health: read for a job no workload reader reported
_PROGRESS = {
    names.TRAINING_LAST_STEP: "last_step_time",
    names.TRAINING_STEP_DURATION: "step_seconds",
    names.TRAINING_WORLD_SIZE: "world_size",
}
APP_NAMES = frozenset(
    {
        *_JOB_GAUGES,
        *_PROGRESS,
        names.TRAINING_RANK_COMPUTE,
        names.TRAINING_RANK_DATA_WAIT,
        names.TRAINING_CHECKPOINTS,
        names.TRAINING_BARRIER_TIMEOUTS,
    }
)
MAX_GPU_INDEX = 4095


@dataclass(slots=True)
class _Job:
    values: dict[str, float] = field(default_factory=dict)
    nonfinite: list[str] = field(default_factory=list)
    data_wait: float | None = None
    checkpoints: dict[str, float] = field(default_factory=dict)
    barrier_timeouts: float = 0.0
    missing_rank: tuple[float, int] | None = None  # (timeouts, rank) of the rank most often missing
    progress: dict[str, float] = field(default_factory=dict)
    ranks: dict[int, RankFact] = field(default_factory=dict)  # ranks that name their GPU

    @property
    def says_something(self) -> bool:
        """Signals beyond progress: a node hosting only other ranks exports none, and must not blank rank 0's."""
        return bool(
            self.values or self.nonfinite or self.data_wait is not None or self.checkpoints or self.barrier_timeouts
        )


@dataclass(slots=True)
class SignalsRead:
    jobs: dict[str, TrainingSignals]
    problems: list[str]  # series that could not be read, once per kind
    facts: dict[str, JobFact] = field(default_factory=dict)  # jobs whose series place them (a last step, a rank)


def read_signals(gauges: Mapping[GaugeKey, float]) -> SignalsRead:
    """Every job's signals from one frame's gauges, in one pass."""
    jobs: dict[str, _Job] = {}
    problems: dict[str, str] = {}
    for (name, labels), value in gauges.items():
        if name not in APP_NAMES:
            continue
        label = dict(labels)
        job_name = label.get("job", "")
        if not job_name:
            problems.setdefault(name, f'{name} has no job label; skipped (export it with job="<name>")')
            continue
        job = jobs.setdefault(job_name, _Job())
        target = _JOB_GAUGES.get(name)
        if target is not None:
            _set(job, target, value)
        elif name in _PROGRESS:
            if math.isfinite(value) and 0 <= value <= LATEST_TIME:
                job.progress[_PROGRESS[name]] = value
        elif name == names.TRAINING_RANK_COMPUTE:
            _rank(job, label, value)
        elif name == names.TRAINING_RANK_DATA_WAIT:
            if math.isfinite(value) and value >= 0:
                job.data_wait = value if job.data_wait is None else max(job.data_wait, value)
        elif name == names.TRAINING_CHECKPOINTS:
            if math.isfinite(value) and value >= 0:
                result = label.get("result", "")
                job.checkpoints[result] = job.checkpoints.get(result, 0.0) + value
        elif math.isfinite(value) and value >= 0:  # barrier timeouts
            job.barrier_timeouts += value
            rank = label.get("missing_rank", "")
            if rank.isdigit() and value > 0 and (job.missing_rank is None or value > job.missing_rank[0]):
                job.missing_rank = (value, int(rank))
    facts = {name: fact for name, job in jobs.items() if (fact := _fact(name, job)) is not None}
    signals = {name: _signals(job) for name, job in jobs.items() if job.says_something}
    return SignalsRead(signals, list(problems.values()), facts)


def with_signals(given: list[JobFact] | None, read: SignalsRead) -> list[JobFact] | None:
    """The jobs a workload reader (or the twin) reported, each with its signals; plus the jobs only their own
    series place on this node. None when nothing reported any job."""
    if given is None and not read.facts:
        return None
    out = [msgspec.structs.replace(f, signals=read.jobs.get(f.job, f.signals)) for f in given or []]
    known = {f.job for f in out}
    out += [
        msgspec.structs.replace(f, signals=read.jobs.get(name)) for name, f in read.facts.items() if name not in known
    ]
    return out


def _rank(job: _Job, label: dict[str, str], value: float) -> None:
    rank, gpu = label.get("rank", ""), label.get(names.RANK_GPU_LABEL, "")
    if rank.isdigit() and gpu.isdigit() and int(gpu) <= MAX_GPU_INDEX:
        compute = value if math.isfinite(value) and value >= 0 else None
        job.ranks[int(rank)] = RankFact(int(rank), int(gpu), compute)


def _fact(name: str, job: _Job) -> JobFact | None:
    last = job.progress.get("last_step_time")
    if last is None:
        return None
    ranks = [job.ranks[r] for r in sorted(job.ranks)]
    world = max(int(job.progress.get("world_size", 0)), len(ranks), 1)
    step = job.values.get("step")
    return JobFact(
        job=name,
        ranks=ranks,
        world_size=world,
        last_step_time=last,
        step_seconds=job.progress.get("step_seconds", 0.0),
        step=int(step) if step is not None else 0,
    )


def _set(job: _Job, target: str, value: float) -> None:
    if not math.isfinite(value):
        if target in _FINITE_MATTERS and target not in job.nonfinite:
            job.nonfinite.append(target)
        return
    if (target in _NON_NEGATIVE and value < 0) or (target == "last_checkpoint_time" and value > LATEST_TIME):
        return
    job.values[target] = value


def _signals(job: _Job) -> TrainingSignals:
    v = job.values
    step = v.get("step")
    return TrainingSignals(
        step=int(step) if step is not None else None,
        loss=v.get("loss"),
        validation_loss=v.get("validation_loss"),
        learning_rate=v.get("learning_rate"),
        grad_norm=v.get("grad_norm"),
        samples_per_s=v.get("samples_per_s"),
        tokens_per_s=v.get("tokens_per_s"),
        data_wait_s=job.data_wait,
        checkpoints_ok=int(job.checkpoints.get(names.CHECKPOINT_SUCCESS, 0.0)),
        checkpoints_failed=int(job.checkpoints.get(names.CHECKPOINT_FAILURE, 0.0)),
        checkpoint_s=v.get("checkpoint_s"),
        last_checkpoint_time=v.get("last_checkpoint_time"),
        barrier_timeouts=int(job.barrier_timeouts),
        missing_rank=job.missing_rank[1] if job.missing_rank else None,
        nonfinite=job.nonfinite,
    )
