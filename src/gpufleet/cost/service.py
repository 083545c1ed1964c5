"""The cost report of a period: GPU utilization and who held each GPU, read from the metric store (embedded, or
Prometheus / VictoriaMetrics through the same query API) on one time grid, measured and priced
(cost/usage.py, cost/report.py) with what the control plane knows of the nodes (their pools) and
workloads (which are training jobs, which inference services).

The operator's cost config (prices, namespace -> team, thresholds) is $GPUFLEET_HOME/cost.yaml when it exists,
read again on every report, so an edit shows without a restart.

A period that begins before the metric history does is reported from where the history begins, on that span's grid,
with the period asked for beside it (`asked_hours`): an hour of data is never headed as a week.

A workload info series outlives its pod by the store's lookback (5 minutes, as in PromQL): the last few minutes
of a finished pod count as held, once per pod, whichever store it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from gpufleet.cost.config import CostConfig, model_key
from gpufleet.cost.report import CostReport, build_report
from gpufleet.cost.usage import Usage, measure
from gpufleet.errors import UserError
from gpufleet.spec.base import parse_duration
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC
from gpufleet.telemetry.store import Selector
from gpufleet.telemetry.store.query import MetricStore, RangeSeries


@dataclass(frozen=True, slots=True)
class FleetFacts:
    """What the control plane knows of the fleet that pricing needs, as agents reported it."""

    workload_kinds: Mapping[str, str] = field(default_factory=dict)  # workload -> "job" | "service"
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> its labels
    node_models: Mapping[str, str] = field(default_factory=dict)  # node -> its first GPU's model ("" unknown)
    out_of_service: Mapping[str, str] = field(default_factory=dict)  # node -> why it is not idle capacity


class CostSource(Protocol):
    """What a cost report reads: the metric history, the clock, and the fleet's facts (the control plane is one)."""

    def clock(self) -> float: ...

    def metric_store(self) -> MetricStore | None: ...

    def fleet_facts(self) -> FleetFacts: ...


CONFIG_NAME = "cost.yaml"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # MIG instances report this ratio, and no GPU_UTIL
MAX_POINTS = 2016  # per series: a week at 5 minutes
MIN_STEP_S = 60.0
STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_PERIOD_S = 366 * 86400.0
SINCE_FIX = "give a duration such as 90m, 24h or 7d"


def parse_since(since: str | float) -> float:
    """A report's period in seconds, or a UserError that says how to write one."""
    try:
        seconds = parse_duration(since)
    except ValueError:
        raise UserError(f"--since {since!r} is not a duration", fix=SINCE_FIX) from None
    if seconds < MIN_STEP_S:
        raise UserError(f"--since {since!r} is shorter than one minute", fix=SINCE_FIX)
    if seconds > MAX_PERIOD_S:
        raise UserError(f"--since {since!r} is longer than a year", fix="report a year or less at a time")
    return seconds


def step_for(seconds: float) -> float:
    """The grid step: a minute, or the first round step that keeps a series under MAX_POINTS."""
    want = seconds / MAX_POINTS
    return float(next((s for s in STEPS_S if s >= want), math.ceil(want / 86400) * 86400))


def period(clock: float, seconds: float, whole: bool = True) -> tuple[float, float, float]:
    """(start, end, step) of the `seconds` before `clock` on whole steps, so a report asked twice in a step is the
    same: the whole steps within it, or (`whole=False`) enough steps to hold all of it."""
    step = step_for(seconds)
    end = math.floor(clock / step) * step
    steps = math.floor(seconds / step) if whole else math.ceil(seconds / step - 1e-9)
    return end - steps * step, end, step


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.2f}".rstrip("0").rstrip(".")


def _read(store: MetricStore, start: float, end: float, step: float) -> tuple[list[RangeSeries], ...]:
    """Utilization (GPU_UTIL, and MIG instances' engine activity) and who held each GPU, on the period's grid."""
    first = start + step
    return tuple(store.range(Selector.of(name), first, end, step) for name in (UTIL, ENGINE, POD_INFO_METRIC))


def _first_point(*results: list[RangeSeries]) -> float | None:
    """The earliest grid point any series has a value at (None: no data in the period)."""
    firsts = [
        float(s.timestamps[~np.isnan(s.values)][0]) for series in results for s in series if (~np.isnan(s.values)).any()
    ]
    return min(firsts, default=None)


def load_config(path: Path | None) -> CostConfig:
    """The given file when present (the control plane's is $GPUFLEET_HOME/cost.yaml), else the defaults."""
    return CostConfig.from_file(path) if path is not None and path.exists() else CostConfig()


class CostService:
    def __init__(self, source: CostSource, config: CostConfig | None = None, config_path: Path | None = None) -> None:
        self.source = source
        self._config = config
        self.config_path = config_path  # read again on every report, so an edit shows without a restart

    def config(self) -> CostConfig:
        return self._config if self._config is not None else load_config(self.config_path)

    def usage(self, since: str | float, idle_below: float | None = None, config: CostConfig | None = None) -> Usage:
        config = config or self.config()
        threshold = config.idle_below_pct if idle_below is None else idle_below
        if not 0.0 <= threshold <= 100.0:
            raise UserError(f"--idle-below {threshold:g} is not a utilization", fix="give a percentage, 0 to 100")
        seconds = parse_since(since)
        store = self.source.metric_store()
        if store is None:
            raise UserError(
                "this control plane keeps no metric history", fix="start it with the embedded store or --metrics"
            )
        clock = self.source.clock()
        start, end, step = period(clock, seconds)
        util, engine, held = _read(store, start, end, step)
        begins = _first_point(util, engine, held)
        covered = start if begins is None else begins - step  # a point stands for the step before it
        narrowed = covered > start
        if narrowed:  # the history begins inside the period: the report is of what it covers, on a finer grid
            asked = start
            start, end, step = period(clock, end - covered, whole=False)
            start = max(start, asked)
            util, engine, held = _read(store, start, end, step)
            begins = _first_point(util, engine, held)
            start = max(start, start if begins is None else begins - step)  # the points before it have no data
        facts = self.source.fleet_facts()
        kinds, pools, labels = self._fleet_facts(config, facts)
        usage = measure(util, held, engine=engine, start=start, end=end, step=step, idle_below=threshold,
                        kinds=kinds, pools=pools, labels=labels)  # fmt: skip
        usage.out_of_service = dict(facts.out_of_service)
        if narrowed:
            usage.asked_s = seconds
            usage.notes.append(
                f"the metric history covers {_hours(end - start)} h of the {_hours(seconds)} h asked for: the report "
                "is of those"
            )
        return usage

    def report(self, since: str | float = "7d", idle_below: float | None = None) -> CostReport:
        config = self.config()
        return build_report(self.usage(since, idle_below, config), config)

    def _fleet_facts(
        self, config: CostConfig, facts: FleetFacts
    ) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, str]]]:
        """Which workloads are jobs and services, and each node's pool and labels."""
        labels = {node: dict(node_labels) for node, node_labels in facts.node_labels.items()}
        pools = {
            node: config.pool_of(
                node_labels, model_key(facts.node_models[node]) if facts.node_models.get(node) else node
            )
            for node, node_labels in facts.node_labels.items()
        }
        return dict(facts.workload_kinds), pools, labels
