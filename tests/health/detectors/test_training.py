"""Training detectors against every threshold of theirs, on hand-built job views and rank utilizations: a step just
short of overdue or stalled, a signature just short of its hold, a rank just at the straggler ratio are all quiet; just
past each is exactly the expected finding. Thresholds come from the loaded defaults, pinned once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from gpufleet.health.detectors.seen import FleetSeen, JobView
from gpufleet.health.detectors.training import STRAGGLER_EVERY_S, TrainingDetectors
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding

T0 = 1_800_000_000.0
T = load_thresholds()
TR = T.training
RANKS = (("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1))
JOB = Entity(EntityKind.job, name="train")
QUIET = Entity(EntityKind.gpu, "n1", 0)  # rank 2
SPIN = [100.0, 100.0, 0.0, 100.0]  # NCCL's hang signature: rank 2 never arrived, the others spin
WORKING = [50.0, 50.0, 50.0, 50.0]  # no signature


def seen(findings: list[Finding]) -> list[tuple[RootCause, Entity, Severity]]:
    return [(f.cause, f.entity, f.severity) for f in findings]


class Jobs:
    def __init__(self) -> None:
        self.detectors = TrainingDetectors(T)

    def at(
        self, dt: float, age: float, util: Sequence[float], step: float = 2.0, compute: tuple[float, ...] = ()
    ) -> list[Finding]:
        """One observation at T0 + dt of the job whose last step is `age` seconds old."""
        now = T0 + dt
        view = JobView("train", RANKS, now - age, step, compute)
        row = np.asarray(util, dtype=np.float64)
        return self.detectors.detect(now, FleetSeen([view], lambda job: row))


def test_the_documented_defaults() -> None:
    assert (TR.hang_min_s, TR.hang_step_multiple, TR.hang_signature_s) == (20, 1.5, 20)
    assert (TR.stall_min_s, TR.stall_step_multiple) == (60, 5)
    assert (TR.straggler_ratio, TR.straggler_hold_s) == (1.25, 60)
    assert (TR.quiet_rank_util, TR.busy_rank_util) == (5, 90)


def test_a_stepping_job_is_quiet() -> None:
    j = Jobs()
    assert [j.at(k, 1.0, SPIN, compute=(1.0, 1.0, 1.0, 1.0)) for k in range(0, 300, 5)] == [[]] * 60


# -- hangs -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "overdue_after"),
    [(2.0, TR.hang_min_s), (20.0, TR.hang_step_multiple * 20.0)],  # the floor, then the job's own step times
)
@pytest.mark.parametrize(("past", "expect"), [(0.0, False), (0.5, True)])
def test_a_hang_is_named_once_a_step_is_overdue(step: float, overdue_after: float, past: float, expect: bool) -> None:
    j = Jobs()
    assert j.at(0, 0.0, SPIN, step) == []  # the signature starts here
    at = TR.hang_signature_s + 10  # the signature has held long enough: only the step's age decides
    out = j.at(at, overdue_after + past, SPIN, step)
    assert seen(out) == ([(RootCause.nccl_hang, QUIET, Severity.critical)] if expect else [])
    if expect:
        assert out[0].job == "train" and out[0].effect and out[0].action == "REQUEUE_EXCLUDING_NODE"


@pytest.mark.parametrize(("short", "expect"), [(0.5, False), (0.0, True)])
def test_a_hang_needs_its_signature_held_for_the_signature_time(short: float, expect: bool) -> None:
    j = Jobs()
    age = TR.hang_min_s + 1  # overdue throughout, stalled never
    assert j.at(0, age, SPIN) == []
    at = TR.hang_signature_s - short
    assert age + at < TR.stall_min_s
    out = j.at(at, age + at, SPIN)
    assert seen(out) == ([(RootCause.nccl_hang, QUIET, Severity.critical)] if expect else [])


def test_a_broken_signature_starts_its_hold_again() -> None:
    j = Jobs()
    age = TR.hang_min_s + 1
    assert j.at(0, age, SPIN) == []
    assert j.at(TR.hang_signature_s - 1, age + TR.hang_signature_s - 1, WORKING) == []
    assert j.at(TR.hang_signature_s, age + TR.hang_signature_s, SPIN) == []


@pytest.mark.parametrize(
    ("util", "expect"),
    [
        ([100.0, 100.0, TR.quiet_rank_util, 100.0], False),  # the "quiet" rank is at the floor: working
        ([100.0, 100.0, TR.quiet_rank_util - 0.1, 100.0], True),
        ([TR.busy_rank_util - 0.1] * 2 + [0.0, TR.busy_rank_util - 0.1], False),  # nobody spins
        ([TR.busy_rank_util] * 2 + [0.0, TR.busy_rank_util], True),
        ([TR.busy_rank_util, 50.0, 0.0, 50.0], False),  # one busy rank of four: under half
        ([TR.busy_rank_util, TR.busy_rank_util, 0.0, 50.0], True),  # two of four: half spin
    ],
)
def test_the_signature_is_one_rank_under_the_quiet_floor_while_half_spin_at_the_busy_floor(
    util: list[float], expect: bool
) -> None:
    j = Jobs()
    age = TR.hang_min_s + 1
    assert j.at(0, age, util) == []
    out = j.at(TR.hang_signature_s, age + TR.hang_signature_s, util)
    assert seen(out) == ([(RootCause.nccl_hang, QUIET, Severity.critical)] if expect else [])


@pytest.mark.parametrize(("past", "expect"), [(0.0, False), (0.5, True)])
def test_a_rank_whose_gpu_reads_nothing_explains_the_hang_once_a_step_is_overdue(past: float, expect: bool) -> None:
    out = Jobs().at(0, TR.hang_min_s + past, [100.0, float("nan"), 100.0, 100.0])
    assert seen(out) == ([(RootCause.training_stall, JOB, Severity.critical)] if expect else [])
    if expect:
        assert out[0].effect and "rank 1 on n0/gpu1 is unreachable" in out[0].summary


# -- stalls ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "stalled_after"),
    [(2.0, TR.stall_min_s), (30.0, TR.stall_step_multiple * 30.0)],  # the floor, then the job's own step times
)
@pytest.mark.parametrize(("past", "expect"), [(0.0, False), (0.5, True)])
def test_a_job_with_no_hang_signature_is_stalled_past_the_stall_threshold(
    step: float, stalled_after: float, past: float, expect: bool
) -> None:
    out = Jobs().at(0, stalled_after + past, WORKING, step)
    assert seen(out) == ([(RootCause.training_stall, JOB, Severity.critical)] if expect else [])
    if expect:
        assert out[0].action == "REQUEUE" and out[0].began == T0 - stalled_after - past


# -- stragglers --------------------------------------------------------------------------------------------------


def straggling(slowest: float) -> tuple[float, ...]:
    return (1.0, 1.0, 1.0, slowest)  # the job's median is 1.0 s


@pytest.mark.parametrize(("over", "expect"), [(0.0, False), (0.01, True)])
def test_a_rank_slower_than_the_straggler_ratio_for_the_hold_is_a_straggler(over: float, expect: bool) -> None:
    j = Jobs()
    compute = straggling(TR.straggler_ratio + over)
    ticks = np.arange(0, TR.straggler_hold_s + 1, STRAGGLER_EVERY_S)
    found = [f for k in ticks for f in j.at(float(k), 1.0, SPIN, 2.0, compute)]
    assert seen(found) == ([(RootCause.straggler, Entity(EntityKind.gpu, "n1", 1), Severity.warning)] if expect else [])


@pytest.mark.parametrize(
    ("times", "expect"),
    [
        ((0.0, TR.straggler_hold_s - 0.5), False),
        ((0.0, TR.straggler_hold_s - STRAGGLER_EVERY_S, TR.straggler_hold_s), True),
    ],
)
def test_a_straggler_is_named_only_after_the_hold(times: tuple[float, ...], expect: bool) -> None:
    j = Jobs()
    compute = straggling(2 * TR.straggler_ratio)
    *before, last = times
    assert [j.at(k, 1.0, SPIN, 2.0, compute) for k in before] == [[]] * len(before)
    out = j.at(last, 1.0, SPIN, 2.0, compute)
    assert seen(out) == ([(RootCause.straggler, Entity(EntityKind.gpu, "n1", 1), Severity.warning)] if expect else [])


def test_a_rank_that_catches_up_starts_its_straggler_hold_again() -> None:
    j = Jobs()
    slow, fine = straggling(2 * TR.straggler_ratio), straggling(1.0)
    assert j.at(0, 1.0, SPIN, 2.0, slow) == []
    assert j.at(TR.straggler_hold_s - STRAGGLER_EVERY_S, 1.0, SPIN, 2.0, fine) == []
    assert j.at(TR.straggler_hold_s, 1.0, SPIN, 2.0, slow) == []
