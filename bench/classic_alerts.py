"""The benchmarks' baseline, the classic pipeline: Prometheus scraping dcgm-exporter-style metrics and evaluating
the alert rules of gpufleet's own rule file (telemetry/data/alert_rules.yaml) with their `for:` windows.

Each rule's expression is evaluated here on the scraped samples exactly as Prometheus would at each evaluation:
an alert is pending while the expression holds and fires once it has held for `for:` (checked only at evaluation
times, so detection lags by up to one scrape plus one evaluation). Range functions (increase, max_over_time) use
the samples scraped inside their range. It answers one question: when would the classic stack have paged?
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpufleet.catalog.ib_counters import SYMBOL_COUNTER, load_ib_counters
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.fields import IB_PORT_RATE
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.monitoring.alert_rules import DetectionLimits, RulesConfig

HW_THERMAL = 64  # the clock event bit the thermal rule tests (floor(reasons / 64) % 2 == 1)


@dataclass(slots=True)
class Alert:
    name: str
    target: str  # "gpu/<node>/<index>", "port/<node>/<hca>" or "job/<name>"
    fired: float


@dataclass
class ClassicPipeline:
    frame_entities: list[tuple[str, int]]
    ports: list[tuple[str, str]]
    scrape_s: float = 15.0
    config: RulesConfig = field(default_factory=RulesConfig)
    limits: DetectionLimits = field(default_factory=detection_limits)
    fired: list[Alert] = field(default_factory=list)
    _pending: dict[tuple[str, str], float] = field(default_factory=dict)
    _firing: set[tuple[str, str]] = field(default_factory=set)
    _last: float = -np.inf
    _clock: deque[tuple[float, np.ndarray]] = field(default_factory=deque)
    _violation: deque[tuple[float, np.ndarray]] = field(default_factory=deque)
    _ib: dict[str, deque[tuple[float, np.ndarray]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        xids = xid_ratings()  # the Xid rules page as the Xid policy rates each code
        self._xid_rule = {code: "GpuXidFatal" for code in xids.fatal}
        self._xid_rule |= {code: "GpuXid" for code in xids.nonfatal}
        self._xid_rule |= {code: "GpuXidLineDependent" for code in xids.by_line}
        self._xid_unknown = "GpuXidFatal" if xids.unknown == "FATAL" else "GpuXid"
        counters = load_ib_counters()
        self._ib_rules = [(counters[p.counter].metric, p.limit) for p in self.limits.port_limits]
        self._symbol = counters[SYMBOL_COUNTER].metric
        self._downed = counters["LinkDownedCounter"].metric

    def observe(self, now: float, frame: MetricFrame) -> list[Alert]:
        """Call every tick; it scrapes and evaluates every `scrape_s`."""
        if now - self._last < self.scrape_s:
            return []
        self._last = now
        conditions: list[tuple[str, str, float]] = []  # (alert, target, for seconds) holding now
        gpus = [f"gpu/{n}/{i}" for n, i in self.frame_entities]
        temp, clock = frame.gpu("DCGM_FI_DEV_GPU_TEMP"), frame.gpu("DCGM_FI_DEV_SM_CLOCK")
        util = frame.gpu("DCGM_FI_DEV_GPU_UTIL")
        cfg, lim = self.config, self.limits
        for i in np.flatnonzero(frame.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") > 0):
            conditions.append(("GpuEccDoubleBitError", gpus[i], 0.0))
        for i in np.flatnonzero(frame.gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE") > 0):
            conditions.append(("GpuRowRemapFailure", gpus[i], 0.0))
        for code, counts in frame.xid_counts.items():
            name = self._xid_rule.get(code, self._xid_unknown)
            for i in np.flatnonzero(counts > 0):
                conditions.append((name, gpus[i], 0.0))
        # GpuIdleCost joins the GPU's info series: only a GPU some workload holds costs money idle
        held = np.array([a is not None for a in frame.attribution], dtype=bool)
        for i in np.flatnonzero(held & (util < lim.idle_util_percent)):
            conditions.append(("GpuIdleCost", gpus[i], lim.idle_hold_s))
        # GpuThermalSlowdown: the slowdown reason with the clock under its share of the hour's peak, or the
        # thermal-violation time over 2 minutes at the detectors' duty
        peak = _peak(_window(self._clock, now, clock, 3600.0))
        bits = np.nan_to_num(frame.gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), nan=0.0).astype(np.int64)
        slowed = ((bits & HW_THERMAL) != 0) & (clock < lim.thermal_clock_ratio * peak)
        violation = _window(self._violation, now, frame.gpu("DCGM_FI_DEV_THERMAL_VIOLATION"), 120.0)
        span = violation[-1][0] - violation[0][0]
        if span > 0:
            duty = np.nan_to_num(violation[-1][1] - violation[0][1], nan=0.0) / 1e9 / span
            slowed |= duty >= lim.thermal_hold_s / lim.thermal_window_s
        for i in np.flatnonzero(slowed):
            conditions.append(("GpuThermalSlowdown", gpus[i], lim.thermal_hold_s))
        for i in np.flatnonzero(_cooling(frame, temp, util, lim)):
            conditions.append(("GpuCoolingFault", gpus[i], lim.cooling_hold_s))
        for (name, labels), value in frame.gauges.items():
            if name == "training_last_step_timestamp_seconds" and now - value > cfg.stall_seconds:
                conditions.append(("TrainingStalled", f"job/{dict(labels)['job']}", 0.0))
        ports = [f"port/{node}/{hca}" for node, hca in self.ports]
        for i in np.flatnonzero(frame.ib_up == 0):
            conditions.append(("InfinibandPortDown", ports[i], 0.0))
        up = frame.ib_up != 0
        for metric, threshold in self._ib_rules:
            for i in np.flatnonzero((self._grown(now, metric, frame, lim.port_window_s) > threshold) & up):
                conditions.append((f"Infiniband{metric}Rising", ports[i], 0.0))
        for i in np.flatnonzero(self._grown(now, self._downed, frame, lim.flap_window_s) >= lim.flap_downs):
            conditions.append(("InfinibandLinkFlapping", ports[i], 0.0))
        rate = frame.ib(IB_PORT_RATE) if frame.has_ib_field(IB_PORT_RATE) else np.full(len(ports), np.nan)
        window_s, ber = lim.ber_windows[0]
        over = self._grown(now, self._symbol, frame, window_s) > rate * 8 * window_s * ber
        for i in np.flatnonzero(over):
            conditions.append(("InfinibandSymbolErrors", ports[i], 0.0))
        return self._evaluate(now, conditions)

    def _grown(self, now: float, metric: str, frame: MetricFrame, window_s: float) -> np.ndarray:
        """The counter now less its lowest value within the window, as the rules count it."""
        history = _window(self._ib.setdefault(f"{metric}/{window_s:g}", deque()), now, frame.ib(metric), window_s)
        stacked = np.vstack([v for _, v in history])
        return np.nan_to_num(stacked[-1] - np.nanmin(np.nan_to_num(stacked, nan=np.inf), axis=0), nan=0.0)

    def _evaluate(self, now: float, conditions: list[tuple[str, str, float]]) -> list[Alert]:
        holding = {(name, target): hold for name, target, hold in conditions}
        for key in list(self._pending):
            if key not in holding:
                del self._pending[key]
                self._firing.discard(key)
        new: list[Alert] = []
        for key, hold in holding.items():
            since = self._pending.setdefault(key, now)
            if key not in self._firing and now - since >= hold:
                self._firing.add(key)
                alert = Alert(key[0], key[1], now)
                self.fired.append(alert)
                new.append(alert)
        return new


def _window(
    history: deque[tuple[float, np.ndarray]], now: float, values: np.ndarray, window_s: float
) -> deque[tuple[float, np.ndarray]]:
    history.append((now, values.copy()))
    while history and now - history[0][0] > window_s:
        history.popleft()
    return history


def _peak(history: deque[tuple[float, np.ndarray]]) -> np.ndarray:
    stacked = np.vstack([v for _, v in history])
    return np.where(np.isnan(stacked).all(axis=0), np.nan, np.nanmax(np.nan_to_num(stacked, nan=-np.inf), axis=0))


def _cooling(frame: MetricFrame, temp: np.ndarray, util: np.ndarray, lim: DetectionLimits) -> np.ndarray:
    """GpuCoolingFault: an idle GPU over the median of its node's idle GPUs by the excess, with another idle GPU."""
    idle = util < lim.idle_util_percent
    hosts = np.array([e.hostname for e in frame.entities])
    out = np.zeros(len(temp), dtype=bool)
    for host in np.unique(hosts[idle]):
        mine = idle & (hosts == host)
        if mine.sum() > 1:
            out |= mine & (temp > float(np.median(temp[mine])) + lim.cooling_excess_c)
    return out
