"""The twin's GPU physics: power capping, thermal throttling, idle behaviour, counters, determinism."""

from __future__ import annotations

import numpy as np

from gpufleet.catalog.clock_events import clock_event_bit as bit
from tests.twins import TwinFactory


def test_busy_gpus_run_near_tdp_and_settle_below_slowdown(make_twin: TwinFactory) -> None:
    twin = make_twin()
    twin.run(600)
    i = twin.gpu("n-000", 0)
    g = twin.gpus
    assert g.util[i] == 97.0
    assert 0.9 * g.tdp_w[i] <= g.power_w[i] <= g.tdp_w[i]
    assert g.temp_c[i] < g.max_operating_c[i]
    assert not g.clock_events[i] & bit("hw_thermal")


def test_power_cap_lowers_clock_and_sets_sw_power_cap(make_twin: TwinFactory) -> None:
    twin = make_twin()
    twin.set_power_limit("n-000", 1, 400)
    twin.run(120)
    i = twin.gpu("n-000", 1)
    g = twin.gpus
    assert g.power_w[i] <= 400.0
    assert g.sm_clock[i] < 0.8 * g.max_clock[i]
    assert g.clock_events[i] & bit("power_cap")
    assert not g.clock_events[i] & bit("hw_thermal")


def test_throttling_happens_above_the_slowdown_temperature(make_twin: TwinFactory) -> None:
    twin = make_twin()
    i = twin.gpu("n-000", 2)
    g = twin.gpus
    g.cooling[i] = 0.3  # fan failure
    seen_hot_and_slow = False
    below_slowdown_never_hw_throttled = True
    for _ in range(1800):
        twin.step()
        hw = bool(g.clock_events[i] & bit("hw_thermal"))
        if g.temp_c[i] < g.slowdown_c[i] - 1.5 and hw:
            below_slowdown_never_hw_throttled = False
        if hw and g.sm_clock[i] < 0.8 * g.max_clock[i]:
            seen_hot_and_slow = True
    assert seen_hot_and_slow
    assert below_slowdown_never_hw_throttled
    # Thermal slowdown holds the GPU near its slowdown point instead of letting it reach shutdown.
    assert g.alive[i] and g.temp_c[i] < g.shutdown_c[i]
    assert g.thermal_violation_ns[i] > 0


def test_idle_gpu(make_twin: TwinFactory) -> None:
    twin = make_twin()
    twin.run(900)
    i = twin.gpu("n-002", 0)  # not part of the job
    g = twin.gpus
    assert g.util[i] == 0 and g.clock_events[i] & bit("gpu_idle")
    assert abs(g.power_w[i] - g.idle_w[i]) < 2.0
    assert g.temp_c[i] < 35.0


def test_power_brake_pins_clocks(make_twin: TwinFactory) -> None:
    twin = make_twin()
    i = twin.gpu("n-000", 3)
    twin.gpus.power_brake[i] = True
    twin.run(5)
    assert twin.gpus.sm_clock[i] <= 0.3 * twin.gpus.max_clock[i] + 1
    assert twin.gpus.clock_events[i] & bit("hw_power_brake")


COUNTERS = (
    "energy_mj",
    "power_violation_ns",
    "thermal_violation_ns",
    "ecc_sbe_agg",
    "ecc_dbe_agg",
    "pcie_replay",
    "nvlink_crc_flit",
    "nvlink_replay",
    "remap_uncorrectable",
)


def test_counters_only_grow(make_twin: TwinFactory) -> None:
    twin = make_twin()
    g = twin.gpus
    g.sbe_rate_per_s[:] = 0.01
    g.pcie_replay_rate_per_s[:4] = 1.0
    g.nvlink_error_rate_per_s[4:8] = 2.0
    g.cooling[0] = 0.3
    twin.ports.symbol_rate_per_s[:6] = 0.2
    before = {name: getattr(g, name).copy() for name in COUNTERS}
    ports_before = {k: v.copy() for k, v in twin.ports.counters.items()}
    grew = set()
    for minute in range(20):
        twin.run(60)
        if minute == 5:
            g.double_bit_error(9)
        for name in COUNTERS:
            now = getattr(g, name)
            assert (now >= before[name]).all(), name
            if (now > before[name]).any():
                grew.add(name)
            before[name] = now.copy()
        for name, arr in twin.ports.counters.items():
            assert (arr >= ports_before[name]).all(), name
            ports_before[name] = arr.copy()
    assert {"energy_mj", "ecc_sbe_agg", "pcie_replay", "nvlink_crc_flit", "ecc_dbe_agg"} <= grew
    assert twin.ports.counters["xmit_bytes"].sum() > 0
    assert twin.ports.counters["symbol_errors"].sum() > 0


def test_same_seed_same_run_different_seed_differs(make_twin: TwinFactory) -> None:
    a, b, c = make_twin(seed=5), make_twin(seed=5), make_twin(seed=6)
    for twin in (a, b, c):
        twin.gpus.sbe_rate_per_s[:] = 0.05
        twin.run(300)
    assert np.array_equal(a.gpus.temp_c, b.gpus.temp_c)
    assert np.array_equal(a.gpus.ecc_sbe_agg, b.gpus.ecc_sbe_agg)
    assert not np.array_equal(a.gpus.temp_c, c.gpus.temp_c)


def test_dbe_queues_a_row_remap_and_reset_applies_it(make_twin: TwinFactory) -> None:
    twin = make_twin()
    i = twin.gpu("n-001", 4)
    twin.gpus.double_bit_error(i)
    assert twin.gpus.ecc_dbe_vol[i] == 1 and twin.gpus.remap_pending[i]
    assert twin.reset_gpu("n-001", 4)
    assert twin.gpus.ecc_dbe_vol[i] == 0 and twin.gpus.ecc_dbe_agg[i] == 1 and not twin.gpus.remap_pending[i]


def test_pre_ampere_gpus_retire_pages_instead(make_twin: TwinFactory) -> None:
    twin = make_twin(model="v100", job_nodes=0)
    twin.gpus.double_bit_error(0)
    assert twin.gpus.retired_dbe[0] == 1 and twin.gpus.retired_pending[0] == 1
    assert twin.gpus.remap_uncorrectable[0] == 0
