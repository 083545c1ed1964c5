"""The twin's own telemetry: whole rows into the per-GPU ring, per-minute fleet aggregates."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.clock_events import clock_event_bit as bit
from gpufleet.sim.recorder import RING_FIELDS, Recorder
from tests.twins import small_twin


def test_the_ring_keeps_the_last_seconds_of_every_gpu_oldest_first() -> None:
    g = small_twin(nodes=2, job_nodes=0).gpus
    rec = Recorder(g.n, ring_seconds=5)
    assert all((rows == 0.0).all() for rows in rec.ring.values())
    for t in range(1, 9):
        g.temp_c[:] = 30.0 + t + np.arange(g.n) / 100.0
        g.util[:] = t
        rec.record(float(t), g, 0, 0)
    times, temps = rec.series("temp_c", 3)
    assert times.tolist() == [4.0, 5.0, 6.0, 7.0, 8.0]
    np.testing.assert_allclose(temps, [34.03, 35.03, 36.03, 37.03, 38.03], rtol=1e-6)
    assert rec.series("util", 0)[1].tolist() == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert set(rec.ring) == set(RING_FIELDS)


def test_a_minute_aggregates_what_its_ticks_recorded() -> None:
    g = small_twin(nodes=2, job_nodes=0).gpus
    rec = Recorder(g.n, ring_seconds=10)
    utils, temps, powers, throttled = [], [], [], []
    for t in range(1, 61):
        g.util[:] = (t % 7) * 10.0
        g.temp_c[:] = 40.0
        g.temp_c[t % g.n] = 40.0 + t
        g.power_w[:] = 100.0 + t
        g.clock_events[:] = 0
        g.clock_events[: t % 5] = bit("hw_thermal")
        g.clock_events[5] = bit("power_cap")  # not a thermal or brake slowdown
        g.alive[2] = t < 60
        utils.append(float(g.util.mean()))
        temps.append(float(g.temp_c.max()))
        powers.append(float(g.power_w.sum()))
        throttled.append(t % 5)
        rec.record(float(t), g, hung_jobs=1, running_jobs=2)  # at t = 60 minute 1 begins: minute 0 is written
    (minute,) = rec.minutes
    assert minute.time == 60.0
    assert minute.util_mean == pytest.approx(sum(utils) / 60)
    assert minute.temp_max == max(temps) == 100.0
    assert minute.power_kw == pytest.approx(sum(powers) / 60 / 1000.0)
    assert minute.throttled == max(throttled) == 4
    assert (minute.lost, minute.hung_jobs, minute.running_jobs) == (1, 1, 2)
