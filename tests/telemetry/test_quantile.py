"""Quantiles from cumulative buckets agree with PromQL's histogram_quantile."""

from __future__ import annotations

import math

import numpy as np

from gpufleet.telemetry.quantile import histogram_quantile

BOUNDS = (0.1, 0.25, 0.5, 1.0)


def test_linear_within_the_bucket_it_falls_in() -> None:
    # 100 observations: 50 <= 0.1, 30 in (0.1, 0.25], 20 in (0.25, 0.5]
    cumulative = np.array([50, 80, 100, 100])
    assert histogram_quantile(0.5, BOUNDS, cumulative, 100) == 0.1
    assert math.isclose(histogram_quantile(0.65, BOUNDS, cumulative, 100), 0.1 + 0.15 * 15 / 30)
    assert math.isclose(histogram_quantile(0.9, BOUNDS, cumulative, 100), 0.25 + 0.25 * 10 / 20)


def test_the_first_bucket_starts_at_zero() -> None:
    assert math.isclose(histogram_quantile(0.25, BOUNDS, np.array([100, 100, 100, 100]), 100), 0.025)


def test_a_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, BOUNDS, np.array([10, 20, 30, 40]), 100) == 1.0


def test_nothing_observed_is_nan_not_zero() -> None:
    assert math.isnan(histogram_quantile(0.99, BOUNDS, np.zeros(4), 0))
    assert math.isnan(histogram_quantile(1.5, BOUNDS, np.array([1, 1, 1, 1]), 1))
