"""Quantiles from a cumulative histogram, the way PromQL's `histogram_quantile` computes them, so a percentile
the control plane shows and one a Prometheus rule alerts on agree."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: np.ndarray, count: float) -> float:
    """The `q` quantile (0..1) of observations counted `cumulative[i]` at or below `bounds[i]`, `count` in all
    (the +Inf bucket). Linear within the bucket it falls in, as Prometheus does: the first bucket's lower edge
    is 0, and a quantile in the +Inf bucket is the highest finite bound. NaN when nothing was observed."""
    if count <= 0 or not 0.0 <= q <= 1.0:
        return float("nan")
    rank = q * count
    i = int(np.searchsorted(cumulative, rank, side="left"))
    if i >= len(bounds):
        return float(bounds[-1]) if len(bounds) else float("nan")
    lower = 0.0 if i == 0 else float(bounds[i - 1])
    below = 0.0 if i == 0 else float(cumulative[i - 1])
    inside = float(cumulative[i]) - below
    if inside <= 0:
        return float(bounds[i])
    return lower + (float(bounds[i]) - lower) * (rank - below) / inside
