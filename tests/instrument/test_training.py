from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from gpufleet.instrument import TrainingMetrics, names, training
from tests.instrument.conftest import Clock, scrape

JOB_SERIES = {
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
    names.TRAINING_LAST_STEP,
    names.TRAINING_STEP_DURATION,
    names.TRAINING_CHECKPOINTS,
    names.TRAINING_CHECKPOINT_DURATION,
    names.TRAINING_LAST_CHECKPOINT,
    names.TRAINING_WORLD_SIZE,
}


class Tensorish:
    """What a framework hands over: a value float() can read (a 0-d tensor)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock().install(monkeypatch, training)


def test_a_step_sets_the_job_series_and_the_rank_series(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", rank=0, world_size=4, registry=registry)
    with m.step(samples=64, tokens=64 * 2048) as step:
        with m.data_wait():
            clock.advance(0.5)
        clock.advance(1.5)
        step.loss = Tensorish(2.25)
        step.grad_norm = 0.75
        step.learning_rate = 3e-4
    s = scrape(registry)
    job = {"job": "llm"}
    assert s.value(names.TRAINING_STEP, **job) == 1
    assert s.value(names.TRAINING_STEPS, **job) == 1
    assert s.value(names.TRAINING_SAMPLES, **job) == 64
    assert s.value(names.TRAINING_TOKENS, **job) == 64 * 2048
    assert s.value(names.TRAINING_STEP_DURATION, **job) == pytest.approx(2.0)
    assert s.value(names.TRAINING_SAMPLES_PER_SECOND, **job) == pytest.approx(32.0)
    assert s.value(names.TRAINING_TOKENS_PER_SECOND, **job) == pytest.approx(32.0 * 2048)
    assert s.value(names.TRAINING_LOSS, **job) == 2.25
    assert s.value(names.TRAINING_GRADIENT_NORM, **job) == 0.75
    assert s.value(names.TRAINING_LEARNING_RATE, **job) == 3e-4
    assert s.value(names.TRAINING_LAST_STEP, **job) == clock.wall  # Unix seconds, the wall clock
    assert s.value(names.TRAINING_WORLD_SIZE, **job) == 4
    assert s.value(names.TRAINING_RANK_DATA_WAIT, job="llm", rank="0") == pytest.approx(0.5)
    assert s.value(names.TRAINING_RANK_COMPUTE, job="llm", rank="0") == pytest.approx(1.5)
    assert s.types[names.TRAINING_STEPS.removesuffix("_total")] == "counter"
    assert s.types[names.TRAINING_LOSS] == "gauge"


def test_steps_count_on_and_a_resumed_job_starts_where_it_was(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry, initial_step=1000)
    for _ in range(3):
        with m.step(samples=8):
            clock.advance(0.1)
    assert m.last_step == 1003
    with m.step(number=2000):
        clock.advance(0.1)
    s = scrape(registry)
    assert s.value(names.TRAINING_STEP, job="llm") == 2000
    assert s.value(names.TRAINING_STEPS, job="llm") == 4  # this process's steps
    assert s.value(names.TRAINING_SAMPLES, job="llm") == 24


def test_an_input_wait_before_the_step_belongs_to_it(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry)
    with m.data_wait():  # the loop fetches, then opens the step
        clock.advance(0.3)
    with m.step(samples=10):
        clock.advance(0.7)
    s = scrape(registry)
    assert s.value(names.TRAINING_STEP_DURATION, job="llm") == pytest.approx(1.0)
    assert s.value(names.TRAINING_SAMPLES_PER_SECOND, job="llm") == pytest.approx(10.0)
    assert s.value(names.TRAINING_RANK_DATA_WAIT, job="llm", rank="0") == pytest.approx(0.3)
    assert s.value(names.TRAINING_RANK_COMPUTE, job="llm", rank="0") == pytest.approx(0.7)
    with m.step():  # the wait was the previous step's: none now
        clock.advance(0.2)
    assert scrape(registry).value(names.TRAINING_RANK_DATA_WAIT, job="llm", rank="0") == 0.0


def test_non_finite_loss_and_gradient_norm_are_exported_not_dropped() -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry)
    with m.step() as step:
        step.loss = float("nan")
        step.grad_norm = float("inf")
    m.validation(float("-inf"))
    s = scrape(registry)
    assert math.isnan(s.value(names.TRAINING_LOSS, job="llm") or 0.0)
    assert s.value(names.TRAINING_GRADIENT_NORM, job="llm") == math.inf
    assert s.value(names.TRAINING_VALIDATION_LOSS, job="llm") == -math.inf
    assert 'training_loss{job="llm"} NaN' in s.text
    assert 'training_gradient_norm{job="llm"} +Inf' in s.text


def test_only_the_reporting_rank_exports_the_job_series() -> None:
    registries = [CollectorRegistry() for _ in range(3)]
    ranks = [TrainingMetrics("llm", rank=r, world_size=3, registry=registries[r]) for r in range(3)]
    for m in ranks:
        with m.step(samples=96, tokens=96 * 512) as step:
            step.loss = step.grad_norm = step.learning_rate = 1.0
        m.validation(1.5)
        with m.checkpoint():
            pass
    scrapes = [scrape(r) for r in registries]
    assert scrapes[0].names() >= JOB_SERIES
    for r in (1, 2):
        assert not scrapes[r].names() & JOB_SERIES
        assert scrapes[r].label_sets(names.TRAINING_RANK_COMPUTE) == [{"job": "llm", "rank": str(r)}]
        assert scrapes[r].label_sets(names.TRAINING_RANK_DATA_WAIT) == [{"job": "llm", "rank": str(r)}]
    assert ranks[1].reports_job is False


def test_the_reporting_rank_can_be_another_one() -> None:
    registries = [CollectorRegistry(), CollectorRegistry()]
    for r in (0, 1):
        m = TrainingMetrics("llm", rank=r, world_size=2, registry=registries[r], reporting_rank=1)
        with m.step() as step:
            step.loss = 0.5
    assert scrape(registries[0]).value(names.TRAINING_LOSS, job="llm") is None
    assert scrape(registries[1]).value(names.TRAINING_LOSS, job="llm") == 0.5


def test_gauges_appear_only_once_they_hold_a_value() -> None:
    registry = CollectorRegistry()
    TrainingMetrics("llm", world_size=8, registry=registry)
    s = scrape(registry)
    # Before the first step: no loss of 0, no last step in 1970 for a stall rule to fire on.
    for name in (names.TRAINING_LOSS, names.TRAINING_LAST_STEP, names.TRAINING_STEP, names.TRAINING_RANK_COMPUTE):
        assert not s.label_sets(name), name
    assert s.value(names.TRAINING_WORLD_SIZE, job="llm") == 8
    assert s.value(names.TRAINING_STEPS, job="llm") == 0
    assert s.value(names.TRAINING_CHECKPOINTS, job="llm", result=names.CHECKPOINT_FAILURE) == 0
    # A job that never counts tokens says nothing about them.
    assert not s.label_sets(names.TRAINING_TOKENS)


def test_a_step_that_raises_records_nothing_and_the_exception_goes_on(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry)
    with pytest.raises(MemoryError), m.step(samples=8) as step:
        step.loss = 9.0
        raise MemoryError("CUDA out of memory")
    s = scrape(registry)
    assert s.value(names.TRAINING_STEPS, job="llm") == 0
    assert s.value(names.TRAINING_LOSS, job="llm") is None
    assert m.last_step == 0
    with m.step():  # the failed step's number is used again
        clock.advance(0.1)
    assert scrape(registry).value(names.TRAINING_STEP, job="llm") == 1


def test_steps_do_not_nest() -> None:
    m = TrainingMetrics("llm", registry=CollectorRegistry())
    with m.step(), pytest.raises(RuntimeError, match="already open"), m.step():
        pass


def test_checkpoint_success_and_failure(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry)
    with m.checkpoint():
        clock.advance(12.0)
    written_at = clock.wall
    with pytest.raises(OSError, match="No space left"), m.checkpoint():
        clock.advance(3.0)
        raise OSError(28, "No space left on device")
    s = scrape(registry)
    assert s.value(names.TRAINING_CHECKPOINTS, job="llm", result=names.CHECKPOINT_SUCCESS) == 1
    assert s.value(names.TRAINING_CHECKPOINTS, job="llm", result=names.CHECKPOINT_FAILURE) == 1
    assert s.value(names.TRAINING_CHECKPOINT_DURATION, job="llm") == pytest.approx(3.0)  # the last write's
    assert s.value(names.TRAINING_LAST_CHECKPOINT, job="llm") == written_at  # the last successful one


def test_the_gpu_label_places_a_rank_on_its_gpu() -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", rank=5, world_size=8, registry=registry, gpu=5)
    with m.step():
        pass
    s = scrape(registry)
    assert s.label_sets(names.TRAINING_RANK_COMPUTE) == [{"job": "llm", "rank": "5", names.RANK_GPU_LABEL: "5"}]


def test_jobs_share_a_registry_and_building_one_again_is_fine() -> None:
    registry = CollectorRegistry()
    a = TrainingMetrics("a", registry=registry)
    b = TrainingMetrics("b", registry=registry)
    TrainingMetrics("a", registry=registry)  # a notebook cell run twice
    for m, loss in ((a, 1.0), (b, 2.0)):
        with m.step() as step:
            step.loss = loss
    s = scrape(registry)
    assert s.value(names.TRAINING_LOSS, job="a") == 1.0
    assert s.value(names.TRAINING_LOSS, job="b") == 2.0
    with pytest.raises(ValueError, match="already registered with labels"):
        TrainingMetrics("c", registry=registry, gpu=0)  # per-rank series with another label set


def test_barrier_timeouts_are_counted_per_missing_rank() -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", world_size=4, registry=registry)
    m.barrier_timeout("checkpoint", [1, 3])
    m.barrier_timeout("checkpoint", [3])
    s = scrape(registry)
    assert s.value(names.TRAINING_BARRIER_TIMEOUTS, job="llm", barrier="checkpoint", missing_rank="3") == 2
    assert s.value(names.TRAINING_BARRIER_TIMEOUTS, job="llm", barrier="checkpoint", missing_rank="1") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job": ""}, "job must name"),
        ({"job": "j", "rank": 4, "world_size": 4}, "rank 4 is not in a world of 4"),
        ({"job": "j", "world_size": 2, "reporting_rank": 2}, "reporting rank 2"),
        ({"job": "j", "initial_step": -1}, "initial_step"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainingMetrics(registry=CollectorRegistry(), **kwargs)  # type: ignore[arg-type]


def test_every_exported_name_is_one_of_the_contract() -> None:
    registry = CollectorRegistry()
    m = TrainingMetrics("llm", registry=registry, gpu=0)
    with m.step(samples=1, tokens=1) as step, m.data_wait():
        step.loss = step.grad_norm = step.learning_rate = 1.0
    m.validation(1.0)
    with m.checkpoint():
        pass
    m.barrier_timeout("b", [0])
    contract = {v for k, v in vars(names).items() if k.startswith("TRAINING_")}
    exported = {n for n in scrape(registry).names() if not n.endswith("_created")}
    assert exported == contract
