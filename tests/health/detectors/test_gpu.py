"""GPU detectors against every threshold of theirs, on hand-built frames: just short of each one is quiet, just past it
is exactly one finding. Thresholds are read from the loaded defaults; the defaults themselves are pinned once."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from gpufleet.health.detectors.gpu import HW_POWER_BRAKE, HW_THERMAL, GpuDetectors
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.attribution import Attribution
from gpufleet.model.observe import Finding
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

T0 = 1_800_000_000.0
NODE = "node-a"
T = load_thresholds()

UTIL, TEMP, CLOCK, REASONS = (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
)  # fmt: skip
VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
DBE, SBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
RETIRED_SBE, RETIRED_DBE, PENDING = "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING"
REMAP_FAILURE, UNC_ROWS = "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
GEN, MAX_GEN = "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"
WIDTH, MAX_WIDTH = "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"
REPLAYS = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
CRC_FLIT, CRC_DATA = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
MAX_CLOCK = 1980.0

HEALTHY: dict[str, float] = {
    UTIL: 90.0, TEMP: 60.0, CLOCK: MAX_CLOCK, REASONS: 0.0, VIOLATION: 0.0, DBE: 0.0, SBE: 0.0, RETIRED_SBE: 0.0,
    RETIRED_DBE: 0.0, PENDING: 0.0, REMAP_FAILURE: 0.0, UNC_ROWS: 0.0, GEN: 5.0, MAX_GEN: 5.0, WIDTH: 16.0,
    MAX_WIDTH: 16.0, REPLAYS: 0.0, CRC_FLIT: 0.0, CRC_DATA: 0.0, RECOVERY: 0.0,
}  # fmt: skip

Row = float | Sequence[float]


def gpu(i: int) -> Entity:
    return Entity(EntityKind.gpu, NODE, i)


def seen(findings: list[Finding]) -> list[tuple[RootCause, Entity, Severity]]:
    return [(f.cause, f.entity, f.severity) for f in findings]


class Gpus:
    """A node's GPUs and their detectors; `at` fills one collection (healthy unless overridden) and observes it."""

    def __init__(self, n: int = 2) -> None:
        self.frame = MetricFrame(tuple(GpuEntity(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", NODE) for i in range(n)))
        self.detectors = GpuDetectors(self.frame, T)

    def at(self, dt: float, rows: dict[str, Row] | None = None) -> list[Finding]:
        self.frame.clear_values()
        for name, value in (HEALTHY | (rows or {})).items():
            self.frame.gpu(name)[:] = value
        return self.detectors.detect(T0 + dt, NodeSeen(self.frame))


def test_the_documented_defaults() -> None:
    assert (T.ecc.sbe_per_minute, T.ecc.retired_pages_limit, T.ecc.retired_pages_soft) == (10, 63, 15)
    assert T.ecc.uncorrectable_remapped_rows_limit == 512
    assert (T.thermal.hold_s, T.thermal.window_s, T.thermal.clock_ratio) == (10, 30, 0.9)
    assert (T.thermal.idle_excess_c, T.thermal.idle_hold_s) == (8, 300)
    assert T.power_brake.hold_s == 3
    assert T.pcie.window_s == 60
    assert T.pcie.replays_per_lane_per_minute == [0.15, 0.3, 0.48, 0.96, 1.92, 3.84]
    assert (T.nvlink.window_s, T.nvlink.crc_errors_per_minute, T.nvlink.recovery_errors_per_minute) == (60, 100, 1)
    assert (T.idle.util_percent, T.idle.hold_s) == (5, 600)


def test_a_healthy_node_is_quiet() -> None:
    g = Gpus()
    assert [g.at(k) for k in range(0, 120, 5)] == [[]] * 24


# -- ECC ---------------------------------------------------------------------------------------------------------


def test_a_new_double_bit_error_is_critical_once_and_a_reset_counter_rearms_it() -> None:
    g = Gpus()
    assert g.at(0) == []
    assert seen(g.at(1, {DBE: [0, 1]})) == [(RootCause.ecc_dbe, gpu(1), Severity.critical)]
    assert g.at(2, {DBE: [0, 1]}) == []
    assert g.at(3, {DBE: [0, 0]}) == []  # a GPU reset clears the volatile count
    assert seen(g.at(4, {DBE: [0, 1]})) == [(RootCause.ecc_dbe, gpu(1), Severity.critical)]


@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_single_bit_errors_over_the_dcgm_rate(extra: int, expect: bool) -> None:
    """Over a full minute the rate is the growth itself: the limit is quiet, one more is a storm."""
    g = Gpus()
    limit = T.ecc.sbe_per_minute
    assert g.at(0) == []
    assert g.at(30, {SBE: [0, limit / 2]}) == []  # exactly the limit's rate over half a minute
    out = g.at(60, {SBE: [0, limit + extra]})
    assert seen(out) == ([(RootCause.ecc_sbe_rate, gpu(1), Severity.warning)] if expect else [])


def test_single_bit_errors_are_judged_over_a_sliding_minute_and_not_before_30_s() -> None:
    g = Gpus()
    burst = 2 * T.ecc.sbe_per_minute
    assert g.at(0) == []
    assert g.at(29, {SBE: [0, burst]}) == []  # under 30 s of history: no rate yet
    assert seen(g.at(30, {SBE: [0, burst]})) == [(RootCause.ecc_sbe_rate, gpu(1), Severity.warning)]
    for k in range(31, 60):
        g.at(k, {SBE: [0, burst]})
    assert seen(g.at(60, {SBE: [0, burst]})) == [(RootCause.ecc_sbe_rate, gpu(1), Severity.warning)]
    assert g.at(61, {SBE: [0, burst]}) == []  # the burst has left the minute


def test_a_row_remap_failure_is_critical() -> None:
    g = Gpus()
    assert g.at(0) == []
    assert seen(g.at(1, {REMAP_FAILURE: [1, 0]})) == [(RootCause.row_remap_failure, gpu(0), Severity.critical)]


@pytest.mark.parametrize(("below", "expect"), [(1, False), (0, True)])
def test_uncorrectable_remapped_rows_at_the_limit(below: int, expect: bool) -> None:
    g = Gpus()
    out = g.at(0, {UNC_ROWS: [0, T.ecc.uncorrectable_remapped_rows_limit - below]})
    assert seen(out) == ([(RootCause.row_remap_failure, gpu(1), Severity.critical)] if expect else [])


@pytest.mark.parametrize(
    ("sbe_pages", "dbe_pages", "pending", "expect"),
    [
        (T.ecc.retired_pages_limit - 1 - 10, 10, 0, False),  # one short of the hard limit, SBE and DBE pages summed
        (T.ecc.retired_pages_limit - 10, 10, 0, True),
        (T.ecc.retired_pages_limit - 1, 0, 1, True),  # over the soft limit with one pending
        (T.ecc.retired_pages_soft - 1, 0, 1, False),  # one short of the soft limit, pending
        (T.ecc.retired_pages_soft, 0, 1, True),
        (T.ecc.retired_pages_soft, 0, 0, False),  # the soft limit without a pending retirement
    ],
)
def test_retired_pages_over_the_hard_limit_or_the_soft_one_with_a_retirement_pending(
    sbe_pages: int, dbe_pages: int, pending: int, expect: bool
) -> None:
    g = Gpus()
    out = g.at(0, {RETIRED_SBE: [0, sbe_pages], RETIRED_DBE: [0, dbe_pages], PENDING: [0, pending]})
    assert seen(out) == ([(RootCause.retired_pages, gpu(1), Severity.critical)] if expect else [])


# -- thermal -----------------------------------------------------------------------------------------------------


def slowed(clock: float) -> dict[str, Row]:
    return {REASONS: [0, HW_THERMAL], CLOCK: [MAX_CLOCK, clock], TEMP: [60, 88]}


def test_thermal_slowdown_held_for_the_hold_time_with_the_clock_down() -> None:
    g = Gpus()
    down = 0.8 * MAX_CLOCK
    assert g.at(0) == []
    assert g.at(1, slowed(down)) == []
    assert g.at(1 + T.thermal.hold_s - 0.5, slowed(down)) == []
    out = g.at(1 + T.thermal.hold_s, slowed(down))
    assert seen(out) == [(RootCause.thermal, gpu(1), Severity.warning)]
    assert out[0].action == "POWER_CAP_AND_TICKET"


def test_an_interrupted_thermal_slowdown_starts_its_hold_again() -> None:
    g = Gpus()
    down = 0.8 * MAX_CLOCK
    assert g.at(0) == []
    assert g.at(1, slowed(down)) == []
    assert g.at(1 + T.thermal.hold_s - 1, slowed(down)) == []
    assert g.at(1 + T.thermal.hold_s - 0.5) == []
    assert g.at(1 + T.thermal.hold_s, slowed(down)) == []


@pytest.mark.parametrize(("dip", "expect"), [(0.0, False), (1.0, True)])
def test_thermal_slowdown_counts_only_with_the_clock_below_its_share_of_the_maximum(dip: float, expect: bool) -> None:
    g = Gpus()
    clock = T.thermal.clock_ratio * MAX_CLOCK - dip
    assert g.at(0) == []
    assert g.at(1, slowed(clock)) == []
    out = g.at(1 + T.thermal.hold_s, slowed(clock))
    assert seen(out) == ([(RootCause.thermal, gpu(1), Severity.warning)] if expect else [])


@pytest.mark.parametrize(("short_s", "expect"), [(0.5, False), (0.0, True)])
def test_thermal_violation_time_in_the_window(short_s: float, expect: bool) -> None:
    """A GPU dropping in and out of slowdown never holds it continuously; DCGM's violation time (ns) catches it."""
    g = Gpus()
    violated_ns = (T.thermal.hold_s - short_s) * 1e9
    assert g.at(0) == []
    out = g.at(T.thermal.window_s, {VIOLATION: [0, violated_ns]})
    assert seen(out) == ([(RootCause.thermal, gpu(1), Severity.warning)] if expect else [])


def test_thermal_violation_time_leaves_the_window_after_window_s() -> None:
    g = Gpus()
    ns = T.thermal.hold_s * 1e9
    assert g.at(0) == []
    assert seen(g.at(1, {VIOLATION: [0, ns]})) == [(RootCause.thermal, gpu(1), Severity.warning)]
    for k in range(2, int(T.thermal.window_s)):
        g.at(k, {VIOLATION: [0, ns]})
    assert seen(g.at(T.thermal.window_s, {VIOLATION: [0, ns]})) == [(RootCause.thermal, gpu(1), Severity.warning)]
    assert g.at(T.thermal.window_s + 1, {VIOLATION: [0, ns]}) == []  # the tick before the burst slid out


def idle_hot(neighbours: tuple[float, ...], hot: float, util: float = 0.0) -> dict[str, Row]:
    return {UTIL: [0.0] * len(neighbours) + [util], TEMP: [*neighbours, hot]}


@pytest.mark.parametrize(
    ("neighbours", "node_median"),
    [((40.0, 40.0, 40.0), 40.0), ((40.0, 41.0, 40.0), 40.5)],  # the node's idle median counts the hot GPU too
)
@pytest.mark.parametrize(("over", "expect"), [(0.0, False), (0.5, True)])
def test_an_idle_gpu_hotter_than_its_idle_neighbours_for_the_hold_has_lost_its_cooling(
    neighbours: tuple[float, ...], node_median: float, over: float, expect: bool
) -> None:
    g = Gpus(4)
    rows = idle_hot(neighbours, node_median + T.thermal.idle_excess_c + over)
    assert g.at(0, rows) == []
    assert g.at(T.thermal.idle_hold_s - 0.5, rows) == []
    out = g.at(T.thermal.idle_hold_s, rows)
    assert seen(out) == ([(RootCause.thermal, gpu(3), Severity.warning)] if expect else [])
    assert all("cooling fault" in f.summary for f in out)


def test_a_hot_gpu_at_the_idle_utilization_floor_is_working_not_idle() -> None:
    hot = 40 + T.thermal.idle_excess_c + 5
    g = Gpus(4)
    working = idle_hot((40, 40, 40), hot, util=T.idle.util_percent)
    assert g.at(0, working) == [] and g.at(T.thermal.idle_hold_s, working) == []
    g = Gpus(4)
    idle = idle_hot((40, 40, 40), hot, util=T.idle.util_percent - 1)
    assert g.at(0, idle) == []
    assert seen(g.at(T.thermal.idle_hold_s, idle)) == [(RootCause.thermal, gpu(3), Severity.warning)]


# -- power brake -------------------------------------------------------------------------------------------------


def test_the_power_brake_held_for_its_hold_time() -> None:
    g = Gpus()
    brake: dict[str, Row] = {REASONS: [HW_POWER_BRAKE, 0]}
    assert g.at(0) == []
    assert g.at(1, brake) == []
    assert g.at(1 + T.power_brake.hold_s - 0.5, brake) == []
    out = g.at(1 + T.power_brake.hold_s, brake)
    assert seen(out) == [(RootCause.power_brake, gpu(0), Severity.warning)]


# -- PCIe --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gen", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_pcie_replays_over_the_per_lane_budget_of_the_generation(gen: int, extra: int, expect: bool) -> None:
    """Over a full window the rate is the growth: DCGM's budget is ceil(rate per lane x lanes) a minute."""
    g = Gpus()
    link: dict[str, Row] = {GEN: gen, MAX_GEN: gen}
    budget = math.ceil(T.pcie.replays_per_lane_per_minute[gen - 1] * 16)
    assert g.at(0, link) == []
    out = g.at(T.pcie.window_s, link | {REPLAYS: [budget + extra, 0]})
    assert seen(out) == ([(RootCause.pcie, gpu(0), Severity.warning)] if expect else [])


def test_the_pcie_budget_scales_with_the_link_width() -> None:
    g = Gpus()
    x8: dict[str, Row] = {WIDTH: 8, MAX_WIDTH: 8}
    budget = math.ceil(T.pcie.replays_per_lane_per_minute[4] * 8)  # Gen5 x8: 16, where x16 allows 31
    assert budget == 16
    assert g.at(0, x8) == []
    assert seen(g.at(T.pcie.window_s, x8 | {REPLAYS: [budget + 1, 0]})) == [(RootCause.pcie, gpu(0), Severity.warning)]


def test_pcie_replays_leave_the_window_after_window_s() -> None:
    g = Gpus()
    over = 2 * math.ceil(T.pcie.replays_per_lane_per_minute[4] * 16)  # over even measured over a longer window
    assert g.at(0) == []
    for k in range(1, int(T.pcie.window_s)):
        g.at(k, {REPLAYS: [over, 0]})
    assert seen(g.at(T.pcie.window_s, {REPLAYS: [over, 0]})) == [(RootCause.pcie, gpu(0), Severity.warning)]
    assert g.at(T.pcie.window_s + 1, {REPLAYS: [over, 0]}) == []


@pytest.mark.parametrize(("rows", "expect"), [({GEN: [4, 5]}, True), ({WIDTH: [16, 8]}, True), ({}, False)])
def test_a_pcie_link_below_its_maximum_generation_or_width(rows: dict[str, Row], expect: bool) -> None:
    out = Gpus().at(0, rows)
    assert seen(out) == ([(RootCause.pcie, gpu(1 if rows.get(WIDTH) else 0), Severity.warning)] if expect else [])


# -- NVLink ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_nvlink_crc_errors_flit_and_data_together_over_the_limit(extra: int, expect: bool) -> None:
    g = Gpus()
    limit = int(T.nvlink.crc_errors_per_minute)
    assert g.at(0) == []
    out = g.at(T.nvlink.window_s, {CRC_FLIT: [0, limit // 2], CRC_DATA: [0, limit - limit // 2 + extra]})
    assert seen(out) == ([(RootCause.nvlink, gpu(1), Severity.warning)] if expect else [])


@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_nvlink_recovery_errors_over_the_limit(extra: int, expect: bool) -> None:
    g = Gpus()
    assert g.at(0) == []
    out = g.at(T.nvlink.window_s, {RECOVERY: [T.nvlink.recovery_errors_per_minute + extra, 0]})
    assert seen(out) == ([(RootCause.nvlink, gpu(0), Severity.warning)] if expect else [])


@pytest.mark.parametrize("counter", [CRC_FLIT, RECOVERY])
def test_nvlink_errors_leave_the_window_after_window_s(counter: str) -> None:
    g = Gpus()
    limit = T.nvlink.crc_errors_per_minute if counter == CRC_FLIT else T.nvlink.recovery_errors_per_minute
    over: dict[str, Row] = {counter: [0, 2 * limit + 1]}  # over the limit even measured over a longer window
    assert g.at(0) == []
    for k in range(1, int(T.nvlink.window_s)):
        g.at(k, over)
    assert seen(g.at(T.nvlink.window_s, over)) == [(RootCause.nvlink, gpu(1), Severity.warning)]
    assert g.at(T.nvlink.window_s + 1, over) == []


# -- idle --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("util", "expect"), [(T.idle.util_percent, False), (T.idle.util_percent - 1, True)])
def test_a_held_gpu_under_the_utilization_floor_for_the_hold_is_idle(util: float, expect: bool) -> None:
    g = Gpus()
    g.frame.set_attribution(1, Attribution("trainer-0", "ml", "main"))
    rows: dict[str, Row] = {UTIL: [0, util]}  # GPU 0 is idle too but nobody holds it
    assert g.at(0, rows) == []
    assert g.at(T.idle.hold_s - 0.5, rows) == []
    out = g.at(T.idle.hold_s, rows)
    assert seen(out) == ([(RootCause.idle_gpu, gpu(1), Severity.info)] if expect else [])
    if expect:
        assert out[0].effect and out[0].began == T0 and "ml/trainer-0" in out[0].summary


@pytest.mark.parametrize("counter", [SBE, REPLAYS, CRC_FLIT, RECOVERY, VIOLATION])
def test_a_missed_reading_of_a_lifetime_counter_is_not_a_burst(counter: str) -> None:
    """A counter read as NaN once and then at its old value again has not grown."""
    g = Gpus()
    lifetime: dict[str, Row] = {counter: [0, 5e12 if counter == VIOLATION else 5000]}
    assert [g.at(k, lifetime) for k in range(0, 30, 5)] == [[]] * 6
    assert g.at(30, {counter: [0, float("nan")]}) == []
    assert [g.at(k, lifetime) for k in range(35, 120, 5)] == [[]] * 17


def test_a_missed_reading_of_the_double_bit_count_is_not_a_new_error() -> None:
    g = Gpus()
    assert seen(g.at(0, {DBE: [0, 2]})) == [(RootCause.ecc_dbe, gpu(1), Severity.critical)]
    assert g.at(1, {DBE: [0, float("nan")]}) == []
    assert g.at(2, {DBE: [0, 2]}) == []
    assert seen(g.at(3, {DBE: [0, 3]})) == [(RootCause.ecc_dbe, gpu(1), Severity.critical)]


# -- NVLink per link, recovery action, fabric ---------------------------------------------------------------------

LINK_FLIT, LINK_DATA = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_PER_LINK_TOTAL",
)
LINK_RECOVERY = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_PER_LINK_TOTAL"


def _links(g: Gpus, t: float, flit: dict[int, float], totals: Row) -> list[Finding]:
    """GPU 1's links: 18 at zero but those in `flit`; the per-GPU totals as given."""
    g.frame.clear_values()
    for name, value in (HEALTHY | {CRC_FLIT: totals}).items():
        g.frame.gpu(name)[:] = value
    for name in (LINK_FLIT, LINK_DATA, LINK_RECOVERY):
        g.frame.link(name)[:] = 0.0
    for link, value in flit.items():
        g.frame.link(LINK_FLIT)[1, link] = value
    return g.detectors.detect(T0 + t, NodeSeen(g.frame))


def test_the_link_whose_crc_errors_climb_is_named() -> None:
    g = Gpus()
    over = T.nvlink.crc_errors_per_minute + 1
    assert _links(g, 0, {}, [0, 0]) == []
    out = _links(g, T.nvlink.window_s, {7: over, 3: 2}, [0, over + 2])
    assert seen(out) == [(RootCause.nvlink, gpu(1), Severity.warning)]
    assert out[0].summary.endswith("link 7") and "link 7 (" in out[0].evidence and "link 3" not in out[0].evidence


def test_per_gpu_totals_judge_alone_where_no_link_is_over() -> None:
    g = Gpus()
    each = T.nvlink.crc_errors_per_minute // 2 + 1  # two links, each under the limit, together over it
    assert _links(g, 0, {}, [0, 0]) == []
    out = _links(g, T.nvlink.window_s, {1: each, 2: each}, [0, 2 * each])
    assert seen(out) == [(RootCause.nvlink, gpu(1), Severity.warning)]
    assert "link" not in out[0].summary.removeprefix("NVLink errors on")


@pytest.mark.parametrize(("state", "action", "severity"), [(0, None, None), (1, "RESET_GPU", Severity.critical),
                                                           (3, "DRAIN_P2P", None)])  # fmt: skip
def test_the_recovery_action_is_judged_as_xid_154_announcing_it(
    state: int, action: str | None, severity: Severity | None
) -> None:
    from gpufleet.health.xid_policy import recovery_state_verdict
    from gpufleet.health.xid_rating import finding_severity

    g = Gpus()
    out = g.at(0, {"DCGM_FI_DEV_GPU_RECOVERY_ACTION": [0, state]})
    if state == 0:
        assert out == []
        return
    verdict = recovery_state_verdict(state)
    assert seen(out) == [(RootCause.recovery_action, gpu(1), finding_severity(verdict))]
    assert out[0].action == verdict.action.value
    if action is not None:
        assert out[0].action == action
    if severity is not None:
        assert out[0].severity is severity


def test_a_pending_row_remap_is_judged_as_memory_health() -> None:
    g = Gpus()
    out = g.at(0, {"DCGM_FI_DEV_ROW_REMAP_PENDING": [0, 1]})
    assert [f.entity for f in out] == [gpu(1)] or out == []  # judge_memory decides whether a pending remap is filed
    from gpufleet.health.gpu_memory import MemoryReading, judge_memory

    filed = [i for i in judge_memory(MemoryReading(remap_pending=True), T.ecc) if i.filed]
    assert len(out) == len(filed)


def test_a_failed_fabric_registration_is_critical_at_once() -> None:
    g = Gpus()
    out = g.at(0, {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS": [3, 4]})
    assert seen(out) == [(RootCause.nvlink, gpu(1), Severity.critical)]
    assert out[0].action == "RESTART_FM"


def test_a_registration_not_done_within_the_hold_is_a_warning() -> None:
    from gpufleet.health.nvlink import FABRIC_HOLD_S

    g = Gpus()
    rows: dict[str, Row] = {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS": [0, 1]}  # GPU 0: no NVSwitch fabric
    assert g.at(0, rows) == []
    assert g.at(FABRIC_HOLD_S - 1, rows) == []
    assert seen(g.at(FABRIC_HOLD_S, rows)) == [(RootCause.nvlink, gpu(1), Severity.warning)]
    assert g.at(FABRIC_HOLD_S + 1, {"DCGM_FI_DEV_FABRIC_MANAGER_STATUS": [0, 3]}) == []
