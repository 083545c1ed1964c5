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

import math
from dataclasses import dataclass, field, fields

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


POWER_NOISE = 0.004  # relative sd of a power reading
TEMP_NOISE_C = 0.05  # sd of a temperature reading
_NONE = np.zeros(0, dtype=np.intp)


def _thermal(gpu: Gpu, published: float | None, which: int) -> float:
    return published if published is not None else TWIN_THERMAL_ESTIMATE_C[gpu.model.vendor][which]


def standard_normal_f32(rng: np.random.Generator, out: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Fill `out` (float32, even length) with standard normal draws by the Box-Muller transform, `work` (half its
    length) as scratch. Some three times faster than numpy's ziggurat at the twin's sizes: uniform float32 draws and
    vectorized log, sqrt, sin and cos. 24-bit uniforms cut the tails at 5.8 sd (a 1-in-10^8 event).
    """
    m = out.size // 2
    radius, angle = out[:m], out[m:]
    rng.random(dtype=np.float32, out=radius)
    np.subtract(1.0, radius, out=radius)  # (0, 1]: the log is finite
    np.log(radius, out=radius)
    radius *= -2.0
    np.sqrt(radius, out=radius)
    rng.random(dtype=np.float32, out=angle)
    angle *= np.float32(2.0 * np.pi)
    np.cos(angle, out=work)
    np.sin(angle, out=angle)
    angle *= radius
    np.multiply(radius, work, out=radius)
    return out


class PhysicsScratch:
    """What `GpuArrays.advance` reuses every tick: float32 copies of the static facts it reads (fixed once the
    cluster is built) and the buffers it works in, so a tick allocates no whole-fleet arrays."""

    def __init__(self, g: GpuArrays) -> None:
        n = self.n = g.n

        def f32(a: np.ndarray | None = None) -> np.ndarray:
            return np.zeros(n, dtype=np.float32) if a is None else np.ascontiguousarray(a, dtype=np.float32)

        def mask() -> np.ndarray:
            return np.zeros(n, dtype=bool)

        self.idle_w = f32(g.idle_w)
        self.dyn_full_w = f32(FULL_LOAD_POWER_OVER_TDP * g.tdp_w - g.idle_w)
        self.max_clock = f32(g.max_clock)
        self.idle_ratio = f32(IDLE_SM_CLOCK_MHZ / g.max_clock)
        self.r_th = f32(THERMAL_HEADROOM_C / g.tdp_w)
        self.max_operating_c = f32(g.max_operating_c)
        self.slowdown_c = f32(g.slowdown_c)
        self.shutdown_c = f32(g.shutdown_c)
        self.u, self.dyn, self.cap, self.ratio, self.temp = f32(), f32(), f32(), f32(), f32()
        self.clock, self.power, self.limit, self.steady, self.cooling = f32(), f32(), f32(), f32(), f32()
        self.energy = np.zeros(n, dtype=np.float64)
        self.busy, self.idle, self.dead, self.capped = mask(), mask(), mask(), mask()
        self.busy_share = f32()
        self.idle_bits = np.zeros(n, dtype=np.uint32)
        self.sw_thermal, self.hw_thermal, self.over = mask(), mask(), mask()
        self.noise = np.zeros(2 * n, dtype=np.float32)
        self.noise_work = np.zeros(n, dtype=np.float32)

    def normals(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One standard normal draw per GPU for its power reading, one for its temperature."""
        z = standard_normal_f32(rng, self.noise, self.noise_work)
        return z[: self.n], z[self.n :]


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
    scratch: PhysicsScratch | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> tuple[None, dict[str, object]]:
        """Pickle the state, not the scratch buffers (rebuilt on the first step)."""
        return None, {f.name: getattr(self, f.name) for f in fields(self) if f.name != "scratch"}

    def __setstate__(self, state: tuple[None, dict[str, object]]) -> None:
        for name, value in state[1].items():
            object.__setattr__(self, name, value)
        self.scratch = None  # also where a GpuArrays pickled before it had one comes back

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
        s = self._scratch()
        power_noise, temp_noise = s.normals(rng)
        over = self.advance(dt, ambient_c, power_noise, temp_noise)
        self._count_errors(dt, rng)
        return over

    def _scratch(self) -> PhysicsScratch:
        s = self.scratch
        if s is None or s.n != self.n:
            s = self.scratch = PhysicsScratch(self)
        return s

    def advance(self, dt: float, ambient_c: float, power_noise: np.ndarray, temp_noise: np.ndarray) -> np.ndarray:
        """The deterministic part of :meth:`step`, given one standard normal draw per GPU for the power reading and
        one for the temperature. In place: float32 scratch for what is recomputed every tick, float64 for the state
        and the counters that accumulate.
        """
        s = self._scratch()
        alive = self.alive
        all_alive = bool(alive.all())
        # the lost GPUs by index (few): masked whole-array writes cost several times an arithmetic pass
        dead = None if all_alive else np.flatnonzero(np.logical_not(alive, out=s.dead))
        f32 = np.float32

        util = self.util
        np.copyto(util, self.demand_util)
        if dead is not None:
            util[dead] = 0.0
        # float32 work reads float64 state through copies: a ufunc mixing the two would allocate cast buffers
        u = s.u
        np.copyto(u, util, casting="same_kind")
        u *= 0.01
        busy = np.greater(u, 0.0, out=s.busy)
        all_busy = bool(busy.all())
        idle = None if all_busy else np.logical_not(busy, out=s.idle)

        # Power cap: p = idle + (1.05 tdp - idle) * u * (f/fmax)^2  ->  largest f with p <= limit. The clock is
        # carried as its ratio to the GPU's max clock: 1.0 asked by the work, less for every limiter.
        dyn = np.multiply(s.dyn_full_w, u, out=s.dyn)
        limit = s.limit
        np.copyto(limit, self.power_limit_w, casting="same_kind")
        cap = np.subtract(limit, s.idle_w, out=s.cap)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(cap, dyn, out=cap)
        np.maximum(cap, 0.0, out=cap)
        np.sqrt(cap, out=cap)
        capped = np.less(cap, 1.0, out=s.capped)
        capped &= busy
        ratio = np.fmin(cap, 1.0, out=s.ratio)  # NaN (0/0 on an idle GPU) reads as uncapped
        if idle is not None:  # the idle clock where idle, selected by arithmetic: finite either side
            np.copyto(s.busy_share, busy)
            ratio -= s.idle_ratio
            ratio *= s.busy_share
            ratio += s.idle_ratio

        events = self.clock_events
        np.copyto(events, capped, casting="unsafe")
        events *= np.uint32(bit("power_cap"))
        if idle is not None:
            idle_bits = s.idle_bits
            np.copyto(idle_bits, idle, casting="unsafe")
            idle_bits *= np.uint32(bit("gpu_idle"))
            events |= idle_bits

        # Software thermal slowdown above the max operating temperature, hardware slowdown near the limit: rare,
        # so worked out only on the GPUs past a threshold.
        temp = s.temp
        np.copyto(temp, self.temp_c, casting="same_kind")
        sw_thermal = np.greater(temp, s.max_operating_c, out=s.sw_thermal)
        hot = sw_thermal.any()
        if hot:
            k = np.flatnonzero(sw_thermal)
            sw_ratio = np.clip(1.0 - f32(0.04) * (temp[k] - s.max_operating_c[k]), 0.5, 1.0)
            ratio[k] = np.minimum(ratio[k], sw_ratio)
            events[k] |= np.uint32(bit("sw_thermal"))
        hw_thermal = np.greater_equal(temp, s.slowdown_c, out=s.hw_thermal)
        if hw_thermal.any():
            hot = True
            k = np.flatnonzero(hw_thermal)
            hw_ratio = np.clip(1.0 - f32(0.3) * (temp[k] - s.slowdown_c[k] + 1.0), 0.15, 1.0)
            ratio[k] = np.minimum(ratio[k], hw_ratio)
            events[k] |= np.uint32(bit("hw_thermal") | bit("hw_slowdown"))

        # External power brake (a rack PSU or BMC asserting the brake) pins clocks low.
        brake = self.power_brake
        braked = bool(brake.any())
        if braked:
            k = np.flatnonzero(brake)
            ratio[k] = np.minimum(ratio[k], 0.3)
            events[k] |= np.uint32(bit("hw_power_brake") | bit("hw_slowdown"))

        if dead is not None:
            ratio[dead] = 0.0
            events[dead] = 0
        clock = np.multiply(s.max_clock, ratio, out=s.clock)
        np.rint(clock, out=clock)
        np.copyto(self.sm_clock, clock)

        # An idle GPU has no dynamic power, so its clock ratio drops out.
        power = np.multiply(ratio, ratio, out=s.power)
        power *= dyn
        power += s.idle_w
        power_noise *= POWER_NOISE
        power_noise += 1.0
        power *= power_noise
        np.maximum(limit, s.idle_w, out=limit)
        np.minimum(power, limit, out=power)
        if dead is not None:
            power[dead] = 0.0
        np.copyto(self.power_w, power)

        # First-order thermal response, exact for a constant input over the step.
        decay = 1.0 - math.exp(-dt / THERMAL_TAU_S)  # a Python float: a numpy float64 would widen the float32 work
        steady = np.multiply(s.r_th, power, out=s.steady)
        np.copyto(s.cooling, self.cooling, casting="same_kind")
        steady /= s.cooling
        steady += ambient_c
        steady -= temp
        steady *= decay
        temp += steady
        temp_noise *= TEMP_NOISE_C
        temp += temp_noise
        np.copyto(self.temp_c, temp)
        mem_temp = np.multiply(u, 6.0, out=s.steady)
        mem_temp += 4.0
        mem_temp += temp
        np.copyto(self.mem_temp_c, mem_temp)

        ns = dt * 1e9
        np.multiply(self.power_w, dt * 1000.0, out=s.energy)
        self.energy_mj += s.energy
        if braked:
            capped |= brake
        if capped.all():
            self.power_violation_ns += ns
        elif capped.any():
            violated = s.energy
            np.copyto(violated, capped)
            violated *= ns
            self.power_violation_ns += violated
        if hot:
            self.thermal_violation_ns[np.flatnonzero(np.logical_or(sw_thermal, hw_thermal, out=sw_thermal))] += ns
        mem_copy = np.multiply(util, 0.45, out=self.mem_copy_util)
        np.clip(mem_copy, 0.0, 100.0, out=mem_copy)  # zero where idle: util is zero there
        fb = np.add(self.demand_fb_mib, FB_RESERVED_MIB, out=self.fb_used_mib)
        np.minimum(fb, self.memory_mib, out=fb)
        if dead is not None:
            fb[dead] = 0.0

        over = np.greater_equal(temp, s.shutdown_c, out=s.over)
        if dead is not None:
            over &= alive
        return np.flatnonzero(over) if over.any() else _NONE

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
