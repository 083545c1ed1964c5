"""The fused per-tick GPU physics against the straightforward whole-array formula it replaced, the float32 normal
draws it uses, and what a tick allocates."""

from __future__ import annotations

import copy
import math
import pickle
import tracemalloc
from dataclasses import dataclass, fields

import numpy as np
import pytest

from gpufleet.catalog.clock_events import clock_event_bit as bit
from gpufleet.sim.gpu_state import (
    FB_RESERVED_MIB,
    FULL_LOAD_POWER_OVER_TDP,
    IDLE_SM_CLOCK_MHZ,
    THERMAL_HEADROOM_C,
    THERMAL_TAU_S,
    GpuArrays,
    standard_normal_f32,
)
from tests.twins import small_twin

AMBIENT_C = 25.0


@dataclass
class Expected:
    util: np.ndarray
    sm_clock: np.ndarray
    clock_events: np.ndarray
    power_w: np.ndarray
    temp_c: np.ndarray
    mem_temp_c: np.ndarray
    energy_mj: np.ndarray
    power_violation_ns: np.ndarray
    thermal_violation_ns: np.ndarray
    mem_copy_util: np.ndarray
    fb_used_mib: np.ndarray
    over: np.ndarray


def straightforward(g: GpuArrays, dt: float, z_power: np.ndarray, z_temp: np.ndarray) -> Expected:
    """One tick as the twin computed it before the fused kernel: a new whole-fleet array per operation, float64."""
    alive = g.alive
    util = np.where(alive, g.demand_util, 0.0)
    busy = util > 0.0
    u = util / 100.0
    max_clock = g.max_clock
    clock = np.where(busy, max_clock, IDLE_SM_CLOCK_MHZ)
    events = np.where(busy, 0, bit("gpu_idle")).astype(np.uint32)
    dyn = (FULL_LOAD_POWER_OVER_TDP * g.tdp_w - g.idle_w) * u
    with np.errstate(divide="ignore", invalid="ignore"):
        cap_ratio = np.sqrt(np.clip((g.power_limit_w - g.idle_w) / dyn, 0.0, None))
    capped = busy & (cap_ratio < clock / max_clock)
    clock = np.where(capped, max_clock * cap_ratio, clock)
    events |= np.where(capped, bit("power_cap"), 0).astype(np.uint32)
    temp = g.temp_c
    sw_thermal = temp > g.max_operating_c
    sw_ratio = np.clip(1.0 - 0.04 * (temp - g.max_operating_c), 0.5, 1.0)
    clock = np.where(sw_thermal, np.minimum(clock, max_clock * sw_ratio), clock)
    events |= np.where(sw_thermal, bit("sw_thermal"), 0).astype(np.uint32)
    hw_thermal = temp >= g.slowdown_c
    hw_ratio = np.clip(1.0 - 0.3 * (temp - g.slowdown_c + 1.0), 0.15, 1.0)
    clock = np.where(hw_thermal, np.minimum(clock, max_clock * hw_ratio), clock)
    events |= np.where(hw_thermal, bit("hw_thermal") | bit("hw_slowdown"), 0).astype(np.uint32)
    brake = g.power_brake
    clock = np.where(brake, np.minimum(clock, max_clock * 0.3), clock)
    events |= np.where(brake, bit("hw_power_brake") | bit("hw_slowdown"), 0).astype(np.uint32)
    clock = np.where(alive, np.maximum(clock, 0.0), 0.0)
    ratio = np.where(busy, clock / max_clock, 0.0)
    power = g.idle_w + dyn * ratio**2
    power = power * (1.0 + 0.004 * z_power)
    power = np.where(alive, np.minimum(power, np.maximum(g.power_limit_w, g.idle_w)), 0.0)
    steady = AMBIENT_C + THERMAL_HEADROOM_C / g.tdp_w * power / g.cooling
    new_temp = temp + (steady - temp) * (1.0 - np.exp(-dt / THERMAL_TAU_S)) + 0.05 * z_temp
    return Expected(
        util=util,
        sm_clock=np.round(clock),
        clock_events=np.where(alive, events, 0).astype(np.uint32),
        power_w=power,
        temp_c=new_temp,
        mem_temp_c=new_temp + 4.0 + 6.0 * u,
        energy_mj=g.energy_mj + power * dt * 1000.0,
        power_violation_ns=g.power_violation_ns + np.where(capped | brake, dt * 1e9, 0.0),
        thermal_violation_ns=g.thermal_violation_ns + np.where(hw_thermal | sw_thermal, dt * 1e9, 0.0),
        mem_copy_util=np.where(busy, np.clip(util * 0.45, 0, 100), 0.0),
        fb_used_mib=np.where(alive, np.minimum(FB_RESERVED_MIB + g.demand_fb_mib, g.memory_mib), 0.0),
        over=np.flatnonzero(alive & (new_temp >= g.shutdown_c)),
    )


def fleet() -> GpuArrays:
    """Four nodes' GPUs in every situation the physics branches on, one GPU each (the rest busy or idle)."""
    g = small_twin(nodes=4, job_nodes=0).gpus
    rng = np.random.default_rng(7)
    g.demand_util[:] = np.where(np.arange(g.n) % 3 == 0, 0.0, rng.uniform(5.0, 100.0, g.n))
    g.demand_fb_mib[:] = rng.uniform(0.0, 90_000.0, g.n)  # some past the GPU's memory
    g.temp_c[:] = rng.uniform(30.0, 80.0, g.n)
    g.power_limit_w[1] = 400.0  # power capped
    g.power_limit_w[2] = g.idle_w[2]  # a limit at idle: no dynamic power left, the cap ratio is 0
    g.power_limit_w[3] = g.idle_w[3]
    g.demand_util[3] = 0.0  # ... and idle: 0 / 0
    g.temp_c[4] = g.max_operating_c[4] + 1.3  # software thermal slowdown
    g.temp_c[5] = g.slowdown_c[5] + 0.4  # hardware slowdown
    g.temp_c[6] = g.slowdown_c[6] + 0.4
    g.demand_util[6] = 0.0  # hot and idle
    g.power_brake[7] = True
    g.power_brake[8] = True
    g.alive[8] = False  # a dead GPU with the brake asserted still counts violation time, as before
    g.alive[9] = False
    g.cooling[10] = 0.3  # a failed fan
    g.demand_util[10] = 97.0
    g.temp_c[11] = g.shutdown_c[11] + 3.0  # past shutdown (after a tick of cooling): reported as over
    g.temp_c[12] = g.shutdown_c[12] + 3.0
    g.alive[12] = False  # ... but already lost: not reported again
    g.demand_util[13] = 100.0
    g.power_limit_w[13] = 0.3 * g.tdp_w[13]
    g.energy_mj[:] = rng.uniform(0.0, 1e12, g.n)  # a long-lived counter keeps its float64 precision
    return g


def widened(z: np.ndarray) -> np.ndarray:
    return z.astype(np.float64)


def check(g: GpuArrays, want: Expected, over: np.ndarray, dt: float = 1.0) -> None:
    np.testing.assert_array_equal(g.util, want.util)
    assert np.abs(g.sm_clock - want.sm_clock).max() <= 1.0  # float32 can land a clock on the other side of .5
    np.testing.assert_array_equal(g.clock_events, want.clock_events)
    np.testing.assert_allclose(g.power_w, want.power_w, rtol=2e-6, atol=1e-4)
    np.testing.assert_allclose(g.temp_c, want.temp_c, rtol=0, atol=2e-4)
    np.testing.assert_allclose(g.mem_temp_c, want.mem_temp_c, rtol=0, atol=2e-4)
    # float64 keeps every mJ of a long-lived counter; what it adds differs by the float32 power reading's rounding
    np.testing.assert_allclose(g.energy_mj, want.energy_mj, rtol=1e-15, atol=2e-3 * dt * 1000.0)
    np.testing.assert_array_equal(g.power_violation_ns, want.power_violation_ns)
    np.testing.assert_array_equal(g.thermal_violation_ns, want.thermal_violation_ns)
    np.testing.assert_array_equal(g.mem_copy_util, want.mem_copy_util)
    np.testing.assert_array_equal(g.fb_used_mib, want.fb_used_mib)
    np.testing.assert_array_equal(over, want.over)


def test_fleet_covers_every_branch() -> None:
    g = fleet()
    want = straightforward(g, 1.0, np.zeros(g.n), np.zeros(g.n))
    events = want.clock_events
    for name in ("gpu_idle", "power_cap", "sw_thermal", "hw_thermal", "hw_power_brake"):
        assert (events & bit(name)).any(), name
    assert want.over.tolist() == [11]
    assert (want.fb_used_mib == g.memory_mib).any() and (want.power_w == 0.0).sum() == 3


@pytest.mark.parametrize("dt", [1.0, 0.25, 30.0])
def test_one_tick_equals_the_straightforward_formula(dt: float) -> None:
    g = fleet()
    z = np.zeros(2 * g.n, dtype=np.float32)
    standard_normal_f32(np.random.default_rng(3), z, np.zeros(g.n, dtype=np.float32))
    want = straightforward(g, dt, widened(z[: g.n]), widened(z[g.n :]))
    over = g.advance(dt, AMBIENT_C, z[: g.n], z[g.n :])
    check(g, want, over, dt)


def test_every_tick_of_a_fan_failure_equals_the_straightforward_formula() -> None:
    """Through heating, throttling and settling: each tick from the kernel's own state, on fresh noise."""
    g = fleet()
    g.alive[11] = False  # keep the hot one from being reported every tick
    rng = np.random.default_rng(11)
    seen = 0
    for _ in range(400):
        z = np.zeros(2 * g.n, dtype=np.float32)
        standard_normal_f32(rng, z, np.zeros(g.n, dtype=np.float32))
        want = straightforward(copy.deepcopy(g), 1.0, widened(z[: g.n]), widened(z[g.n :]))
        check(g, want, g.advance(1.0, AMBIENT_C, z[: g.n], z[g.n :]))
        seen |= int(g.clock_events[10])
    assert seen & bit("hw_thermal")  # the failed fan took its GPU into hardware slowdown on the way


def test_the_state_stays_float64_and_arrays_are_updated_in_place() -> None:
    g = fleet()
    held = {name: getattr(g, name) for name in ("util", "sm_clock", "power_w", "temp_c", "clock_events")}
    for _ in range(3):
        g.step(1.0, AMBIENT_C, np.random.default_rng(0))
    for name, array in held.items():
        assert getattr(g, name) is array
    assert {getattr(g, n).dtype for n in ("util", "sm_clock", "power_w", "temp_c", "energy_mj")} == {np.dtype("f8")}


def tiled(g: GpuArrays, times: int) -> GpuArrays:
    """`g`'s GPUs `times` over: a large fleet without building a large cluster."""
    arrays = {f.name: getattr(g, f.name) for f in fields(g) if isinstance(getattr(g, f.name), np.ndarray)}
    tiles = {name: np.tile(a, (times,) + (1,) * (a.ndim - 1)) for name, a in arrays.items()}
    return GpuArrays(n=g.n * times, **tiles)


def test_a_tick_allocates_no_whole_fleet_array() -> None:
    small = small_twin(nodes=4, job_nodes=0).gpus
    small.demand_util[::2] = 97.0
    small.power_limit_w[2] = 400.0
    g = tiled(small, 4096)  # 131,072 GPUs: well past numpy's 8,192-element ufunc buffers, which a tick may use
    rng = np.random.default_rng(0)
    g.step(1.0, AMBIENT_C, rng)  # the scratch buffers are made on the first tick
    tracemalloc.start()
    try:
        for _ in range(3):
            g.step(1.0, AMBIENT_C, rng)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < g.n // 4  # not even one boolean array over the fleet (GPUs lost or braked would add their own)


def test_a_pickled_fleet_leaves_its_scratch_behind_and_steps_the_same() -> None:
    g = fleet()
    g.step(1.0, AMBIENT_C, np.random.default_rng(0))
    assert g.scratch is not None
    again = pickle.loads(pickle.dumps(g))
    assert again.scratch is None
    for fleet_ in (g, again):
        fleet_.step(1.0, AMBIENT_C, np.random.default_rng(5))
    np.testing.assert_array_equal(again.temp_c, g.temp_c)
    np.testing.assert_array_equal(again.energy_mj, g.energy_mj)


def test_box_muller_draws_are_standard_normal() -> None:
    n = 1 << 18
    z = np.zeros(n, dtype=np.float32)
    standard_normal_f32(np.random.default_rng(1), z, np.zeros(n // 2, dtype=np.float32))
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1.0) < 0.01
    assert np.isfinite(z).all() and float(np.abs(z).max()) < 5.8
    # Kolmogorov-Smirnov distance to the normal CDF: about 0.0027 would be the 1% critical value at this n
    s = np.sort(z.astype(np.float64))
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(s / math.sqrt(2.0)))
    ranks = np.arange(1, n + 1) / n
    assert max(float(np.abs(cdf - ranks).max()), float(np.abs(cdf - (ranks - 1.0 / n)).max())) < 0.0035
    # the two halves (cosine and sine of one angle) are uncorrelated
    assert abs(float(np.corrcoef(z[: n // 2], z[n // 2 :])[0, 1])) < 0.01


def test_box_muller_is_reproducible_from_the_seed() -> None:
    a, b = np.zeros(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
    standard_normal_f32(np.random.default_rng(9), a, np.zeros(32, dtype=np.float32))
    standard_normal_f32(np.random.default_rng(9), b, np.zeros(32, dtype=np.float32))
    np.testing.assert_array_equal(a, b)
