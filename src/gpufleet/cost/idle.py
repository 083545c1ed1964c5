"""Idle cost: what the unused share of each GPU costs per hour, at the price per GPU-hour the cost report charges
(cost/prices.py: the operator's cost config over the catalog)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpufleet.telemetry.fields import IDLE_COST_FIELD
from gpufleet.telemetry.frame import MetricFrame

__all__ = ["IDLE_COST_FIELD", "IdleCost", "fill_idle_cost", "hourly_prices"]


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


class IdleCost:
    """The agent's idle-cost source: after the GPU source has read utilization, each device's idle cost at the price
    of its model (`prices`: US$ per GPU-hour by model name; a model without one gets no series, not a cost of 0)."""

    name = "idle-cost"

    def __init__(self, prices: Mapping[str, float]) -> None:
        self.prices = dict(prices)
        self._row: tuple[object, np.ndarray] | None = None  # (the entities it was built for, each one's price)

    def collect(self, frame: MetricFrame) -> None:
        if not (frame.has_gpu_field(IDLE_COST_FIELD) and frame.has_gpu_field("DCGM_FI_DEV_GPU_UTIL")):
            return
        if self._row is None or self._row[0] is not frame.entities:
            self._row = (frame.entities, hourly_prices(frame, self.prices, np.nan))
        fill_idle_cost(frame, self._row[1])
