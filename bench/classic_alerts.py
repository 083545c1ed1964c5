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

from gpufleet.catalog.ib_counters import load_ib_counters
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.frame import MetricFrame
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig


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
    fired: list[Alert] = field(default_factory=list)
    _pending: dict[tuple[str, str], float] = field(default_factory=dict)
    _firing: set[tuple[str, str]] = field(default_factory=set)
    _last: float = -np.inf
    _clock: deque[tuple[float, np.ndarray]] = field(default_factory=deque)
    _ib: dict[str, deque[tuple[float, np.ndarray]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        xids = xid_ratings()  # the Xid rules page as the Xid policy rates each code
        self._xid_rule = {code: "GpuXidFatal" for code in xids.fatal}
        self._xid_rule |= {code: "GpuXid" for code in xids.nonfatal}
        self._xid_rule |= {code: "GpuXidLineDependent" for code in xids.by_line}
        self._xid_unknown = "GpuXidFatal" if xids.unknown == "FATAL" else "GpuXid"
        counters = load_ib_counters()
        self._ib_rules = [
            (counters[name].metric, float(counters[name].threshold or 1)) for name in self.config.ib_counters
        ]

    def observe(self, now: float, frame: MetricFrame) -> list[Alert]:
        """Call every tick; it scrapes and evaluates every `scrape_s`."""
        if now - self._last < self.scrape_s:
            return []
        self._last = now
        conditions: list[tuple[str, str, float]] = []  # (alert, target, for seconds) holding now
        gpus = [f"gpu/{n}/{i}" for n, i in self.frame_entities]
        temp, clock = frame.gpu("DCGM_FI_DEV_GPU_TEMP"), frame.gpu("DCGM_FI_DEV_SM_CLOCK")
        cfg = self.config
        for i in np.flatnonzero(temp > cfg.gpu_temp_c):
            conditions.append(("GpuTemperatureHigh", gpus[i], 300.0))
        for i in np.flatnonzero(frame.gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") > 0):
            conditions.append(("GpuEccDoubleBitError", gpus[i], 0.0))
        for i in np.flatnonzero(frame.gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE") > 0):
            conditions.append(("GpuRowRemapFailure", gpus[i], 0.0))
        for code, counts in frame.xid_counts.items():
            name = self._xid_rule.get(code, self._xid_unknown)
            for i in np.flatnonzero(counts > 0):
                conditions.append((name, gpus[i], 0.0))
        for i in np.flatnonzero(frame.gpu("DCGM_FI_DEV_GPU_UTIL") < cfg.idle_util_percent):
            conditions.append(("GpuIdleCost30m", gpus[i], 1800.0))
        self._clock.append((now, clock.copy()))
        while self._clock and now - self._clock[0][0] > 1800.0:
            self._clock.popleft()
        stacked = np.vstack([c for _, c in self._clock])
        peak = np.where(np.isnan(stacked).all(axis=0), np.nan, np.nanmax(np.nan_to_num(stacked, nan=-np.inf), axis=0))
        hot_slow = (clock < cfg.clock_drop_ratio * peak) & (temp > cfg.clock_drop_temp_c)
        for i in np.flatnonzero(hot_slow):
            conditions.append(("GpuClockDropHot", gpus[i], 300.0))
        for (name, labels), value in frame.gauges.items():
            if name == "training_last_step_timestamp_seconds" and now - value > cfg.stall_seconds:
                conditions.append(("TrainingStalled", f"job/{dict(labels)['job']}", 0.0))
        for metric, threshold in self._ib_rules:
            history = self._ib.setdefault(metric, deque())
            history.append((now, frame.ib(metric).copy()))
            while history and now - history[0][0] > 600.0:
                history.popleft()
            grown = np.nan_to_num(history[-1][1] - history[0][1], nan=0.0)
            for i in np.flatnonzero(grown > threshold):
                node, hca = self.ports[i]
                conditions.append((f"Infiniband{metric}Rising", f"port/{node}/{hca}", 0.0))
        return self._evaluate(now, conditions)

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
