"""The counter window and hold timer every rate and hold threshold stands on: growth over exactly the window,
counter resets, the snapshot resolution, and holds that restart when the condition breaks."""

from __future__ import annotations

import numpy as np

from gpufleet.health.detectors.window import CounterWindow, HoldTimer


def push(w: CounterWindow, now: float, *values: float) -> None:
    w.push(now, np.array(values, dtype=np.float64))


def test_no_growth_until_two_snapshots() -> None:
    w = CounterWindow(60.0)
    assert w.growth() is None and w.span() == 0.0
    push(w, 0.0, 5.0)
    assert w.growth() is None and w.span() == 0.0
    push(w, 10.0, 8.0)
    assert w.growth() is not None and w.growth().tolist() == [3.0] and w.span() == 10.0


def test_growth_covers_snapshots_up_to_exactly_the_window_and_not_one_past() -> None:
    w = CounterWindow(60.0)
    push(w, 0.0, 0.0, 0.0)
    push(w, 1.0, 7.0, 0.0)  # a burst in the first second
    for k in range(2, 61):
        push(w, float(k), 7.0, float(k))
    assert w.span() == 60.0
    assert w.growth().tolist() == [7.0, 60.0]
    push(w, 61.0, 7.0, 61.0)  # the snapshot at 0 is now more than the window old
    assert w.span() == 60.0
    assert w.growth().tolist() == [0.0, 61.0]


def test_a_counter_that_goes_backwards_was_reset_and_counts_from_zero() -> None:
    w = CounterWindow(60.0)
    push(w, 0.0, 100.0)
    push(w, 10.0, 110.0)
    push(w, 20.0, 4.0)  # reset, then 4 more
    assert w.growth().tolist() == [14.0]


def test_a_missed_reading_is_not_a_reset() -> None:
    """A lifetime counter read as NaN once (a failed read) must not count its whole value as growth afterwards."""
    w = CounterWindow(60.0)
    push(w, 0.0, 5000.0)
    push(w, 10.0, float("nan"))
    assert w.growth().tolist() == [0.0]
    push(w, 20.0, 5003.0)
    assert w.growth().tolist() == [3.0]


def test_a_counters_first_reading_is_its_baseline_even_after_missed_ones() -> None:
    w = CounterWindow(60.0)
    push(w, 0.0, float("nan"))
    push(w, 10.0, 5000.0)
    push(w, 20.0, 5002.0)
    assert w.growth().tolist() == [2.0]


def test_snapshots_closer_than_the_resolution_are_ignored() -> None:
    w = CounterWindow(600.0, resolution_s=5.0)
    push(w, 0.0, 0.0)
    push(w, 4.9, 9.0)
    assert w.growth() is None
    push(w, 5.0, 10.0)
    assert w.growth().tolist() == [10.0] and w.span() == 5.0


def test_a_hold_counts_from_when_the_condition_began_and_restarts_when_it_breaks() -> None:
    h = HoldTimer(2)
    assert h.update(0.0, np.array([True, False])).tolist() == [0.0, 0.0]
    assert h.update(3.0, np.array([True, True])).tolist() == [3.0, 0.0]
    assert h.update(7.5, np.array([True, True])).tolist() == [7.5, 4.5]
    assert h.update(8.0, np.array([False, True])).tolist() == [0.0, 5.0]
    assert h.update(9.0, np.array([True, True])).tolist() == [0.0, 6.0]
    assert h.update(10.0, np.array([True, True])).tolist() == [1.0, 7.0]
