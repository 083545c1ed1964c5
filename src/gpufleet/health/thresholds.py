"""Detection thresholds (data/thresholds.yaml), overridable by a site's own YAML."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet import yaml_input
from gpufleet.errors import ManifestError
from gpufleet.model import RootCause


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Ecc(_Section):
    sbe_per_minute: float
    retired_pages_limit: int
    retired_pages_soft: int
    uncorrectable_remapped_rows_limit: int


class Thermal(_Section):
    hold_s: float
    window_s: float
    idle_excess_c: float
    idle_hold_s: float
    clock_ratio: float


class PowerBrake(_Section):
    hold_s: float


class Pcie(_Section):
    window_s: float
    replays_per_lane_per_minute: list[float]

    def budget_per_minute(self, gen: np.ndarray, width: np.ndarray) -> np.ndarray:
        """DCGM's expected replay budget per GPU: ceil(rate per lane for the generation x lanes)."""
        rates = np.array(self.replays_per_lane_per_minute)
        index = np.clip(np.nan_to_num(gen, nan=1).astype(int), 1, rates.size) - 1
        return np.ceil(rates[index] * np.maximum(np.nan_to_num(width, nan=1), 1))


class Nvlink(_Section):
    window_s: float
    crc_errors_per_minute: float
    recovery_errors_per_minute: float


class Infiniband(_Section):
    symbol_window_s: float
    symbol_ber: float
    flap_window_s: float
    rcv_errors_per_window: float
    xmit_discards_per_window: float
    vl15_dropped_per_window: float
    window_s: float

    def symbol_budget(self, speed_gbps: float) -> float:
        """Errors allowed in the symbol window at the target BER (2.88 for 400 Gb/s over 12 minutes)."""
        return speed_gbps * 1e9 * self.symbol_window_s * self.symbol_ber


class BerWindow(_Section):
    window_s: float = Field(gt=0)
    ber: float = Field(gt=0)

    def budget(self, rate_gbps: float, span_s: float | None = None) -> float:
        """Errors a link of `rate_gbps` may count in the window (or in `span_s`, when a reading covers longer)."""
        return rate_gbps * 1e9 * max(self.window_s, span_s or 0.0) * self.ber


class Fabric(_Section):
    """The fabric service's judgement of every port's counters, polled from the subnet (perfquery, ibqueryerrors)."""

    symbol_windows: list[BerWindow] = Field(min_length=1)  # shortest first: the first one is the critical one
    packet_drop_rate: float = Field(gt=0)
    flap_window_s: float = Field(gt=0)
    flap_downs: int = Field(ge=2)
    window_s: float = Field(gt=0)
    rcv_errors_per_window: float = Field(ge=0)
    remote_physical_errors_per_window: float = Field(ge=0)
    xmit_discards_per_window: float = Field(ge=0)
    vl15_dropped_per_window: float = Field(ge=0)
    link_integrity_errors_per_window: float = Field(ge=0)
    buffer_overrun_errors_per_window: float = Field(ge=0)
    link_recoveries_per_window: float = Field(ge=0)
    xmit_wait_bytes_per_tick: float = Field(gt=0)
    congestion_info_fraction: float = Field(gt=0, le=1)
    congestion_warning_fraction: float = Field(gt=0, le=1)
    silent_after_polls: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Fabric:
        if self.congestion_info_fraction > self.congestion_warning_fraction:
            raise ValueError("congestion_info_fraction must not be above congestion_warning_fraction")
        self.symbol_windows = sorted(self.symbol_windows, key=lambda w: w.window_s)
        return self


class Training(_Section):
    hang_min_s: float
    hang_step_multiple: float
    hang_signature_s: float
    stall_min_s: float
    stall_step_multiple: float
    straggler_ratio: float
    straggler_hold_s: float
    quiet_rank_util: float
    busy_rank_util: float


class Idle(_Section):
    util_percent: float
    hold_s: float


class Software(_Section):
    cuda_min_driver: dict[str, str]


class Control(_Section):
    agent_lost_intervals: float  # an agent silent for this many of its intervals has lost its node
    finding_repeat_s: float  # a condition that goes on is confirmed this often (each hold below is longer)
    resolve_after_s: dict[RootCause, float]  # a measured condition not seen for this long has cleared


class Thresholds(_Section):
    control: Control
    ecc: Ecc
    thermal: Thermal
    power_brake: PowerBrake
    pcie: Pcie
    nvlink: Nvlink
    infiniband: Infiniband
    fabric: Fabric
    training: Training
    idle: Idle
    software: Software


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@cache
def _default_raw() -> dict[str, Any]:
    text = resources.files("gpufleet.health").joinpath("data", "thresholds.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


def load_thresholds(path: Path | None = None) -> Thresholds:
    raw = _default_raw()
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ManifestError(str(path), f"cannot read thresholds: {exc.strerror}") from None
        over = yaml_input.load(text, str(path)) or {}
        if not isinstance(over, dict):
            raise ManifestError(str(path), "expected a mapping of sections (ecc, thermal, ...)")
        raw = _merge(raw, over)
    try:
        return Thresholds.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ManifestError(str(path or "thresholds.yaml"), f"{where}: {err['msg']}") from None
