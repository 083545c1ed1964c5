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


def _growth_by_hand(readings: list[tuple[float, np.ndarray]], window_s: float) -> np.ndarray | None:
    """The window's growth summed step by step over the readings it holds (a missed reading keeps the last value, a
    reset counts from zero, the first reading is a baseline), for every counter: what the running sum must equal."""
    held: list[tuple[float, np.ndarray]] = []
    steps: list[np.ndarray] = []
    for now, raw in readings:
        values = raw.astype(np.float64)
        if held:
            prev = held[-1][1]
            values = np.where(np.isnan(values), prev, values)
            step = np.where(values >= prev, values - prev, values)
            steps.append(np.where(np.isnan(prev), 0.0, step))
        held.append((now, values))
        while now - held[0][0] > window_s:
            held.pop(0)
            if steps:
                steps.pop(0)
    return None if len(held) < 2 else np.sum(steps, axis=0) if steps else np.zeros(len(readings[0][1]))


def test_counters_that_mostly_stand_still_grow_as_summed_step_by_step() -> None:
    """Most counters do not move in most collections (those steps are kept as nothing); the growth is the same as
    every step summed, through missed readings, resets and readings that leave the window."""
    rng = np.random.default_rng(7)
    w = CounterWindow(30.0)
    counters = np.zeros(40, dtype=np.int64)
    readings: list[tuple[float, np.ndarray]] = []
    for t in range(300):
        moving = rng.random(40) < (0.3 if t % 50 < 10 else 0.01)  # bursts, then long quiet stretches
        counters = counters + np.where(moving, rng.integers(1, 5, 40), 0)
        if t % 97 == 0:
            counters[rng.integers(0, 40)] = 0  # a reset
        reading = counters.astype(np.float64)
        if t % 13 == 0:
            reading[rng.integers(0, 40)] = np.nan  # a missed reading
        readings.append((float(t), reading))
        w.push(float(t), reading)
        want = _growth_by_hand(readings, 30.0)
        got = w.growth()
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert got.tolist() == want.tolist(), t
