"""Idle cost: what the unused share of each GPU costs per hour, at the operator's price per GPU-hour."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpufleet.telemetry.fields import IDLE_COST_FIELD
from gpufleet.telemetry.frame import MetricFrame

__all__ = ["IDLE_COST_FIELD", "fill_idle_cost", "hourly_prices"]


def hourly_prices(frame: MetricFrame, per_model: Mapping[str, float], default: float) -> np.ndarray:
    """Price per GPU-hour of each entity, by its model name."""
    return np.array([per_model.get(e.model_name, default) for e in frame.entities], dtype=np.float64)


def fill_idle_cost(frame: MetricFrame, prices: np.ndarray) -> None:
    """Set the idle-cost row from this tick's DCGM_FI_DEV_GPU_UTIL: price x (1 - utilization).

    GPUs without a utilization value get no idle-cost value either.
    """
    util = frame.gpu("DCGM_FI_DEV_GPU_UTIL")
    idle_share = 1.0 - np.clip(util, 0.0, 100.0) / 100.0
    frame.gpu(IDLE_COST_FIELD)[:] = prices * idle_share
