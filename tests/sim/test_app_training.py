"""A training job's own series on the twin (loss, validation loss, learning rate, gradient norm, throughput,
checkpoints, per-rank times) and the application faults that change them, read through the twin's source."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpufleet.instrument import names
from gpufleet.model import InferenceService, JobState, TrainingJob
from gpufleet.sim.app_training import TrainingApp
from gpufleet.sim.source import TwinSource
from gpufleet.spec.scenario_spec import FaultType
from tests.sim.apptwin import EPOCH, app_twin, collect, fault, gauge, job_value, rank_series, ranks_util, series_of


def test_a_healthy_job_learns_and_reports_its_throughput() -> None:
    twin = app_twin()
    twin.run(40)  # inside the warm-up
    early = collect(twin)
    twin.run(1460)
    late = collect(twin)
    job = twin.cluster.job("job")
    assert job_value(late, names.TRAINING_LOSS) < 0.8 * job_value(early, names.TRAINING_LOSS)
    assert job_value(early, names.TRAINING_LEARNING_RATE) < job.learning_rate  # warming up
    assert 0.1 * job.learning_rate < job_value(late, names.TRAINING_LEARNING_RATE) <= job.learning_rate
    assert 0.3 < job_value(late, names.TRAINING_GRADIENT_NORM) < 3.0
    val = job_value(late, names.TRAINING_VALIDATION_LOSS)
    assert job_value(late, names.TRAINING_LOSS) * 0.9 < val < job_value(late, names.TRAINING_LOSS) * 1.2
    assert job_value(late, names.TRAINING_STEP) == job_value(late, names.TRAINING_STEPS) == job.step
    assert job_value(late, names.TRAINING_SAMPLES) == job.step * job.samples_per_step == job.step * 512
    assert job_value(late, names.TRAINING_TOKENS) == job.step * job.tokens_per_step
    assert job_value(late, names.TRAINING_SAMPLES_PER_SECOND) == pytest.approx(512 / job.step_time_s)
    assert job_value(late, names.TRAINING_TOKENS_PER_SECOND) == pytest.approx(job.tokens_per_step / job.step_time_s)
    assert job_value(late, names.TRAINING_WORLD_SIZE) == 16


def test_the_loss_falls_over_the_run_and_its_noise_is_reproducible() -> None:
    a, b = app_twin(seed=3), app_twin(seed=3)
    losses = []
    for _ in range(10):
        a.run(150)
        b.run(150)
        losses.append(job_value(collect(a), names.TRAINING_LOSS))
        assert job_value(collect(b), names.TRAINING_LOSS) == losses[-1]
    assert np.polyfit(np.arange(10), losses, 1)[0] < 0
    assert losses[-1] < min(losses[:3])


def test_timestamps_are_the_twins_epoch_plus_its_time() -> None:
    twin = app_twin()
    twin.run(400)
    frame = collect(twin)
    job, app = twin.cluster.job("job"), twin.training.app
    last = job_value(frame, names.TRAINING_LAST_STEP)
    assert last == EPOCH + job.last_step_time and EPOCH < last <= EPOCH + twin.time
    checkpoint = job_value(frame, names.TRAINING_LAST_CHECKPOINT)
    assert checkpoint == EPOCH + app.last_checkpoint_time[0] and EPOCH < checkpoint <= EPOCH + twin.time


def test_a_checkpoint_pauses_the_steps_and_idles_the_gpus_while_it_writes() -> None:
    twin = app_twin(model_params_b=7.0, tokens_per_step=262_144, checkpoint_every=20)
    app, job = twin.training.app, twin.cluster.job("job")
    while not app.writing(twin.time).any():
        twin.step()
        assert twin.time < 600, "no checkpoint began"
    step, ok = job.step, int(app.checkpoints_ok[0])
    twin.step()
    while app.writing(twin.time).any():
        assert job.step == step
        assert (ranks_util(twin) == 0.0).all()
        twin.step()
    twin.run(30)
    assert job.step > step and app.checkpoints_ok[0] == ok + 1
    frame = collect(twin)
    # 7B parameters x 14 bytes over two nodes writing 10 GB/s each
    assert job_value(frame, names.TRAINING_CHECKPOINT_DURATION) == pytest.approx(4.9)
    assert gauge(frame, names.TRAINING_CHECKPOINTS, job="job", result=names.CHECKPOINT_SUCCESS) == ok + 1
    assert gauge(frame, names.TRAINING_CHECKPOINTS, job="job", result=names.CHECKPOINT_FAILURE) == 0


def test_job_values_come_from_rank_0s_node_and_rank_times_from_each_ranks_node() -> None:
    twin = app_twin()
    twin.run(300)
    first, second, other = collect(twin, "n-000"), collect(twin, "n-001"), collect(twin, "n-002")
    assert {names.TRAINING_LOSS, names.TRAINING_SAMPLES_PER_SECOND} <= series_of(first, "job", "job")
    assert series_of(second, "job", "job") == {
        names.TRAINING_LAST_STEP,
        names.TRAINING_STEP_DURATION,
        names.TRAINING_WORLD_SIZE,
        names.TRAINING_RANK_COMPUTE,
        names.TRAINING_RANK_DATA_WAIT,
    }
    assert sorted(rank_series(first, names.TRAINING_RANK_COMPUTE)) == list(range(8))
    assert sorted(rank_series(second, names.TRAINING_RANK_DATA_WAIT)) == list(range(8, 16))
    assert series_of(other, "job", "job") == set()


def test_a_hung_job_reports_what_it_reported_last() -> None:
    twin = app_twin([fault(FaultType.nccl_hang, 300, job="job", rank=4)])
    source = TwinSource(twin)
    frame = source.new_frame()
    twin.run(330)
    assert twin.cluster.job("job").state is JobState.hung
    source.collect(frame)
    before = dict(frame.gauges)
    twin.run(300)
    source.collect(frame)
    assert twin.cluster.job("job").state is JobState.hung
    assert names.TRAINING_LOSS in series_of(frame, "job", "job")
    assert frame.gauges == before  # the same series, the same values: nothing moves while it hangs


def test_a_jobs_series_go_when_it_ends() -> None:
    twin = app_twin()
    source = TwinSource(twin)
    frame = source.new_frame()
    twin.run(300)
    source.collect(frame)
    assert names.TRAINING_LOSS in series_of(frame, "job", "job")
    twin.stop_job(twin.cluster.job("job"), "completed", restart=False)
    twin.run(5)
    source.collect(frame)
    assert series_of(frame, "job", "job") == set()


def test_a_job_that_moves_away_takes_its_series_off_the_node_it_left() -> None:
    twin = app_twin(nodes=3)
    left, joined = TwinSource(twin, "n-001"), TwinSource(twin, "n-002")
    frames = left.new_frame(), joined.new_frame()
    twin.run(300)
    left.collect(frames[0])
    assert sorted(rank_series(frames[0], names.TRAINING_RANK_COMPUTE)) == list(range(8, 16))
    assert twin.requeue_job("job", exclude=["n-001"])
    twin.run(60)
    left.collect(frames[0])
    joined.collect(frames[1])
    assert series_of(frames[0], "job", "job") == set()
    assert sorted(rank_series(frames[1], names.TRAINING_RANK_COMPUTE)) == list(range(8, 16))


def test_a_plateau_flattens_the_loss_and_leaves_the_rest() -> None:
    healthy, sick = app_twin(seed=2), app_twin([fault(FaultType.loss_plateau, 300, job="job", duration=600)], seed=2)
    for twin in (healthy, sick):
        twin.run(300)
    onset = job_value(collect(sick), names.TRAINING_LOSS)
    for twin in (healthy, sick):
        twin.run(590)
    flat, fine = collect(sick), collect(healthy)
    assert job_value(flat, names.TRAINING_LOSS) == pytest.approx(onset, rel=0.06)
    assert job_value(flat, names.TRAINING_LOSS) > 1.1 * job_value(fine, names.TRAINING_LOSS)
    for name in (names.TRAINING_STEP, names.TRAINING_SAMPLES_PER_SECOND, names.TRAINING_LEARNING_RATE):
        assert job_value(flat, name) == job_value(fine, name)
    sick.run(600)  # the plateau is over: learning goes on from where it stopped
    assert job_value(collect(sick), names.TRAINING_LOSS) < 0.95 * onset


def test_a_stall_freezes_the_loss_while_the_job_steps() -> None:
    twin = app_twin([fault(FaultType.loss_stall, 300, job="job", duration=300)])
    twin.run(320)
    frozen, step = job_value(collect(twin), names.TRAINING_LOSS), twin.cluster.job("job").step
    for _ in range(3):
        twin.run(60)
        frame = collect(twin)
        assert job_value(frame, names.TRAINING_LOSS) == frozen
    assert job_value(frame, names.TRAINING_STEP) > step + 100
    twin.run(120)
    assert job_value(collect(twin), names.TRAINING_LOSS) != frozen


def test_a_divergence_raises_validation_loss_while_training_loss_falls() -> None:
    healthy = app_twin(seed=4)
    sick = app_twin([fault(FaultType.loss_divergence, 300, job="job")], seed=4)
    for twin in (healthy, sick):
        twin.run(300)
    before = collect(sick)
    for twin in (healthy, sick):
        twin.run(900)
    after, fine = collect(sick), collect(healthy)
    val = names.TRAINING_VALIDATION_LOSS
    assert job_value(after, val) > 1.15 * job_value(before, val)
    assert job_value(after, val) > 1.5 * job_value(fine, val)
    assert job_value(after, names.TRAINING_LOSS) < job_value(before, names.TRAINING_LOSS)
    assert job_value(after, names.TRAINING_LOSS) == job_value(fine, names.TRAINING_LOSS)


def test_nan_loss_and_gradient_norm() -> None:
    twin = app_twin([fault(FaultType.loss_nan, 300, job="job")])
    twin.run(310)
    frame = collect(twin)
    assert math.isnan(job_value(frame, names.TRAINING_LOSS))
    assert math.isnan(job_value(frame, names.TRAINING_GRADIENT_NORM))
    assert math.isfinite(job_value(frame, names.TRAINING_SAMPLES_PER_SECOND))  # it keeps stepping
    twin.run(60)  # past the next evaluation
    assert math.isnan(job_value(collect(twin), names.TRAINING_VALIDATION_LOSS))


def test_an_exploding_gradient_norm_and_nothing_else() -> None:
    healthy = app_twin(seed=5)
    sick = app_twin([fault(FaultType.grad_explode, 200, job="job", duration=300)], seed=5)
    for twin in (healthy, sick):
        twin.run(300)
    frame, fine = collect(sick), collect(healthy)
    assert job_value(frame, names.TRAINING_GRADIENT_NORM) > 100
    assert job_value(frame, names.TRAINING_LOSS) == job_value(fine, names.TRAINING_LOSS)
    sick.run(300)
    assert job_value(collect(sick), names.TRAINING_GRADIENT_NORM) < 3


def test_failing_checkpoints_count_failures_and_keep_the_last_success() -> None:
    twin = app_twin([fault(FaultType.checkpoint_failure, 250, job="job")])
    twin.run(250)
    before = collect(twin)
    ok = gauge(before, names.TRAINING_CHECKPOINTS, job="job", result=names.CHECKPOINT_SUCCESS)
    assert ok and ok >= 2
    twin.run(500)
    after = collect(twin)
    assert gauge(after, names.TRAINING_CHECKPOINTS, job="job", result=names.CHECKPOINT_SUCCESS) == ok
    failed = gauge(after, names.TRAINING_CHECKPOINTS, job="job", result=names.CHECKPOINT_FAILURE)
    assert failed is not None and failed >= 3
    last = names.TRAINING_LAST_CHECKPOINT
    assert job_value(after, last) == job_value(before, last)


def test_slow_input_makes_every_rank_wait_slows_the_job_and_idles_its_gpus() -> None:
    twin = app_twin([fault(FaultType.slow_input, 200, job="job", factor=2.5)])
    twin.run(190)
    before = collect(twin)
    assert (ranks_util(twin) == 97.0).all()
    twin.run(200)
    after = collect(twin)
    rate = names.TRAINING_SAMPLES_PER_SECOND
    assert job_value(after, rate) < 0.5 * job_value(before, rate)
    assert job_value(after, names.TRAINING_STEP_DURATION) > 2 * job_value(before, names.TRAINING_STEP_DURATION)
    wait = rank_series(after, names.TRAINING_RANK_DATA_WAIT)
    compute = rank_series(after, names.TRAINING_RANK_COMPUTE)
    assert len(wait) == 16 and all(wait[r] > compute[r] for r in wait)
    assert rank_series(before, names.TRAINING_RANK_COMPUTE) == pytest.approx(compute, rel=0.05)  # GPUs as fast
    assert (ranks_util(twin) < 50.0).all()


def test_one_ranks_slow_loader_idles_only_its_gpu() -> None:
    twin = app_twin([fault(FaultType.slow_input, 100, job="job", rank=5, factor=3.0, duration=600)])
    twin.run(300)
    wait = rank_series(collect(twin), names.TRAINING_RANK_DATA_WAIT)
    assert max(wait, key=lambda r: wait[r]) == 5 and wait[5] > 100 * sorted(wait.values())[-2]
    util = ranks_util(twin)
    assert util[5] < 50.0 and (np.delete(util, 5) == 97.0).all()  # the others wait for it inside NCCL
    twin.run(500)
    assert (ranks_util(twin) == 97.0).all()


@pytest.mark.parametrize(
    ("kind", "kw", "seconds", "slower"),
    [
        (FaultType.straggler, {"job": "job", "rank": 3, "factor": 2.0, "duration": 3600.0}, 200, 0.6),
        (FaultType.thermal_runaway, {"node": "n-000", "gpu": 2}, 1200, 0.9),
    ],
)
def test_samples_per_second_fall_with_a_straggler_and_a_throttled_gpu(
    kind: FaultType, kw: dict[str, object], seconds: float, slower: float
) -> None:
    twin = app_twin([fault(kind, 60, **kw)])
    twin.run(55)
    before = job_value(collect(twin), names.TRAINING_SAMPLES_PER_SECOND)
    twin.run(seconds)
    after = job_value(collect(twin), names.TRAINING_SAMPLES_PER_SECOND)
    assert after < slower * before
    if kind is FaultType.thermal_runaway:
        hot = twin.gpu("n-000", 2)
        assert twin.gpus.sm_clock[hot] < 0.9 * twin.gpus.max_clock[hot]


def test_attribution_names_each_pods_workload() -> None:
    services = [InferenceService("chat", "n-002", (0, 1))]
    twin = app_twin([fault(FaultType.idle_gpu, 10, node="n-002", gpu=7)], services=services)
    twin.run(20)
    frame = collect(twin)
    held = {(e.hostname, e.gpu): a for e, a in zip(frame.entities, frame.attribution, strict=True)}
    assert held[("n-000", 3)] is not None and held[("n-000", 3)].workload == "job"
    assert held[("n-002", 1)] is not None and held[("n-002", 1)].workload == "chat"
    reserved = held[("n-002", 7)]
    assert reserved is not None and reserved.container == "idle" and reserved.workload == ""
    assert held[("n-002", 4)] is None


def test_jobs_stepping_in_one_tick_begin_the_checkpoints_they_are_due() -> None:
    """One call for every job that stepped: a checkpoint begins for each that crossed its interval and is not
    already writing."""
    jobs = [
        TrainingJob(name=f"j{k}", nodes=["n-000"], gpus_per_node=8, checkpoint_every=every)
        for k, every in enumerate((100, 100, 50, 100))
    ]
    app = TrainingApp.for_jobs(jobs, 0)
    app.writing_until[3] = 7.0  # still writing its last one
    app.checkpoint_failing[2] = True
    stepped = np.array([0, 1, 2, 3])
    app.stepped(
        stepped, np.array([99, 101, 149, 199]), np.array([100, 102, 150, 200]), np.array([10.0, 10.5, 11.0, 12.0])
    )
    assert app.writes == 2
    assert app.writing_until[0] == 10.0 + app.checkpoint_s[0]
    assert app.writing_until[1] == 0.0  # 101 -> 102 crosses no multiple of 100
    assert app.writing_until[2] == 11.0 + app.checkpoint_s[2] and app.write_fails[2]
    assert app.writing_until[3] == 7.0 and not app.write_fails[0]
