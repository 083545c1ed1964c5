"""Counter history for rate checks: deltas over a sliding window, with counter-reset detection."""

from __future__ import annotations

from collections import deque

import numpy as np


class CounterWindow:
    """Keeps (time, values) snapshots of one counter row and answers "how much did it grow over the window".

    A counter that goes backwards was reset (a GPU reset clears volatile ECC counts, a port's counters are cleared
    by `perfquery -R`): the growth since a reset is the new value itself, never a negative number. A missed reading
    (NaN) is not a reset: the last value stands in for it, and a counter's first reading is its baseline. The growth
    is kept as a running sum of step-to-step increases, so each push costs the same however long the window.
    """

    def __init__(self, window_s: float, resolution_s: float = 1.0) -> None:
        self.window_s = window_s
        self.resolution_s = resolution_s
        self._snaps: deque[tuple[float, np.ndarray]] = deque()
        # steps[i]: growth from snaps[i] to snaps[i + 1]; None when no counter moved (most collections, most counters)
        self._steps: deque[np.ndarray | None] = deque()
        self._total: np.ndarray | None = None

    def push(self, now: float, values: np.ndarray) -> None:
        if self._snaps and now - self._snaps[-1][0] < self.resolution_s:
            return
        if self._snaps:
            prev = self._snaps[-1][1]
            if bool((values == prev).all()):  # nothing moved (and nothing missed): a zero step, the same snapshot
                self._steps.append(None)
                if self._total is None:
                    self._total = np.zeros(prev.shape)
                self._snaps.append((now, prev))
            else:
                values = np.where(np.isnan(values), prev, values)  # a missed reading keeps the last one
                step = np.where(values >= prev, values - prev, values)  # a reset counts from zero again
                step = np.where(np.isnan(prev), 0.0, step)  # the first reading is a baseline, not growth
                self._steps.append(step)
                self._total = step.copy() if self._total is None else self._total + step
                self._snaps.append((now, values.astype(np.float64, copy=False)))
        else:
            self._snaps.append((now, values.astype(np.float64)))  # a copy: the caller's array is refilled
        while now - self._snaps[0][0] > self.window_s:
            self._snaps.popleft()
            if self._steps and self._total is not None:
                gone = self._steps.popleft()
                if gone is not None:
                    self._total = self._total - gone  # a new array: a growth handed out before stays as it was

    def growth(self) -> np.ndarray | None:
        """Increase over the window (None until two snapshots exist)."""
        return None if self._total is None or len(self._snaps) < 2 else self._total

    def span(self) -> float:
        return self._snaps[-1][0] - self._snaps[0][0] if len(self._snaps) >= 2 else 0.0


class HoldTimer:
    """How long a per-entity condition has held without interruption."""

    def __init__(self, n: int) -> None:
        self.since = np.full(n, np.nan)

    def update(self, now: float, condition: np.ndarray) -> np.ndarray:
        """Seconds each entity's condition has held (0 where it does not hold)."""
        self.since = np.where(condition, np.where(np.isnan(self.since), now, self.since), np.nan)
        return np.where(condition, now - self.since, 0.0)
