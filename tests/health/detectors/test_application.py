"""Application detectors on hand-built job signals: each fires on its fault, exactly when its window or hold is
complete, and stays quiet on the near-misses (a noisy but decreasing loss, a logger that updates every few steps, a
short dip in throughput, a slow warmup, a job that hung or stopped reporting). Thresholds are the loaded defaults,
pinned once; per-job overrides come from a site file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpufleet.errors import ManifestError
from gpufleet.health.detectors.application import ApplicationDetectors
from gpufleet.health.detectors.seen import FleetSeen, HostLoad, HostLoads, JobView
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, TrainingSignals

T0 = 1_800_000_000.0
T = load_thresholds()
D = T.application.defaults
RANKS = (("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1))
STEPS_PER_READING = 10  # one report a second, ten steps a second
JOB = Entity(EntityKind.job, name="train")


class Run:
    """One job reporting to the detectors; `report(t, step, ...)` is its report at T0 + t."""

    def __init__(self, thresholds: Thresholds = T, name: str = "train") -> None:
        self.detectors = ApplicationDetectors(thresholds)
        self.name = name
        self.util = np.full(len(RANKS), 90.0)
        self.host_load: HostLoads | None = None

    def report(
        self,
        t: float,
        step: int | None,
        *,
        stepped: float | None = None,  # when its last step completed (default: just now)
        reported: float | None = None,  # when its signals were reported (default: just now)
        step_seconds: float = 0.1,
        **signals: object,
    ) -> list[Finding]:
        view = JobView(self.name, RANKS, T0 + (t if stepped is None else stepped), step_seconds)
        said = (TrainingSignals(step=step, **signals), T0 + (t if reported is None else reported))  # type: ignore[arg-type]
        seen = FleetSeen([view], lambda _: self.util, signals=lambda: {view.name: said}, host_load=self.host_load)
        return self.detectors.detect(T0 + t, seen)

    def losses(self, loss: Callable[[int], float], readings: int, start: int = 0) -> list[list[Finding]]:
        """One reading a second from reading `start` on, ten steps apart, with the loss `loss(step)`."""
        return [self.report(k, k * STEPS_PER_READING, loss=loss(k * STEPS_PER_READING)) for k in range(start, readings)]


def of(findings: list[Finding], cause: RootCause) -> list[Finding]:
    return [f for f in findings if f.cause is cause]


def first(readings: list[list[Finding]], cause: RootCause) -> int | None:
    """The first reading with a finding of `cause`."""
    return next((k for k, found in enumerate(readings) if of(found, cause)), None)


def test_the_documented_defaults() -> None:
    assert (D.loss_window_steps, D.warmup_steps, D.plateau_ratio, D.loss_min_points) == (500, 1000, 0.01, 10)
    assert (D.blowup_ratio, D.hold_points, D.validation_evals, D.validation_rise_ratio) == (2, 5, 3, 0.1)
    assert (D.grad_norm_max, D.grad_norm_min) == (100, 1e-7)
    assert (D.throughput_drop, D.throughput_hold_s, D.throughput_recent_points) == (0.2, 120, 5)
    assert (D.throughput_baseline_s, D.throughput_baseline_quantile, D.throughput_baseline_min_points) == (
        3600,
        0.5,
        30,
    )
    assert (D.starved_util_percent, D.starved_wait_share, D.starved_hold_s) == (50, 0.3, 120)
    assert (D.stale_s, D.progress_min_s, D.progress_step_multiple) == (120, 30, 3)


# -- loss: stall and plateau -------------------------------------------------------------------------------------


def test_a_loss_frozen_while_steps_advance_is_a_stall_once_a_window_of_steps_has_passed() -> None:
    readings = Run().losses(lambda step: 2.5, 60)
    window = D.loss_window_steps // STEPS_PER_READING  # step 500: the first whole window
    assert first(readings, RootCause.loss_plateau) == window
    (stall,) = readings[window]
    assert (stall.cause, stall.entity, stall.severity, stall.job) == (
        RootCause.loss_plateau,
        JOB,
        Severity.warning,
        "train",
    )
    assert "frozen at 2.5" in stall.summary and "stall" in stall.summary
    assert all(of(found, RootCause.loss_plateau) for found in readings[window:])


def test_a_loss_that_changed_once_in_the_window_is_not_frozen() -> None:
    readings = Run().losses(lambda step: 2.5 if step <= 300 else 2.4, 90)
    # the window (300, 800] is the first that holds only 2.4
    assert first(readings, RootCause.loss_plateau) == 800 // STEPS_PER_READING


def test_a_logger_that_updates_every_few_steps_with_a_falling_loss_never_stalls() -> None:
    readings = Run().losses(lambda step: 3.0 - 0.01 * (step // 50), 250)
    assert first(readings, RootCause.loss_plateau) is None


def plateau_after(start: int, noise: float, seed: int = 7) -> Callable[[int], float]:
    """Learning until step `start`, then flat at 2.0 within noise."""
    rng = np.random.default_rng(seed)
    return lambda step: max(3.0 - step / start, 2.0) + float(rng.normal(0.0, noise))


def test_a_flat_loss_within_noise_past_warmup_is_a_plateau() -> None:
    readings = Run().losses(plateau_after(1000, 0.01), 301)
    # the first two whole windows after warmup: steps 1000-1500 against 1500-2000
    judged = (D.warmup_steps + 2 * D.loss_window_steps) // STEPS_PER_READING
    assert first(readings, RootCause.loss_plateau) == judged
    assert all(of(found, RootCause.loss_plateau) for found in readings[judged:])
    (plateau,) = readings[-1]
    assert "plateaued" in plateau.summary and "stall" not in plateau.summary
    assert (
        "over the last 500 steps" in plateau.summary
        and "neither the mean nor the best is 1.0% lower" in plateau.evidence
    )


def test_a_noisy_but_decreasing_loss_is_no_plateau() -> None:
    rng = np.random.default_rng(3)
    readings = Run().losses(lambda step: 3.0 - 1e-4 * step + float(rng.normal(0.0, 0.03)), 501)
    assert [f for found in readings for f in found] == []


def test_a_flat_loss_during_warmup_is_not_judged() -> None:
    readings = Run().losses(plateau_after(100, 0.01), (D.warmup_steps + 2 * D.loss_window_steps) // STEPS_PER_READING)
    assert [f for found in readings for f in found] == []


def test_a_plateau_standing_when_the_job_hangs_is_no_longer_said() -> None:
    run = Run()
    readings = run.losses(plateau_after(1000, 0.01), 210)
    assert of(readings[-1], RootCause.loss_plateau)
    hung_at, step = 209, 209 * STEPS_PER_READING
    loss = 2.0
    quiet_after = hung_at + D.progress_min_s
    for t in range(hung_at + 1, hung_at + 400):
        found = run.report(t, step, stepped=hung_at, loss=loss)
        assert (found == []) == (t > quiet_after), t


def test_a_job_whose_steps_stopped_makes_no_new_readings() -> None:
    """The same frozen values reported again and again are one reading: no stall appears while the job is hung."""
    run = Run()
    run.losses(lambda step: 3.0 - step / 1000, 10)
    found = [run.report(t, 90, stepped=9, loss=2.91) for t in range(10, 1000)]
    assert [x for reading in found for x in reading] == []
    assert len(run.detectors.jobs["train"].losses) == 10


def test_a_step_that_goes_back_is_a_restart_and_its_history_starts_again() -> None:
    run = Run()
    assert first(run.losses(lambda step: 2.5, 41), RootCause.loss_plateau) is None  # steps 0..400
    restarted = [run.report(41 + k, k * STEPS_PER_READING, loss=2.5) for k in range(41)]  # steps 0..400 again
    assert first(restarted, RootCause.loss_plateau) is None
    later = [run.report(82 + k, (41 + k) * STEPS_PER_READING, loss=2.5) for k in range(20)]
    assert first(later, RootCause.loss_plateau) == 50 - 41  # a whole window after the restart


# -- non-finite, divergence, gradients ----------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["loss", "grad_norm", "validation_loss"])
def test_a_non_finite_value_is_critical_at_once(what: str) -> None:
    (found,) = Run().report(0, 100, nonfinite=[what])
    assert (found.cause, found.severity, found.entity) == (RootCause.loss_nonfinite, Severity.critical, JOB)
    assert what in found.summary and "step 100" in found.evidence


def test_a_job_whose_signals_stopped_arriving_is_not_judged() -> None:
    run = Run()
    assert run.report(0, 100, reported=-D.stale_s, nonfinite=["loss"])  # just within
    assert run.report(1, 100, reported=1 - D.stale_s - 0.5, nonfinite=["loss"]) == []


def falling(step: int) -> float:
    return 2.5 - 1e-4 * step


@pytest.mark.parametrize(("held", "expect"), [(D.hold_points - 1, False), (D.hold_points, True)])
def test_a_loss_many_times_its_recent_best_for_several_readings_is_blowing_up(held: int, expect: bool) -> None:
    run = Run()
    run.losses(falling, 100)
    readings = [run.report(100 + k, (100 + k) * STEPS_PER_READING, loss=6.0) for k in range(held)]
    after = run.report(100 + held, (100 + held) * STEPS_PER_READING, loss=falling((100 + held) * 10))
    found = of(readings[-1], RootCause.loss_divergence)
    assert bool(found) == expect
    assert of(after, RootCause.loss_divergence) == []  # a spike that passed
    if expect:
        assert found[0].severity is Severity.critical and "blowing up" in found[0].summary


def evaluations(validation: list[float], training: Callable[[int], float] = falling) -> list[list[Finding]]:
    """An evaluation every 100 steps, with these validation losses."""
    run = Run()
    out = []
    for k in range(len(validation) * 10):
        step = k * STEPS_PER_READING
        out.append(run.report(k, step, loss=training(step), validation_loss=validation[step // 100]))
    return out


def test_validation_rising_over_its_last_evaluations_while_training_falls_is_divergence() -> None:
    readings = evaluations([2.0, 1.9, 1.8, 1.85, 1.9, 1.95])
    assert first(readings, RootCause.loss_divergence) == 40  # the fifth evaluation: 1.8 -> 1.85 -> 1.9
    found = of(readings[-1], RootCause.loss_divergence)[0]
    assert found.severity is Severity.warning and "rising while its training loss falls" in found.summary


def test_validation_rising_with_the_training_loss_is_not_divergence() -> None:
    readings = evaluations([2.0, 1.9, 1.8, 1.85, 1.9, 1.95], training=lambda step: 2.0 + 1e-4 * step)
    assert first(readings, RootCause.loss_divergence) is None


@pytest.mark.parametrize(("validation", "expect"), [(1.8 * 1.1 + 0.01, True), (1.8 * 1.1 - 0.01, False)])
def test_validation_well_above_its_best_while_training_is_lower_is_divergence(validation: float, expect: bool) -> None:
    readings = evaluations([2.0, 1.8, validation])
    assert (first(readings, RootCause.loss_divergence) == 20) == expect
    assert (first(readings, RootCause.loss_divergence) is None) != expect


@pytest.mark.parametrize(
    ("norm", "held", "what"),
    [(250.0, D.hold_points, "exploding"), (1e-9, D.hold_points, "vanishing"), (250.0, D.hold_points - 1, None),
     (D.grad_norm_max, 20, None), (D.grad_norm_min, 20, None)],
)  # fmt: skip
def test_a_gradient_norm_out_of_range_for_several_readings(norm: float, held: int, what: str | None) -> None:
    run = Run()
    for k in range(10):
        assert run.report(k, k, grad_norm=1.5) == []
    readings = [run.report(10 + k, 10 + k, grad_norm=norm) for k in range(held)]
    found = of(readings[-1], RootCause.gradient_norm)
    assert [f.severity for f in found] == ([Severity.warning] if what else [])
    if what:
        assert what in found[0].summary and first(readings, RootCause.gradient_norm) == D.hold_points - 1


def test_values_the_job_does_not_export_are_skipped_not_read_as_zero() -> None:
    run = Run()
    found = [run.report(k, k * STEPS_PER_READING) for k in range(600)]  # nothing but steps
    assert [x for reading in found for x in reading] == []


# -- throughput ---------------------------------------------------------------------------------------------------

WARM = D.warmup_steps // STEPS_PER_READING
BASELINE_READY = WARM + (D.throughput_baseline_min_points - 1) * 10 + 1  # one baseline reading every 10 s


def paced(samples: Callable[[int], float], readings: int) -> list[list[Finding]]:
    run = Run()
    return [run.report(k, k * STEPS_PER_READING, samples_per_s=samples(k)) for k in range(readings)]


def test_samples_per_second_well_below_the_jobs_own_baseline_for_the_hold_is_a_drop() -> None:
    drop_at = BASELINE_READY + 100
    readings = paced(lambda k: 1200.0 if k < drop_at else 828.0, drop_at + 400)
    low_from = drop_at + D.throughput_recent_points // 2  # the median of the last five readings turns
    assert first(readings, RootCause.throughput_drop) == low_from + D.throughput_hold_s
    (found,) = readings[-1]  # 400 s on, its baseline is still the healthy pace
    assert found.summary == "job train's samples/s fell 31% (1,200 -> 828/s)"
    assert (found.entity, found.effect, found.job, found.began) == (JOB, True, "train", T0 + low_from)
    assert found.evidence.endswith(f"more than 20% below for {drop_at + 399 - low_from} s")
    assert "baseline 1,200" in found.evidence


@pytest.mark.parametrize(
    "samples",
    [
        lambda k: (
            1200.0 if not BASELINE_READY + 100 <= k < BASELINE_READY + 200 else 800.0
        ),  # a dip shorter than the hold
        lambda k: 1200.0 if k < BASELINE_READY + 100 else 1200.0 * (1 - D.throughput_drop) + 1,  # just above 80 %
        lambda k: min(100.0 + k * 2, 1200.0),  # a slow warmup
        lambda k: 100.0 if k < WARM else 1200.0,  # slow during warmup, then at pace
    ],
    ids=["short-dip", "near-miss", "slow-warmup", "slow-before-warmup"],
)
def test_no_drop_on_near_misses(samples: Callable[[int], float]) -> None:
    readings = paced(samples, BASELINE_READY + 400)
    assert first(readings, RootCause.throughput_drop) is None


def test_a_drop_during_warmup_is_not_judged() -> None:
    readings = paced(lambda k: 1200.0 if k < 20 else 500.0, WARM)
    assert first(readings, RootCause.throughput_drop) is None


def test_a_drop_joins_a_slowing_fault_on_one_of_the_jobs_gpus() -> None:
    drop_at = BASELINE_READY + 100
    readings = paced(lambda k: 1200.0 if k < drop_at else 600.0, drop_at + 200)
    drop = of(readings[-1], RootCause.throughput_drop)[0]
    resources = sorted({f"gpu/{n}/{g}" for n, g in RANKS} | {f"node/{n}" for n, _ in RANKS})
    book = IncidentBook(job_resources=lambda job: resources if job == "train" else [])
    thermal = Finding(drop.time - 60, RootCause.thermal, Entity(EntityKind.gpu, "n1", 0), Severity.warning,
                      "GPU n1/0 thermal slowdown", "HW slowdown for 30 s", "telemetry")  # fmt: skip
    hot = book.add(thermal)
    assert book.add(drop) is hot and hot.effects == [drop.summary]

    alone = IncidentBook(job_resources=lambda job: resources)
    alone.add(Finding(drop.time - 60, RootCause.driver_mismatch, Entity(EntityKind.node, "n1"), Severity.warning,
                      "driver differs", "", "software"))  # fmt: skip
    assert alone.add(drop).cause is RootCause.throughput_drop  # a driver mismatch does not slow a job down


# -- checkpoints --------------------------------------------------------------------------------------------------


def test_a_checkpoint_failure_is_found_once_and_a_counter_that_went_down_started_again() -> None:
    run = Run()
    reports = [(0, 3), (0, 3), (1, 3), (1, 4), (0, 4), (2, 4), (1, 4)]  # (failed, ok) cumulative
    found = [of(run.report(k, 10 * k, checkpoints_failed=f, checkpoints_ok=ok, checkpoint_s=42.0),
                RootCause.checkpoint_failure) for k, (f, ok) in enumerate(reports)]  # fmt: skip
    assert [len(f) for f in found] == [0, 0, 1, 0, 0, 1, 1]  # a new failure; the job restarted; two since; then one
    assert found[2][0].severity is Severity.warning
    assert found[2][0].evidence == "checkpoint failures 0 -> 1 (3 written); the last write took 42.0 s"
    assert "2 checkpoints" in found[5][0].summary and "1 checkpoint" in found[6][0].summary


# -- input starvation ---------------------------------------------------------------------------------------------


def starving(util: float, wait: float, run: Run | None = None, readings: int = 200) -> list[list[Finding]]:
    run = run or Run()
    run.util = np.full(len(RANKS), util)
    return [run.report(k, k, step_seconds=1.0, data_wait_s=wait) for k in range(readings)]


def test_idle_gpus_waiting_on_input_are_starved_after_the_hold() -> None:
    readings = starving(30.0, 0.5)
    assert first(readings, RootCause.input_starved) == D.starved_hold_s
    found = of(readings[-1], RootCause.input_starved)[0]
    assert (found.entity, found.severity) == (JOB, Severity.warning)
    assert "30% busy, 50% of each step" in found.summary


@pytest.mark.parametrize(
    ("util", "wait"),
    [(D.starved_util_percent, 0.5), (30.0, D.starved_wait_share), (float("nan"), 0.9)],
    ids=["gpus-busy-enough", "wait-at-the-share", "utilization-unknown"],
)
def test_no_starvation_on_near_misses(util: float, wait: float) -> None:
    assert first(starving(util, wait), RootCause.input_starved) is None


def test_host_saturation_is_supporting_evidence() -> None:
    run = Run()
    loads = {"n0": HostLoad(cpu_busy=0.97, io_wait=0.05), "n1": HostLoad(cpu_busy=0.4, io_wait=0.3)}
    run.host_load = loads.get
    found = of(starving(30.0, 0.5, run)[-1], RootCause.input_starved)[0]
    assert found.evidence.endswith("hosts saturated: n0 CPU 97% busy, n1 I/O wait 30%")
    run = Run()
    run.host_load = lambda node: HostLoad(cpu_busy=0.2)
    found = of(starving(30.0, 0.5, run)[-1], RootCause.input_starved)[0]
    assert "not saturated" in found.evidence


# -- jobs coming and going, overrides -----------------------------------------------------------------------------


def test_a_departed_job_is_forgotten() -> None:
    run = Run()
    run.report(0, 10, checkpoints_failed=1)
    assert set(run.detectors.jobs) == {"train"}
    assert run.detectors.detect(T0 + 1, FleetSeen([], lambda _: run.util, signals=dict)) == []
    assert run.detectors.jobs == {}
    assert run.report(2, 20, checkpoints_failed=2) == []  # back: its first report is a baseline again


def site(tmp_path: Path, text: str) -> Thresholds:
    path = tmp_path / "thresholds.yaml"
    path.write_text(text)
    return load_thresholds(path)


def test_per_job_overrides_by_name_and_pattern(tmp_path: Path) -> None:
    t = site(tmp_path, 'application:\n  jobs:\n    "llm-*": {grad_norm_max: 10}\n    llm-big: {grad_norm_max: 1000}\n')
    assert t.application.for_job("llm-a").grad_norm_max == 10
    assert t.application.for_job("llm-big").grad_norm_max == 1000  # the exact name wins
    assert t.application.for_job("train").grad_norm_max == D.grad_norm_max
    assert t.application.for_job("llm-a").hold_points == D.hold_points  # the rest from the defaults
    for name, expect in (("llm-a", True), ("llm-big", False), ("train", False)):
        run = Run(t, name)
        readings = [run.report(k, k, grad_norm=20.0) for k in range(D.hold_points)]
        assert bool(of(readings[-1], RootCause.gradient_norm)) == expect, name


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('application:\n  jobs:\n    "llm-*": {grad_norm_mx: 10}\n', "grad_norm_mx"),
        ("application:\n  jobs:\n    llm: {grad_norm_min: 5, grad_norm_max: 1}\n", "grad_norm_min must be below"),
        ("application:\n  defaults: {throughput_drop: 1.5}\n", "throughput_drop"),
        ("application:\n  services: {stale_s: 600, forget_after_s: 60}\n", "forget_after_s"),
    ],
)
def test_bad_application_thresholds_name_the_field(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ManifestError, match=says):
        site(tmp_path, text)
