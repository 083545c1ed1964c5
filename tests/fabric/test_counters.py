"""Port counters into deltas: resets, 64-bit wraps, saturated PortCounters, silent ports, ibqueryerrors' sparse
listing, old and new counter names, and the readers' outputs (real infiniband-diags captures) as readings."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.errors import UserError
from gpufleet.fabric.counters import (
    INFERRED,
    CounterTracker,
    Deltas,
    Readings,
    counter_columns,
    ends_by_lid,
    readings_from_ibqueryerrors,
    readings_from_perfquery,
    readings_from_sysfs,
    resolve_counter,
)
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End
from gpufleet.fabric.port_health import PortHealth
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover, parse_ibqueryerrors, parse_perfquery
from tests.conftest import CAPTURES

IBSIM = CAPTURES / "ibsim"
NODE01 = End("node01/mlx5_0", 1)
LEAF = End("leaf1", 35)
T0 = 1_800_000_000.0


def ibsim(name: str) -> str:
    return (IBSIM / name).read_text(encoding="utf-8")


def poll(tracker: CounterTracker, time: float, ports: dict[End, dict[str, int]], **kwargs: object) -> Deltas:
    return tracker.update(time, Readings.from_mapping(ports, **kwargs))  # type: ignore[arg-type]


# --- names ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pma", "says_64"),
    [
        ("SymbolErrors", "SymbolErrorCounter", False),
        ("SymbolErrorCounter", "SymbolErrorCounter", False),
        ("XmtDiscards", "PortXmitDiscards", False),
        ("PortXmitDiscards", "PortXmitDiscards", False),
        ("port_xmit_discards", "PortXmitDiscards", False),
        ("LinkDowned", "LinkDownedCounter", False),
        ("LinkDownedCounterExt", "LinkDownedCounter", True),
        ("PortRcvPktsExtended", "PortRcvPkts", True),
        ("SymbolErrorsExt", "SymbolErrorCounter", True),
    ],
)
def test_counter_names_old_new_sysfs_and_extended(name: str, pma: str, says_64: bool) -> None:
    assert resolve_counter(name) == (pma, says_64)


def test_a_name_the_catalog_lacks_is_none_and_left_out_of_readings() -> None:
    assert resolve_counter("QP1Dropped") is None
    readings = Readings.from_mapping({NODE01: {"QP1Dropped": 4, "SymbolErrors": 2}})
    assert readings.as_mapping() == {NODE01: {"SymbolErrorCounter": 2}}


def test_old_and_new_names_of_one_counter_count_once_with_the_larger_value() -> None:
    readings = Readings.from_mapping({NODE01: {"XmtDiscards": 4, "PortXmitDiscards": 9}})
    assert readings.as_mapping() == {NODE01: {"PortXmitDiscards": 9}}


def test_old_names_track_against_new_ones() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"SymbolErrors": 5, "XmtDiscards": 1}})
    deltas = poll(tracker, T0 + 60, {NODE01: {"SymbolErrorCounter": 8, "PortXmitDiscards": 4}})
    assert deltas.for_port(NODE01) == {"SymbolErrorCounter": 3.0, "PortXmitDiscards": 3.0}


# --- deltas: reset, wrap, saturation ----------------------------------------------------------------------------


def test_first_reading_is_a_baseline_then_deltas_and_rates() -> None:
    tracker = CounterTracker()
    first = poll(tracker, T0, {NODE01: {"PortRcvErrors": 10, "PortXmitData": 1000}})
    assert first.for_port(NODE01) == {}  # no delta before a second reading
    deltas = poll(tracker, T0 + 30, {NODE01: {"PortRcvErrors": 13, "PortXmitData": 4000}})
    assert deltas.get(NODE01, "PortRcvErrors") == 3.0
    assert deltas.rates() == {NODE01: {"PortRcvErrors": 0.1, "PortXmitData": 100.0}}
    assert deltas.interval_s[deltas.row(NODE01), deltas.column("RcvErrors")] == 30.0


def test_a_lower_value_is_a_reset_counted_since_the_clear() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"SymbolErrorCounter": 100}})
    deltas = poll(tracker, T0 + 60, {NODE01: {"SymbolErrorCounter": 7}})
    assert deltas.get(NODE01, "SymbolErrorCounter") == 7.0
    assert deltas.reset[deltas.row(NODE01), deltas.column("SymbolErrorCounter")]


def test_a_64_bit_counter_near_its_top_wraps() -> None:
    tracker = CounterTracker()
    wide = {"PortXmitData": 64}
    poll(tracker, T0, {NODE01: {"PortXmitData": 2**64 - 10}}, widths=wide)
    deltas = poll(tracker, T0 + 60, {NODE01: {"PortXmitData": 5}}, widths=wide)
    cell = deltas.row(NODE01), deltas.column("PortXmitData")
    assert deltas.delta[cell] == 15.0
    assert deltas.wrapped[cell] and not deltas.reset[cell]


def test_a_64_bit_counter_far_from_its_top_that_reads_lower_was_cleared() -> None:
    tracker = CounterTracker()
    wide = {"PortXmitData": 64}
    poll(tracker, T0, {NODE01: {"PortXmitData": 2**40}}, widths=wide)
    deltas = poll(tracker, T0 + 60, {NODE01: {"PortXmitData": 5}}, widths=wide)
    cell = deltas.row(NODE01), deltas.column("PortXmitData")
    assert deltas.delta[cell] == 5.0
    assert deltas.reset[cell] and not deltas.wrapped[cell]


@pytest.mark.parametrize(("name", "bits"), [("SymbolErrorCounter", 16), ("LinkDownedCounter", 8)])
def test_a_portcounters_value_at_its_maximum_is_saturated_and_its_delta_is_a_lower_bound(name: str, bits: int) -> None:
    top = 2**bits - 1
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {name: top - 5}})
    deltas = poll(tracker, T0 + 60, {NODE01: {name: top}})
    cell = deltas.row(NODE01), deltas.column(name)
    assert deltas.saturated[cell] and deltas.delta[cell] == 5.0  # at least 5
    stuck = poll(tracker, T0 + 120, {NODE01: {name: top}})
    assert stuck.saturated[cell] and stuck.delta[cell] == 0.0  # stopped counting: the true count is unknown
    assert stuck.saturated_counters(NODE01) == [name]


def test_the_same_value_read_at_64_bits_is_not_saturated() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"SymbolErrorCounter": 65000}}, widths={"SymbolErrorCounter": 64})
    deltas = poll(tracker, T0 + 60, {NODE01: {"SymbolErrorCounter": 65535}}, widths={"SymbolErrorCounter": 64})
    assert not deltas.saturated.any()
    assert deltas.get(NODE01, "SymbolErrorCounter") == 535.0


def test_a_value_no_portcounters_register_holds_was_read_at_64_bits_and_stays_so() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"PortXmitData": 2**33}})  # more than 32 bits: the 64-bit counter
    deltas = poll(tracker, T0 + 60, {NODE01: {"PortXmitData": 2**32 - 1}})  # cleared, now back at 2^32-1
    cell = deltas.row(NODE01), deltas.column("PortXmitData")
    assert not deltas.saturated[cell]
    assert deltas.reset[cell] and deltas.delta[cell] == 2**32 - 1


def test_a_counter_read_at_another_width_starts_a_new_baseline() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"PortRcvPkts": 100}}, widths={"PortRcvPkts": 32})
    moved = poll(tracker, T0 + 60, {NODE01: {"PortRcvPkts": 50}}, widths={"PortRcvPkts": 64})
    assert moved.get(NODE01, "PortRcvPkts") is None  # another register: not a reset
    deltas = poll(tracker, T0 + 120, {NODE01: {"PortRcvPkts": 80}}, widths={"PortRcvPkts": 64})
    assert deltas.get(NODE01, "PortRcvPkts") == 30.0


# --- ports that stop answering ----------------------------------------------------------------------------------


def test_a_port_left_out_of_full_polls_has_no_deltas_and_turns_silent() -> None:
    tracker = CounterTracker(silent_after=3)
    other = End("node02/mlx5_0", 1)
    poll(tracker, T0, {NODE01: {"SymbolErrorCounter": 1}, other: {"SymbolErrorCounter": 0}})
    for i in range(1, 4):
        deltas = poll(tracker, T0 + 60 * i, {other: {"SymbolErrorCounter": 0}})
        row = deltas.row(NODE01)
        assert row is not None
        assert np.isnan(deltas.delta[row]).all()  # no fake zero deltas
        assert deltas.missed[row] == i
        assert bool(deltas.silent[row]) is (i >= 3)
    assert deltas.silent_ports() == [NODE01]
    back = poll(tracker, T0 + 300, {NODE01: {"SymbolErrorCounter": 4}, other: {"SymbolErrorCounter": 0}})
    cell = back.row(NODE01), back.column("SymbolErrorCounter")
    assert back.delta[cell] == 3.0 and back.interval_s[cell] == 300.0  # counted from its last reading
    assert not back.silent.any()


def test_a_partial_poll_does_not_count_ports_it_did_not_ask() -> None:
    tracker = CounterTracker(silent_after=1)
    poll(tracker, T0, {NODE01: {"PortRcvErrors": 0}, LEAF: {"PortRcvErrors": 0}})
    batch = Readings.from_mapping({LEAF: {"PortRcvErrors": 2}}, left_out="unknown")
    deltas = tracker.update(T0 + 60, batch)
    assert not deltas.silent.any()
    assert deltas.get(LEAF, "PortRcvErrors") == 2.0 and deltas.get(NODE01, "PortRcvErrors") is None


def test_complete_false_carries_the_ports_left_out_and_complete_true_misses_them() -> None:
    tracker = CounterTracker(silent_after=1)
    poll(tracker, T0, {NODE01: {"PortRcvErrors": 3, "PortXmitData": 10}, LEAF: {"PortRcvErrors": 0}})
    sparse = tracker.update(T0 + 60, {LEAF: {"PortRcvErrors": 1}}, complete=False)
    assert sparse.get(NODE01, "PortRcvErrors") == 0.0  # carried: its error counters did not move
    assert sparse.get(NODE01, "PortXmitData") is None  # traffic is not something an error listing carries
    assert not sparse.silent.any()
    full = tracker.update(T0 + 120, {LEAF: {"PortRcvErrors": 1}}, complete=True)
    assert full.silent_ports() == [NODE01]


def test_forget_drops_a_port_and_its_history() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"PortRcvErrors": 3}, LEAF: {"PortRcvErrors": 1}})
    tracker.forget([NODE01])
    assert tracker.ports == (LEAF,)
    assert tracker.last(LEAF) == {"PortRcvErrors": (1, T0)}
    deltas = poll(tracker, T0 + 60, {NODE01: {"PortRcvErrors": 5}, LEAF: {"PortRcvErrors": 2}})
    assert deltas.get(NODE01, "PortRcvErrors") is None and deltas.get(LEAF, "PortRcvErrors") == 1.0


# --- the readers' outputs ---------------------------------------------------------------------------------------


def test_perfquery_plain_and_extended_of_one_port_the_64_bit_values_win() -> None:
    blocks = parse_perfquery(ibsim("perfquery_lid2_port1.txt")) + parse_perfquery(ibsim("perfquery_x_lid2_port1.txt"))
    readings = readings_from_perfquery(blocks, NODE01)
    values = readings.as_mapping()[NODE01]
    assert values["SymbolErrorCounter"] == 1234 and values["LinkDownedCounter"] == 3 and values["PortRcvErrors"] == 77
    assert values["PortXmitData"] == 3168 and values["PortRcvPkts"] == 45  # -x, over the plain 3024 and 43
    bits = dict(zip(readings.counters, readings.bits[0], strict=True))
    assert bits["SymbolErrorCounter"] == 16 and bits["LinkDownedCounter"] == 8 and bits["PortXmitWait"] == 32
    assert bits["PortXmitData"] == 64 and bits["PortRcvPkts"] == 64
    assert "QP1Dropped" not in readings.counters  # not in the catalog: no width known


def test_perfquery_by_lid_through_the_discovered_fabric() -> None:
    graph = from_ibnetdiscover(parse_ibnetdiscover(ibsim("ibnetdiscover.txt")))
    where = ends_by_lid(graph)
    assert where[(2, 1)] == NODE01 and where[(4, 35)] == LEAF
    blocks = parse_perfquery(ibsim("perfquery_lid2_port1.txt"))
    assert readings_from_perfquery(blocks, where).ports == [NODE01]
    lost = readings_from_perfquery(blocks, {})
    assert lost.ports == [] and lost.skipped == ["Lid 2 port 1: not a port of the fabric"]


def test_perfquery_then_its_next_poll_gives_deltas() -> None:
    tracker = CounterTracker()
    blocks = parse_perfquery(ibsim("perfquery_lid2_port1.txt"))
    tracker.update(T0, readings_from_perfquery(blocks, NODE01))
    later = (
        ibsim("perfquery_lid2_port1.txt")
        .replace("1234", "1240")
        .replace("Counter:...............3", "Counter:...............4")
    )
    deltas = tracker.update(T0 + 60, readings_from_perfquery(parse_perfquery(later), NODE01))
    assert deltas.get(NODE01, "SymbolErrorCounter") == 6.0 and deltas.get(NODE01, "LinkDownedCounter") == 1.0


def test_ibqueryerrors_ports_named_through_the_graph_and_the_all_ports_sums_left_out() -> None:
    graph = from_ibnetdiscover(parse_ibnetdiscover(ibsim("ibnetdiscover.txt")))
    readings = readings_from_ibqueryerrors(parse_ibqueryerrors(ibsim("ibqueryerrors.txt")), graph)
    assert readings.as_mapping() == {
        NODE01: {"SymbolErrorCounter": 1234, "LinkDownedCounter": 3, "PortRcvErrors": 77},
        LEAF: {"PortXmitDiscards": 1},
    }
    assert readings.left_out == "unchanged" and readings.start_at_zero  # no thresholds: any error is listed
    assert readings.covers is not None and "SymbolErrorCounter" in readings.covers
    assert "PortXmitData" not in readings.covers


def test_ibqueryerrors_without_a_graph_names_ports_by_description() -> None:
    readings = readings_from_ibqueryerrors(parse_ibqueryerrors(ibsim("ibqueryerrors.txt")))
    assert readings.ports == [NODE01, LEAF]


def test_ibqueryerrors_old_names() -> None:
    text = 'Errors for "node01 mlx5_0"\n   GUID 0x100001 port 1: [SymbolErrors == 3] [XmtDiscards == 4]\n'
    readings = readings_from_ibqueryerrors(parse_ibqueryerrors(text))
    assert readings.as_mapping() == {NODE01: {"SymbolErrorCounter": 3, "PortXmitDiscards": 4}}


def test_ibqueryerrors_ports_it_leaves_out_are_carried_not_silent() -> None:
    other = End("node02/mlx5_0", 1)
    tracker = CounterTracker(silent_after=1)
    tracker.update(T0, Readings.from_mapping({other: {"SymbolErrorCounter": 2, "PortXmitData": 5}}))
    deltas = tracker.update(T0 + 60, readings_from_ibqueryerrors(parse_ibqueryerrors(ibsim("ibqueryerrors.txt"))))
    assert deltas.get(other, "SymbolErrorCounter") == 0.0  # not listed: its error counters did not move
    assert deltas.get(other, "PortXmitData") is None
    assert not deltas.silent.any() and deltas.answered.all()
    # node01 is listed for the first time, after a poll that did not list it: it counted from zero
    assert deltas.get(NODE01, "SymbolErrorCounter") == 1234.0
    again = tracker.update(
        T0 + 120,
        readings_from_ibqueryerrors(parse_ibqueryerrors(ibsim("ibqueryerrors.txt").replace("1234", "1250"))),
    )
    assert again.get(NODE01, "SymbolErrorCounter") == 16.0
    assert again.get(NODE01, "PortRcvErrors") == 0.0 and again.get(other, "SymbolErrorCounter") == 0.0


def test_ibqueryerrors_with_thresholds_does_not_start_at_zero() -> None:
    text = ibsim("ibqueryerrors.txt").replace("## Thresholds: ", "## Thresholds: [SymbolErrorCounter = 10]")
    tracker = CounterTracker()
    tracker.update(T0, Readings.from_mapping({LEAF: {"PortXmitDiscards": 0}}))
    deltas = tracker.update(T0 + 60, readings_from_ibqueryerrors(parse_ibqueryerrors(text)))
    assert deltas.get(NODE01, "SymbolErrorCounter") is None  # below its threshold before: unknown, a baseline


def test_sysfs_counters_by_file_name_or_pma_name() -> None:
    readings = readings_from_sysfs(
        {NODE01: {"symbol_error": 3, "port_xmit_data": 2**40, "SymbolErrors": 1}, LEAF: {"port_xmit_wait": 9}}
    )
    values = readings.as_mapping()
    assert values == {NODE01: {"SymbolErrorCounter": 3, "PortXmitData": 2**40}, LEAF: {"PortXmitWait": 9}}
    bits = dict(zip(readings.counters, readings.bits[0], strict=True))
    assert bits["PortXmitData"] == 64 and bits["SymbolErrorCounter"] == 16 | INFERRED


def test_combine_batches_of_one_poll_the_64_bit_reading_wins() -> None:
    basic = Readings.from_mapping({NODE01: {"PortXmitData": 100, "SymbolErrorCounter": 1}}, widths={"PortXmitData": 32})
    wide = Readings.from_mapping(
        {NODE01: {"PortXmitData": 90}, LEAF: {"PortRcvErrors": 2}}, widths={"PortXmitData": 64}
    )
    merged = Readings.combine([basic, wide])
    assert merged.as_mapping() == {
        NODE01: {"SymbolErrorCounter": 1, "PortXmitData": 90},
        LEAF: {"PortRcvErrors": 2},
    }


def test_rows_as_a_fabric_report_carries_them() -> None:
    readings = Readings.from_rows(
        [NODE01, LEAF], ["SymbolErrorCounter", "XmtDiscards", "QP1Dropped"], [[1, None, 7], [None, 4, 0]]
    )
    assert readings.as_mapping() == {NODE01: {"SymbolErrorCounter": 1}, LEAF: {"PortXmitDiscards": 4}}


# --- bad input: clear errors ------------------------------------------------------------------------------------


def test_a_negative_counter_value_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="SymbolErrorCounter of node01/mlx5_0/1 is -1"):
        Readings.from_mapping({NODE01: {"SymbolErrorCounter": -1}})


def test_a_non_numeric_counter_value_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="whole numbers"):
        Readings.from_rows([NODE01], ["PortRcvErrors"], [["many"]])  # type: ignore[list-item]


def test_a_poll_earlier_than_the_last_is_a_clear_error() -> None:
    tracker = CounterTracker()
    poll(tracker, T0, {NODE01: {"PortRcvErrors": 1}})
    with pytest.raises(UserError, match="earlier than the last one"):
        poll(tracker, T0 - 1, {NODE01: {"PortRcvErrors": 1}})


def test_a_port_listed_twice_is_a_clear_error_and_changes_nothing() -> None:
    tracker = CounterTracker()
    readings = Readings.from_rows([NODE01, NODE01], ["PortRcvErrors"], [[1], [2]])
    with pytest.raises(UserError, match="listed twice"):
        tracker.update(T0, readings)
    assert len(tracker) == 0


def test_readings_with_an_unknown_counter_or_width_are_a_clear_error() -> None:
    with pytest.raises(UserError, match="not a PMA counter name"):
        Readings([NODE01], ("Bogus",), np.zeros((1, 1)), np.full((1, 1), 16))
    with pytest.raises(UserError, match="width 12"):
        Readings([NODE01], ("PortRcvErrors",), np.zeros((1, 1)), np.full((1, 1), 12))
    with pytest.raises(UserError, match="PortRcvErrors of node01/mlx5_0/1 is -3"):
        Readings([NODE01], ("PortRcvErrors",), np.full((1, 1), -3), np.full((1, 1), 16))
    with pytest.raises(UserError, match="width 12"):
        Readings.from_mapping({NODE01: {"PortRcvErrors": 1}}, widths={"PortRcvErrors": 12})


def test_a_non_numeric_poll_time_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="not a number of seconds"):
        CounterTracker().update(float("nan"), {NODE01: {"PortRcvErrors": 1}})


# --- scale ------------------------------------------------------------------------------------------------------


def test_a_hundred_thousand_ports_of_fifteen_counters_per_poll() -> None:
    """The fabric service's size: arrays indexed by a port table, not dicts per port (no timing asserted)."""
    count = 100_000
    names = counter_columns()[:15]
    ports = [End(f"leaf{i // 64}", i % 64 + 1) for i in range(count)]
    widths = np.array([load_ib_counters()[n].bits for n in names], dtype=np.uint8)
    bits = np.broadcast_to(widths, (count, len(names))).copy()
    values = np.zeros((count, len(names)), dtype=np.uint64)
    tracker = CounterTracker()
    health = PortHealth()
    for step in range(3):
        values[7, 0] += 7  # one port counts symbol errors
        deltas = tracker.update(T0 + 60 * step, Readings(ports, names, values, bits))
        findings, _ = health.observe(T0 + 60 * step, deltas)
    assert deltas.delta.shape == (count, len(counter_columns()))
    assert np.nansum(deltas.delta) == 7.0
    assert [(f.kind, f.port) for f in findings] == [("symbol-errors", ports[7])]
