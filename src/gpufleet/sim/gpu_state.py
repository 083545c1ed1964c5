"""Per-GPU physics for the whole fleet at once: every field is a numpy array over all GPUs.

One `step(dt)` moves utilization, clocks, power, temperature and the error counters forward:

- Power follows utilization and the square of the SM clock between idle and a little above TDP, so a busy GPU can
  hit its power limit and lose clock to the software power cap, as real HGX boards do.
- Temperature is first order: it relaxes towards ambient + R * power / cooling with a time constant. A failed fan
  divides cooling; the clock then drops (thermal slowdown) once the slowdown threshold is crossed, which lowers
  power, which lowers temperature: the GPU settles around its slowdown temperature, clock oscillating.
- Above the shutdown temperature the GPU stops answering: it is lost, as a real one drops off the bus.
- Counters (energy, ECC, PCIe replay, NVLink errors, violation time) only grow, except where a reset clears the
  volatile ECC counts, as NVML's volatile counters do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.catalog.clock_events import clock_event_bit as bit
from gpufleet.model import Cluster, Gpu
from gpufleet.telemetry.frame import MAX_NVLINKS

IDLE_SM_CLOCK_MHZ = 345.0
THERMAL_TAU_S = 45.0
FULL_LOAD_POWER_OVER_TDP = 1.05  # unconstrained full load draws slightly above TDP; the power cap trims it
THERMAL_HEADROOM_C = 45.0  # steady-state rise above ambient at TDP with healthy cooling
FB_RESERVED_MIB = 574.0
# Where the catalog gives no thermal thresholds or clocks (vendors that publish none per model: AMD and Intel read
# them from the device at run time), the twin assumes these. Estimates, not facts: (max operating, slowdown,
# shutdown) in C, and (SM/graphics, memory) clocks in MHz.
TWIN_THERMAL_ESTIMATE_C = {"nvidia": (87.0, 90.0, 92.0), "amd": (95.0, 100.0, 110.0), "intel": (90.0, 95.0, 105.0)}
TWIN_CLOCK_ESTIMATE_MHZ = (1600.0, 1300.0)


def _thermal(gpu: Gpu, published: float | None, which: int) -> float:
    return published if published is not None else TWIN_THERMAL_ESTIMATE_C[gpu.model.vendor][which]


@dataclass(slots=True)
class GpuArrays:
    """Static facts and dynamic state of every GPU in the cluster, flattened in (node, index) order."""

    n: int
    node_of: np.ndarray  # int32, index into cluster.nodes
    index_on_node: np.ndarray
    tdp_w: np.ndarray
    idle_w: np.ndarray
    max_clock: np.ndarray
    slowdown_c: np.ndarray
    shutdown_c: np.ndarray
    max_operating_c: np.ndarray
    memory_mib: np.ndarray
    pcie_max_gen: np.ndarray
    pcie_max_width: np.ndarray
    nvlink_links: np.ndarray
    ampere_or_newer: np.ndarray  # row remapping instead of page retirement

    # workload inputs
    demand_util: np.ndarray
    demand_fb_mib: np.ndarray
    allocated: np.ndarray  # bool: some workload holds this GPU

    # dynamic state
    util: np.ndarray
    mem_copy_util: np.ndarray
    sm_clock: np.ndarray
    mem_clock: np.ndarray
    power_w: np.ndarray
    power_limit_w: np.ndarray
    temp_c: np.ndarray
    mem_temp_c: np.ndarray
    cooling: np.ndarray  # 1.0 healthy; a failed fan divides it
    power_brake: np.ndarray  # bool
    clock_events: np.ndarray  # uint32 clock-event bits (catalog/data/clock_events.csv)
    energy_mj: np.ndarray
    power_violation_ns: np.ndarray
    thermal_violation_ns: np.ndarray
    fb_used_mib: np.ndarray
    alive: np.ndarray  # bool: False once the GPU is off the bus
    wedged: np.ndarray  # bool: answers NVML but makes no progress until reset (after a fatal Xid)
    xid_last: np.ndarray

    ecc_sbe_vol: np.ndarray
    ecc_dbe_vol: np.ndarray
    ecc_sbe_agg: np.ndarray
    ecc_dbe_agg: np.ndarray
    sbe_rate_per_s: np.ndarray
    retired_sbe: np.ndarray
    retired_dbe: np.ndarray
    retired_pending: np.ndarray
    remap_correctable: np.ndarray
    remap_uncorrectable: np.ndarray
    remap_pending: np.ndarray  # bool
    remap_failure: np.ndarray  # bool

    pcie_gen: np.ndarray
    pcie_width: np.ndarray
    pcie_replay: np.ndarray
    pcie_replay_rate_per_s: np.ndarray

    nvlink_crc_flit: np.ndarray
    nvlink_crc_data: np.ndarray
    nvlink_replay: np.ndarray
    nvlink_recovery: np.ndarray
    nvlink_error_rate_per_s: np.ndarray
    nvlink_active: np.ndarray  # int: links up
    # per NVLink link (GPUs, MAX_NVLINKS): the same four counters as NVML keeps them per link
    # (nvmlDeviceGetNvLinkErrorCounter), the per-GPU ones above being their sums; a GPU's errors land on its failing
    # link (-1: none named, its first link)
    link_crc_flit: np.ndarray
    link_crc_data: np.ndarray
    link_replay: np.ndarray
    link_recovery: np.ndarray
    nvlink_failing: np.ndarray

    @classmethod
    def from_cluster(cls, cluster: Cluster, ambient_c: float) -> GpuArrays:
        rows = [(ni, gpu) for ni, node in enumerate(cluster.nodes) for gpu in node.gpus]
        n = len(rows)

        def col(fn: object, dtype: type = np.float64) -> np.ndarray:
            return np.array([fn(g) for _, g in rows], dtype=dtype)  # type: ignore[operator]

        f64 = lambda value=0.0: np.full(n, value, dtype=np.float64)  # noqa: E731
        i64 = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
        links = lambda: np.zeros((n, MAX_NVLINKS), dtype=np.int64)  # noqa: E731
        tdp = col(lambda g: g.model.tdp_w)
        nvlinks = col(lambda g: g.model.nvlink_links if g.nvlink_peers else 0, np.int64)
        return cls(
            n=n,
            node_of=np.array([ni for ni, _ in rows], dtype=np.int32),
            index_on_node=col(lambda g: g.index, np.int32),
            tdp_w=tdp,
            idle_w=col(lambda g: g.model.idle_w),
            max_clock=col(lambda g: g.model.max_sm_clock_mhz or TWIN_CLOCK_ESTIMATE_MHZ[0]),
            slowdown_c=col(lambda g: _thermal(g, g.model.slowdown_temp_c, 1)),
            shutdown_c=col(lambda g: _thermal(g, g.model.shutdown_temp_c, 2)),
            max_operating_c=col(lambda g: _thermal(g, g.model.max_operating_temp_c, 0)),
            memory_mib=col(lambda g: g.model.memory_mib),
            pcie_max_gen=col(lambda g: g.model.pcie_gen, np.int64),
            pcie_max_width=col(lambda g: g.model.pcie_width, np.int64),
            nvlink_links=nvlinks,
            ampere_or_newer=col(lambda g: g.model.compute_major >= 8, bool),
            demand_util=f64(),
            demand_fb_mib=f64(),
            allocated=np.zeros(n, dtype=bool),
            util=f64(),
            mem_copy_util=f64(),
            sm_clock=f64(IDLE_SM_CLOCK_MHZ),
            mem_clock=col(lambda g: g.model.max_mem_clock_mhz or TWIN_CLOCK_ESTIMATE_MHZ[1]),
            power_w=col(lambda g: g.model.idle_w),
            power_limit_w=tdp.copy(),
            temp_c=f64(ambient_c + 8.0),
            mem_temp_c=f64(ambient_c + 10.0),
            cooling=f64(1.0),
            power_brake=np.zeros(n, dtype=bool),
            clock_events=np.full(n, bit("gpu_idle"), dtype=np.uint32),
            energy_mj=f64(),
            power_violation_ns=f64(),
            thermal_violation_ns=f64(),
            fb_used_mib=f64(FB_RESERVED_MIB),
            alive=np.ones(n, dtype=bool),
            wedged=np.zeros(n, dtype=bool),
            xid_last=i64(),
            ecc_sbe_vol=i64(),
            ecc_dbe_vol=i64(),
            ecc_sbe_agg=i64(),
            ecc_dbe_agg=i64(),
            sbe_rate_per_s=f64(),
            retired_sbe=i64(),
            retired_dbe=i64(),
            retired_pending=i64(),
            remap_correctable=i64(),
            remap_uncorrectable=i64(),
            remap_pending=np.zeros(n, dtype=bool),
            remap_failure=np.zeros(n, dtype=bool),
            pcie_gen=col(lambda g: g.model.pcie_gen, np.int64),
            pcie_width=col(lambda g: g.model.pcie_width, np.int64),
            pcie_replay=i64(),
            pcie_replay_rate_per_s=f64(),
            nvlink_crc_flit=i64(),
            nvlink_crc_data=i64(),
            nvlink_replay=i64(),
            nvlink_recovery=i64(),
            nvlink_error_rate_per_s=f64(),
            nvlink_active=nvlinks.copy(),
            link_crc_flit=links(),
            link_crc_data=links(),
            link_replay=links(),
            link_recovery=links(),
            nvlink_failing=np.full(n, -1, dtype=np.int64),
        )

    def step(self, dt: float, ambient_c: float, rng: np.random.Generator) -> np.ndarray:
        """Advance physics by `dt` seconds. Returns the indices of GPUs that crossed their shutdown temperature."""
        alive = self.alive
        util = np.where(alive, self.demand_util, 0.0)
        self.util = util
        busy = util > 0.0
        u = util / 100.0
        max_clock = self.max_clock

        # Clock the workload asks for, then every limiter that can only lower it.
        clock = np.where(busy, max_clock, IDLE_SM_CLOCK_MHZ)
        events = np.where(busy, 0, bit("gpu_idle")).astype(np.uint32)

        # Power cap: p = idle + (1.05 tdp - idle) * u * (f/fmax)^2  ->  largest f with p <= limit.
        dyn = (FULL_LOAD_POWER_OVER_TDP * self.tdp_w - self.idle_w) * u
        with np.errstate(divide="ignore", invalid="ignore"):
            cap_ratio = np.sqrt(np.clip((self.power_limit_w - self.idle_w) / dyn, 0.0, None))
        capped = busy & (cap_ratio < clock / max_clock)
        clock = np.where(capped, max_clock * cap_ratio, clock)
        events |= np.where(capped, bit("power_cap"), 0).astype(np.uint32)

        # Software thermal slowdown above the max operating temperature, hardware slowdown near the limit.
        temp = self.temp_c
        sw_thermal = temp > self.max_operating_c
        sw_ratio = np.clip(1.0 - 0.04 * (temp - self.max_operating_c), 0.5, 1.0)
        clock = np.where(sw_thermal, np.minimum(clock, max_clock * sw_ratio), clock)
        events |= np.where(sw_thermal, bit("sw_thermal"), 0).astype(np.uint32)
        hw_thermal = temp >= self.slowdown_c
        hw_ratio = np.clip(1.0 - 0.3 * (temp - self.slowdown_c + 1.0), 0.15, 1.0)
        clock = np.where(hw_thermal, np.minimum(clock, max_clock * hw_ratio), clock)
        hw_bits = bit("hw_thermal") | bit("hw_slowdown")
        events |= np.where(hw_thermal, hw_bits, 0).astype(np.uint32)

        # External power brake (a rack PSU or BMC asserting the brake) pins clocks low.
        brake = self.power_brake
        clock = np.where(brake, np.minimum(clock, max_clock * 0.3), clock)
        brake_bits = bit("hw_power_brake") | bit("hw_slowdown")
        events |= np.where(brake, brake_bits, 0).astype(np.uint32)

        clock = np.where(alive, np.maximum(clock, 0.0), 0.0)
        self.sm_clock = np.round(clock)
        self.clock_events = np.where(alive, events, 0).astype(np.uint32)

        ratio = np.where(busy, clock / max_clock, 0.0)
        power = self.idle_w + dyn * ratio**2
        power = power * (1.0 + rng.normal(0.0, 0.004, self.n))
        power = np.where(alive, np.minimum(power, np.maximum(self.power_limit_w, self.idle_w)), 0.0)
        self.power_w = power

        # First-order thermal response, exact for a constant input over the step.
        r_th = THERMAL_HEADROOM_C / self.tdp_w
        steady = ambient_c + r_th * power / self.cooling
        decay = 1.0 - np.exp(-dt / THERMAL_TAU_S)
        self.temp_c = temp + (steady - temp) * decay + rng.normal(0.0, 0.05, self.n)
        self.mem_temp_c = self.temp_c + 4.0 + 6.0 * u

        self.energy_mj += power * dt * 1000.0
        self.power_violation_ns += np.where(capped | brake, dt * 1e9, 0.0)
        self.thermal_violation_ns += np.where(hw_thermal | sw_thermal, dt * 1e9, 0.0)
        self.mem_copy_util = np.where(busy, np.clip(util * 0.45, 0, 100), 0.0)
        self.fb_used_mib = np.where(alive, np.minimum(FB_RESERVED_MIB + self.demand_fb_mib, self.memory_mib), 0.0)

        self._count_errors(dt, rng)
        over = alive & (self.temp_c >= self.shutdown_c)
        return np.flatnonzero(over)

    def _count_errors(self, dt: float, rng: np.random.Generator) -> None:
        alive = self.alive
        if self.sbe_rate_per_s.any():
            sbe = rng.poisson(self.sbe_rate_per_s * dt) * alive
            self.ecc_sbe_vol += sbe
            self.ecc_sbe_agg += sbe
        if self.pcie_replay_rate_per_s.any():
            self.pcie_replay += rng.poisson(self.pcie_replay_rate_per_s * dt) * alive
        if self.nvlink_error_rate_per_s.any():
            lam = self.nvlink_error_rate_per_s * dt
            rows = np.flatnonzero(self.nvlink_links > 0)
            link = np.maximum(self.nvlink_failing[rows], 0)
            for total, per_link, share in (
                (self.nvlink_crc_flit, self.link_crc_flit, 1.0),
                (self.nvlink_crc_data, self.link_crc_data, 0.2),
                (self.nvlink_replay, self.link_replay, 0.1),
                (self.nvlink_recovery, self.link_recovery, 0.01),
            ):
                grown = rng.poisson(lam * share) * alive
                total += grown
                per_link[rows, link] += grown[rows]  # the GPU's total is the sum over its links, as NVML's

    # --- events the twin applies -------------------------------------------------------------------------

    def double_bit_error(self, i: int) -> None:
        """A DBE: counted, and either a row queued for remapping (Ampere+) or a page queued for retirement."""
        self.ecc_dbe_vol[i] += 1
        self.ecc_dbe_agg[i] += 1
        if self.ampere_or_newer[i]:
            self.remap_uncorrectable[i] += 1
            self.remap_pending[i] = True
        else:
            self.retired_dbe[i] += 1
            self.retired_pending[i] += 1

    def reset(self, i: int) -> None:
        """A GPU reset: volatile ECC counts clear, pending remaps/retirements take effect, clocks recover."""
        self.ecc_sbe_vol[i] = 0
        self.ecc_dbe_vol[i] = 0
        self.remap_pending[i] = False
        self.retired_pending[i] = 0
        self.power_brake[i] = False
        self.wedged[i] = False
        self.xid_last[i] = 0
