"""Detection thresholds (data/thresholds.yaml), overridable by a site's own YAML: given to a command, or named by
GPUFLEET_THRESHOLDS so the agent, the control plane, triage and the generated alert rules all judge by the same
file. `detection_limits` hands the alert rules the values they judge by (telemetry sits below health)."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from gpufleet import yaml_input
from gpufleet.errors import ManifestError
from gpufleet.model import RootCause
from gpufleet.telemetry.monitoring.alert_rules import DetectionLimits, PortLimit


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


def _moved(data: Any, section: str, keys: tuple[str, ...]) -> Any:
    """A site file still setting a key that moved to `symbol_errors` is told where it went."""
    if isinstance(data, dict):
        for key in keys:
            if key in data:
                raise ValueError(
                    f"{section}.{key} moved: symbol errors are judged in one place for the agent, the fabric service "
                    "and triage; set `symbol_errors.windows` (a list of {window_s, ber}) instead"
                )
    return data


class Infiniband(_Section):
    """The agent's judgement of its own ports; symbol errors are `symbol_errors`'."""

    flap_window_s: float
    rcv_errors_per_window: float
    xmit_discards_per_window: float
    vl15_dropped_per_window: float
    window_s: float

    @model_validator(mode="before")
    @classmethod
    def _symbol_keys_moved(cls, data: Any) -> Any:
        return _moved(data, "infiniband", ("symbol_window_s", "symbol_ber"))


class BerWindow(_Section):
    window_s: float = Field(gt=0)
    ber: float = Field(gt=0)

    def budget(self, rate_gbps: float, span_s: float | None = None) -> float:
        """Errors a link of `rate_gbps` may count in the window (or in `span_s`, when a reading covers longer)."""
        return rate_gbps * 1e9 * max(self.window_s, span_s or 0.0) * self.ber


class SymbolErrors(_Section):
    """SymbolErrorCounter against a bit error rate in each window, for every judge of it (health.symbol_errors)."""

    windows: list[BerWindow] = Field(min_length=1)  # shortest first: the first one is the critical one

    @model_validator(mode="after")
    def _shortest_first(self) -> SymbolErrors:
        self.windows = sorted(self.windows, key=lambda w: w.window_s)
        return self


class Fabric(_Section):
    """The fabric service's judgement of every port's counters, polled from the subnet (perfquery, ibqueryerrors)."""

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

    @model_validator(mode="before")
    @classmethod
    def _symbol_keys_moved(cls, data: Any) -> Any:
        return _moved(data, "fabric", ("symbol_windows",))

    @model_validator(mode="after")
    def _ordered(self) -> Fabric:
        if self.congestion_info_fraction > self.congestion_warning_fraction:
            raise ValueError("congestion_info_fraction must not be above congestion_warning_fraction")
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


class Clock(_Section):
    """How far the clocks of a job's nodes may disagree (health/clock_skew.py)."""

    skew_limit_s: float = Field(gt=0)  # the daemons' offsets across a job's nodes
    receive_skew_s: float = Field(gt=0)  # the receive-time estimate, which is off by up to a push's one-way delay


class Software(_Section):
    cuda_min_driver: dict[str, str]


class JobChecks(_Section):
    """How one training job's own metrics are judged (the application detectors)."""

    stale_s: float = Field(gt=0)  # signals reported longer ago than this are not judged
    progress_min_s: float = Field(gt=0)  # nor a job whose last step is older than this ...
    progress_step_multiple: float = Field(gt=0)  # ... and this many step times (a hang is the training detector's)
    warmup_steps: int = Field(ge=0)  # the loss trend and the throughput baseline start after this step
    loss_window_steps: int = Field(ge=1)  # the loss trend compares the last this-many steps with those before
    loss_min_points: int = Field(ge=2)  # readings a window needs before it is judged
    plateau_ratio: float = Field(ge=0, lt=1)  # the window's mean or best must improve on the last by this share
    blowup_ratio: float = Field(gt=1)  # the loss this many times its best of the last two windows
    validation_evals: int = Field(ge=2)  # validation rising over this many evaluations while training falls
    validation_rise_ratio: float = Field(gt=0)  # or this far above its best while training is no higher
    validation_min_rise_ratio: float = Field(default=0.02, ge=0)  # a rising run must climb this much: not noise
    grad_norm_max: float = Field(gt=0)
    grad_norm_min: float = Field(ge=0)
    hold_points: int = Field(ge=1)  # readings in a row a blow-up or a gradient norm out of range must hold
    throughput_drop: float = Field(gt=0, lt=1)  # samples/s this share below the job's own baseline ...
    throughput_hold_s: float = Field(ge=0)  # ... for this long
    throughput_recent_points: int = Field(ge=1)  # the current pace: the median of this many last readings
    throughput_baseline_s: float = Field(gt=0)  # the baseline: healthy readings over this long ...
    throughput_baseline_quantile: float = Field(gt=0, le=1)  # ... at this quantile
    throughput_baseline_min_points: int = Field(ge=1)
    starved_util_percent: float = Field(gt=0, le=100)  # ranks' GPUs under this utilization ...
    starved_wait_share: float = Field(gt=0, lt=1)  # ... while the step waits this share of its time on input
    starved_hold_s: float = Field(ge=0)
    host_cpu_busy: float = Field(gt=0, le=1)  # supporting evidence: a rank's host this busy ...
    host_io_wait: float = Field(gt=0, le=1)  # ... or waiting on I/O this much

    @model_validator(mode="after")
    def _ranges(self) -> JobChecks:
        if self.grad_norm_min >= self.grad_norm_max:
            raise ValueError("grad_norm_min must be below grad_norm_max")
        return self


class ServiceChecks(_Section):
    """How the SLO detector reads services (the objectives themselves are the SLO config's)."""

    stale_s: float = Field(gt=0)  # a service none of whose replicas reported for this long is stale
    forget_after_s: float = Field(gt=0)  # a replica (or service) silent this long is forgotten
    min_requests: int = Field(ge=1)  # a window with fewer requests is too little traffic, whatever the rate
    resolution_s: float = Field(gt=0)  # the history keeps a point this often
    latency_needs_both: bool  # the latency SLO is missed when both p99 and p95 are over (else either)

    @model_validator(mode="after")
    def _ordered(self) -> ServiceChecks:
        if self.forget_after_s < self.stale_s:
            raise ValueError("forget_after_s must not be below stale_s")
        return self


class Application(_Section):
    """What jobs' and services' own metrics are judged against. `jobs` overrides some of `defaults` for a job,
    keyed by its name or a glob pattern: the exact name wins, then the first pattern that matches, in file order."""

    defaults: JobChecks
    jobs: dict[str, dict[str, Any]] = {}
    services: ServiceChecks
    _merged: dict[str, JobChecks] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _merge_jobs(self) -> Application:
        base = self.defaults.model_dump()
        for pattern, over in self.jobs.items():
            try:
                self._merged[pattern] = JobChecks.model_validate({**base, **over})
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"jobs.{pattern}.{where}: {err['msg']}") from None
        return self

    def for_job(self, name: str) -> JobChecks:
        if name in self._merged:
            return self._merged[name]
        for pattern, checks in self._merged.items():
            if fnmatchcase(name, pattern):
                return checks
        return self.defaults


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
    symbol_errors: SymbolErrors
    fabric: Fabric
    training: Training
    idle: Idle
    clock: Clock
    software: Software
    application: Application


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@cache
def _default_raw() -> dict[str, Any]:
    text = resources.files("gpufleet.health").joinpath("data", "thresholds.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


THRESHOLDS_ENV = "GPUFLEET_THRESHOLDS"


def load_thresholds(path: Path | None = None) -> Thresholds:
    """The defaults, with `path` (or else the file GPUFLEET_THRESHOLDS names) merged over them."""
    raw = _default_raw()
    if path is None and os.environ.get(THRESHOLDS_ENV):
        path = Path(os.environ[THRESHOLDS_ENV])
    if path is not None:
        over = yaml_input.load_file(path) or {}
        if not isinstance(over, dict):
            raise ManifestError(str(path), "expected a mapping of sections (ecc, thermal, ...)")
        raw = _merge(raw, over)
    try:
        return Thresholds.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ManifestError(
            str(path or "thresholds.yaml"),
            f"{where}: {err['msg']}",
            fix="a site file overrides keys of the defaults (gpufleet/health/data/thresholds.yaml in the installed "
            "package, each with its source); give the key a value of the default's kind",
        ) from None


def detection_limits(thresholds: Thresholds | None = None) -> DetectionLimits:
    """What the generated alert rules judge by, from the thresholds the detectors use: the thermal and idle holds
    of the GPU detector, the symbol-error windows, and the per-window port counters of the agent's fabric detector
    (receive errors, discards, VL15 drops) and of the fabric service (the other error counters)."""
    t = thresholds or load_thresholds()
    ib, fabric = t.infiniband, t.fabric
    physical, congestion = RootCause.ib_symbol_errors.value, RootCause.ib_congestion.value
    # as the agent's fabric detector and the fabric service file each count over its limit (control/fabric.py)
    ports = (
        ("PortRcvErrors", ib.rcv_errors_per_window, physical),
        ("PortRcvRemotePhysicalErrors", fabric.remote_physical_errors_per_window, physical),
        ("PortXmitDiscards", ib.xmit_discards_per_window, congestion),
        ("VL15Dropped", ib.vl15_dropped_per_window, congestion),
        ("LocalLinkIntegrityErrors", fabric.link_integrity_errors_per_window, physical),
        ("ExcessiveBufferOverrunErrors", fabric.buffer_overrun_errors_per_window, physical),
        ("LinkErrorRecoveryCounter", fabric.link_recoveries_per_window, physical),
    )
    return DetectionLimits(
        thermal_clock_ratio=t.thermal.clock_ratio,
        thermal_hold_s=t.thermal.hold_s,
        thermal_window_s=t.thermal.window_s,
        cooling_excess_c=t.thermal.idle_excess_c,
        cooling_hold_s=t.thermal.idle_hold_s,
        idle_util_percent=t.idle.util_percent,
        idle_hold_s=t.idle.hold_s,
        ber_windows=tuple((w.window_s, w.ber) for w in t.symbol_errors.windows),
        link_down_hold_s=t.control.resolve_after_s[RootCause.ib_link_down],
        flap_window_s=ib.flap_window_s,
        flap_downs=fabric.flap_downs,
        port_window_s=ib.window_s,
        port_limits=tuple(PortLimit(counter, limit, cause) for counter, limit, cause in ports),
    )
