"""InfiniBand detectors against every threshold of theirs, on hand-built port counters and states: just short of each
one is quiet, just past it is exactly the expected finding. Thresholds come from the loaded defaults, pinned once."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.health.detectors.fabric import DISCARDS, DOWNED, RCV, SYMBOL, VL15, FabricDetectors
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, LinkEvent
from gpufleet.telemetry.fields import IB_PORT_RATE
from gpufleet.telemetry.frame import IbPort, MetricFrame

T0 = 1_800_000_000.0
NODE = "node-a"
T = load_thresholds()
IB = T.infiniband
SHORT, LONG = T.symbol_errors.windows  # 12 minutes at 1e-14, 125 minutes at 1e-15

Row = float | Sequence[float]
UP = (1.0, 1.0)


def port(i: int) -> Entity:
    return Entity(EntityKind.port, NODE, 1, f"mlx5_{i}")


def seen(findings: list[Finding]) -> set[tuple[RootCause, Entity, Severity]]:
    """Distinct (cause, entity, severity): a down seen by the state is reported with its "still down" line."""
    return {(f.cause, f.entity, f.severity) for f in findings}


class Ports:
    """Two ports of one node and their detectors; `at` fills one collection (all up, counters zero unless given)."""

    def __init__(self, speeds_gbps: Sequence[float] | None = None) -> None:
        ports = (IbPort("mlx5_0", 1, "0", NODE), IbPort("mlx5_1", 1, "1", NODE))
        self.frame = MetricFrame((), ports)
        self.speeds = np.asarray(speeds_gbps if speeds_gbps is not None else (400.0, 400.0), dtype=np.float64)
        self.detectors = FabricDetectors(self.frame, T)
        self.links: list[LinkEvent] = []

    def at(self, dt: float, up: tuple[float, float] = UP, counters: dict[str, Row] | None = None) -> list[Finding]:
        self.frame.clear_values()
        for metric in (SYMBOL, RCV, DOWNED, DISCARDS, VL15):
            self.frame.ib(metric)[:] = 0.0
        for metric, value in (counters or {}).items():
            self.frame.ib(metric)[:] = value
        self.frame.ib_up[:] = up
        self.frame.ib(IB_PORT_RATE)[:] = self.speeds * 1e9 / 8  # as sysfs gives it, every collection
        return self.detectors.detect(T0 + dt, NodeSeen(self.frame, links=self.links))


DOWN_1 = (1.0, 0.0)  # mlx5_1 down, mlx5_0 up


def test_the_documented_defaults() -> None:
    assert [(w.window_s, w.ber) for w in (SHORT, LONG)] == [(720, 1e-14), (7500, 1e-15)]
    assert IB.flap_window_s == 600
    assert (IB.rcv_errors_per_window, IB.xmit_discards_per_window, IB.vl15_dropped_per_window) == (10, 100, 100)
    assert IB.window_s == 600
    assert (SHORT.budget(400), LONG.budget(400)) == (pytest.approx(2.88), pytest.approx(3.0))


def test_healthy_ports_are_quiet() -> None:
    p = Ports()
    assert [p.at(k) for k in range(0, 1500, 5)] == [[]] * 300
    assert p.links == []


# -- link state and flaps ----------------------------------------------------------------------------------------


def test_a_port_leaving_active_is_a_critical_link_down_and_a_link_event() -> None:
    p = Ports()
    assert p.at(0) == []
    out = p.at(1, DOWN_1)
    assert seen(out) == {(RootCause.ib_link_down, port(1), Severity.critical)}
    assert [(e.hca, e.up) for e in p.links] == [("mlx5_1", False)]
    assert seen(p.at(2, DOWN_1)) == {(RootCause.ib_link_down, port(1), Severity.critical)}  # still down
    assert p.at(3) == [] and [(e.hca, e.up) for e in p.links][-1] == ("mlx5_1", True)


@pytest.mark.parametrize(("past", "cause"), [(0.0, RootCause.ib_link_flap), (1.0, RootCause.ib_link_down)])
def test_two_downs_within_the_flap_window_are_a_flapping_link(past: float, cause: RootCause) -> None:
    p = Ports()
    assert p.at(0) == []
    assert seen(p.at(1, DOWN_1)) == {(RootCause.ib_link_down, port(1), Severity.critical)}
    assert p.at(2) == []
    out = p.at(1 + IB.flap_window_s + past, DOWN_1)
    assert seen(out) == {(cause, port(1), Severity.critical)}


@pytest.mark.parametrize(("past", "cause"), [(0.0, RootCause.ib_link_flap), (1.0, RootCause.ib_link_down)])
def test_link_downed_counter_growth_is_a_down_too_short_for_the_state_to_show(past: float, cause: RootCause) -> None:
    p = Ports()
    assert p.at(0) == []
    assert seen(p.at(5, counters={DOWNED: [1, 0]})) == {(RootCause.ib_link_down, port(0), Severity.critical)}
    assert p.at(10, counters={DOWNED: [1, 0]}) == []  # the link is up: nothing goes on
    out = p.at(5 + IB.flap_window_s + past, counters={DOWNED: [2, 0]})
    assert seen(out) == {(cause, port(0), Severity.critical)}
    assert p.links == []


def test_the_state_and_the_counter_reporting_one_down_are_one_down_not_a_flap() -> None:
    p = Ports()
    assert p.at(0) == []
    assert seen(p.at(1, DOWN_1)) == {(RootCause.ib_link_down, port(1), Severity.critical)}
    assert seen(p.at(2, DOWN_1, {DOWNED: [0, 1]})) == {(RootCause.ib_link_down, port(1), Severity.critical)}


# -- symbol errors against the BER budget ------------------------------------------------------------------------


@pytest.mark.parametrize("speed", [400.0, 200.0])
@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_symbol_errors_over_the_ber_budget_of_the_port_speed(speed: float, extra: int, expect: bool) -> None:
    """400 Gb/s over 12 minutes at a BER of 1e-14 allows 2.88 errors: 2 are quiet, 3 are a bad link (critical, as
    the fabric service and triage judge it)."""
    p = Ports([speed, speed])
    allowed = math.floor(SHORT.budget(speed))
    assert allowed == (2 if speed == 400 else 1)
    assert p.at(0) == []
    out = p.at(SHORT.window_s, counters={SYMBOL: [0, allowed + extra]})
    assert seen(out) == ({(RootCause.ib_symbol_errors, port(1), Severity.critical)} if expect else set())


def test_symbol_errors_leave_the_count_after_the_symbol_window() -> None:
    p = Ports()
    burst: dict[str, Row] = {SYMBOL: [math.floor(SHORT.budget(400)) + 1, 0]}  # 3: within 125 minutes' 3.0
    assert p.at(0) == []
    for k in range(5, int(SHORT.window_s), 5):
        assert seen(p.at(k, counters=burst)) == {(RootCause.ib_symbol_errors, port(0), Severity.critical)}
    assert seen(p.at(SHORT.window_s, counters=burst)) == {(RootCause.ib_symbol_errors, port(0), Severity.critical)}
    assert p.at(SHORT.window_s + 5, counters=burst) == []


def test_symbol_errors_over_the_125_minute_budget_only_are_a_warning_until_it_passes() -> None:
    p = Ports()
    burst: dict[str, Row] = {SYMBOL: [4, 0]}  # over 2.88 in 12 minutes, and over 3.0 in 125
    assert p.at(0) == []
    assert seen(p.at(5, counters=burst)) == {(RootCause.ib_symbol_errors, port(0), Severity.critical)}
    for k in range(10, int(LONG.window_s) + 5, 5):
        found = p.at(k, counters=burst)
        if k <= SHORT.window_s:
            continue
        assert seen(found) == {(RootCause.ib_symbol_errors, port(0), Severity.warning)}, k
        assert "4 in 125 min" in found[0].evidence and "over 1e-15" in found[0].evidence
    assert p.at(LONG.window_s + 5, counters=burst) == []


@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_a_port_of_unknown_rate_is_held_against_the_counters_threshold(extra: int, expect: bool) -> None:
    """No rate in the frame (sysfs did not say): no bit error rate can be told, so the count within the shortest
    window is held against infiniband-diags' threshold, as health.symbol_errors and the no-rate alert rule do."""
    p = Ports([math.nan, math.nan])
    threshold = load_ib_counters()["SymbolErrorCounter"].threshold or 0
    assert p.at(0) == []
    out = p.at(60, counters={SYMBOL: [0, threshold + extra]})
    assert seen(out) == ({(RootCause.ib_symbol_errors, port(1), Severity.warning)} if expect else set())


# -- receive errors, transmit discards, VL15 drops per window ----------------------------------------------------

PER_WINDOW = [
    (RCV, IB.rcv_errors_per_window, RootCause.ib_symbol_errors, "receive errors"),
    (DISCARDS, IB.xmit_discards_per_window, RootCause.ib_congestion, "transmit discards"),
    (VL15, IB.vl15_dropped_per_window, RootCause.ib_congestion, "VL15 drops"),
]


@pytest.mark.parametrize(("metric", "limit", "cause", "what"), PER_WINDOW)
@pytest.mark.parametrize(("extra", "expect"), [(0, False), (1, True)])
def test_port_errors_over_their_threshold_per_window(
    metric: str, limit: float, cause: RootCause, what: str, extra: int, expect: bool
) -> None:
    p = Ports()
    assert p.at(0) == []
    out = p.at(IB.window_s, counters={metric: [0, limit + extra]})
    assert seen(out) == ({(cause, port(1), Severity.warning)} if expect else set())
    assert all(what in f.summary for f in out)


@pytest.mark.parametrize(("metric", "limit", "cause", "what"), PER_WINDOW)
def test_port_errors_leave_the_count_after_the_window(metric: str, limit: float, cause: RootCause, what: str) -> None:
    p = Ports()
    burst: dict[str, Row] = {metric: [limit + 1, 0]}
    assert p.at(0) == []
    for k in range(5, int(IB.window_s), 5):
        p.at(k, counters=burst)
    assert seen(p.at(IB.window_s, counters=burst)) == {(cause, port(0), Severity.warning)}
    assert p.at(IB.window_s + 5, counters=burst) == []


def test_discards_counted_while_the_link_was_down_stay_the_links_once_it_is_back() -> None:
    """PortXmitDiscards counts what a port discarded "because the port is down or congested": those of readings
    that saw the link down, or a down too short for the state, are the link's for as long as the window holds them;
    discards on the working link afterwards are congestion again."""
    p = Ports()
    lost = IB.xmit_discards_per_window * 10
    assert p.at(0) == []
    assert seen(p.at(5, DOWN_1, {DISCARDS: [0, lost]})) == {(RootCause.ib_link_down, port(1), Severity.critical)}
    assert p.at(10, counters={DISCARDS: [0, lost]}) == []  # back up
    brief = {DOWNED: [1, 0], DISCARDS: [lost, lost]}  # mlx5_0 down and back between two readings
    assert seen(p.at(15, counters=brief)) == {(RootCause.ib_link_down, port(0), Severity.critical)}
    for k in range(20, int(IB.window_s), 5):
        assert p.at(k, counters={DOWNED: [1, 0], DISCARDS: [lost, lost]}) == []
    more = IB.xmit_discards_per_window + 1
    out = p.at(IB.window_s, counters={DOWNED: [1, 0], DISCARDS: [lost + more, lost]})
    assert seen(out) == {(RootCause.ib_congestion, port(0), Severity.warning)}
    assert f"{more:.0f} transmit discards in" in out[0].evidence


def test_discards_counted_between_the_downs_of_a_flap_stay_the_flap_s_once_it_is_over() -> None:
    """A flapping link's port discards while it is up between downs too: those are the flap's, as the fabric
    service judges them, for as long as the window holds them."""
    p = Ports()
    lost = IB.xmit_discards_per_window * 10
    assert p.at(0) == []
    p.at(5, counters={DOWNED: [1, 0]})
    assert {c for c, *_ in seen(p.at(10, counters={DOWNED: [2, 0]}))} == {RootCause.ib_link_flap}
    assert p.at(15, counters={DOWNED: [2, 0], DISCARDS: [lost, 0]}) == []  # up between downs, discarding
    for k in range(20, int(IB.window_s), 5):
        assert not [
            f for f in p.at(k, counters={DOWNED: [2, 0], DISCARDS: [lost, 0]}) if f.cause is RootCause.ib_congestion
        ]


@pytest.mark.parametrize(("metric", "limit", "cause", "what"), PER_WINDOW)
def test_port_errors_on_a_down_link_are_the_links_fault(metric: str, limit: float, cause: RootCause, what: str) -> None:
    p = Ports()
    assert p.at(0) == []
    out = p.at(IB.window_s, DOWN_1, {metric: [0, limit + 1]})
    assert seen(out) == {(RootCause.ib_link_down, port(1), Severity.critical)}
