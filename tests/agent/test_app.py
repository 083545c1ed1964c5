"""A job's own series into its signals: what it exports, never zero for what it does not, non-finite values kept
as such, and a job placed on its GPUs by its own rank series when no workload reader reports it."""

from __future__ import annotations

import math

from gpufleet.agent.app import read_signals, with_signals
from gpufleet.instrument import names
from gpufleet.model.observe import JobFact, RankFact, TrainingSignals
from gpufleet.telemetry.frame import label_items


def _gauges(*rows: tuple[str, dict[str, str], float]) -> dict:
    return {(name, label_items(labels)): value for name, labels, value in rows}


def test_job_level_values_fill_the_signals() -> None:
    read = read_signals(
        _gauges(
            (names.TRAINING_LOSS, {"job": "llm"}, 2.31),
            (names.TRAINING_LEARNING_RATE, {"job": "llm"}, 3e-4),
            (names.TRAINING_SAMPLES_PER_SECOND, {"job": "llm"}, 812.0),
            (names.TRAINING_STEP, {"job": "llm"}, 1200),
            (names.TRAINING_CHECKPOINTS, {"job": "llm", "result": "success"}, 3),
            (names.TRAINING_CHECKPOINTS, {"job": "llm", "result": "failure"}, 1),
            (names.TRAINING_RANK_DATA_WAIT, {"job": "llm", "rank": "0"}, 0.02),
            (names.TRAINING_RANK_DATA_WAIT, {"job": "llm", "rank": "1"}, 0.31),
            ("DCGM_FI_DEV_GPU_UTIL", {"job": "llm"}, 99.0),  # not an application series
        )
    )
    s = read.jobs["llm"]
    assert (s.loss, s.learning_rate, s.samples_per_s, s.step) == (2.31, 3e-4, 812.0, 1200)
    assert (s.checkpoints_ok, s.checkpoints_failed) == (3, 1)
    assert s.data_wait_s == 0.31  # the slowest rank holds the step back
    assert s.grad_norm is None and s.validation_loss is None  # not exported: unknown, not zero
    assert read.problems == []


def test_nonfinite_loss_is_named_not_dropped() -> None:
    read = read_signals(
        _gauges(
            (names.TRAINING_LOSS, {"job": "a"}, math.nan),
            (names.TRAINING_GRADIENT_NORM, {"job": "a"}, math.inf),
            (names.TRAINING_SAMPLES_PER_SECOND, {"job": "a"}, -5.0),  # impossible: skipped
        )
    )
    s = read.jobs["a"]
    assert s.loss is None and s.grad_norm is None
    assert s.nonfinite == ["loss", "grad_norm"]
    assert s.samples_per_s is None


def test_a_series_without_its_job_label_is_a_problem_said_once() -> None:
    read = read_signals(_gauges((names.TRAINING_LOSS, {"rank": "0"}, 1.0), (names.TRAINING_LOSS, {"rank": "1"}, 1.0)))
    assert read.jobs == {}
    assert len(read.problems) == 1 and "no job label" in read.problems[0]


def test_the_barrier_names_the_rank_most_often_missing() -> None:
    read = read_signals(
        _gauges(
            (names.TRAINING_BARRIER_TIMEOUTS, {"job": "a", "barrier": "init", "missing_rank": "3"}, 1),
            (names.TRAINING_BARRIER_TIMEOUTS, {"job": "a", "barrier": "step", "missing_rank": "5"}, 4),
        )
    )
    assert read.jobs["a"].barrier_timeouts == 5 and read.jobs["a"].missing_rank == 5


def test_rank_series_with_their_gpu_place_a_job_no_reader_reported() -> None:
    read = read_signals(
        _gauges(
            (names.TRAINING_LAST_STEP, {"job": "a"}, 1_800_000_000.0),
            (names.TRAINING_STEP_DURATION, {"job": "a"}, 0.9),
            (names.TRAINING_WORLD_SIZE, {"job": "a"}, 16),
            (names.TRAINING_RANK_COMPUTE, {"job": "a", "rank": "8", "gpu": "0"}, 0.7),
            (names.TRAINING_RANK_COMPUTE, {"job": "a", "rank": "9", "gpu": "1"}, 0.8),
            (names.TRAINING_RANK_COMPUTE, {"job": "a", "rank": "10"}, 0.8),  # no GPU: cannot be placed
        )
    )
    jobs = with_signals(None, read)
    assert jobs is not None
    (fact,) = jobs
    assert fact.world_size == 16 and fact.last_step_time == 1_800_000_000.0
    assert [(r.rank, r.gpu, r.compute_s) for r in fact.ranks] == [(8, 0, 0.7), (9, 1, 0.8)]
    assert fact.signals is None  # progress alone says nothing of the job's health


def test_a_reported_job_gets_its_signals_and_other_nodes_keep_none() -> None:
    given = [JobFact(job="a", ranks=[RankFact(0, 0)], world_size=8, last_step_time=1.0)]
    read = read_signals(_gauges((names.TRAINING_LOSS, {"job": "a"}, 1.5)))
    (fact,) = with_signals(given, read) or []
    assert fact.signals == TrainingSignals(loss=1.5)
    assert with_signals(None, read_signals({})) is None
