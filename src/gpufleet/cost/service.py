"""The cost report of a period: GPU utilization and who held each GPU, read from the metric store (embedded, or
Prometheus / VictoriaMetrics through the same query API) on one time grid, measured and priced
(telemetry/cost_usage.py, telemetry/cost_report.py) with what the control plane knows of the nodes (their pools) and
workloads (which are training jobs, which inference services).

The operator's cost config (prices, namespace -> team, thresholds) is $GPUFLEET_HOME/cost.yaml when it exists,
read again on every report, so an edit shows without a restart.

A workload info series outlives its pod by the store's lookback (5 minutes, as in PromQL): the last few minutes
of a finished pod count as held, once per pod, whichever store it is.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.control.paths import data_dir
from gpufleet.errors import UserError
from gpufleet.spec.base import parse_duration
from gpufleet.telemetry.cost_config import CostConfig, model_key
from gpufleet.telemetry.cost_report import CostReport, build_report
from gpufleet.telemetry.cost_usage import Usage, measure
from gpufleet.telemetry.exposition import POD_INFO_METRIC
from gpufleet.telemetry.store import Selector

if TYPE_CHECKING:
    from gpufleet.control.service import ControlPlane

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


def config_path() -> Path:
    return data_dir() / CONFIG_NAME


def load_config(path: Path | None = None) -> CostConfig:
    """The given file, else $GPUFLEET_HOME/cost.yaml when present, else the defaults."""
    path = path or config_path()
    return CostConfig.from_file(path) if path.exists() else CostConfig()


class CostService:
    def __init__(self, plane: ControlPlane, config: CostConfig | None = None) -> None:
        self.plane = plane
        self._config = config

    def config(self) -> CostConfig:
        return self._config if self._config is not None else load_config()

    def usage(self, since: str | float, idle_below: float | None = None, config: CostConfig | None = None) -> Usage:
        config = config or self.config()
        threshold = config.idle_below_pct if idle_below is None else idle_below
        if not 0.0 <= threshold <= 100.0:
            raise UserError(f"--idle-below {threshold:g} is not a utilization", fix="give a percentage, 0 to 100")
        seconds = parse_since(since)
        metrics = self.plane.metrics
        if metrics is None:
            raise UserError(
                "this control plane keeps no metric history", fix="start it with the embedded store or --metrics"
            )
        step = step_for(seconds)
        end = math.floor(self.plane.clock() / step) * step  # whole steps: a report asked twice in a step is the same
        start = end - math.floor(seconds / step) * step
        store = metrics.store
        first = start + step
        util = store.range(Selector.of(UTIL), first, end, step)
        engine = store.range(Selector.of(ENGINE), first, end, step)
        held = store.range(Selector.of(POD_INFO_METRIC), first, end, step)
        kinds, pools, labels = self._fleet_facts(config)
        return measure(util, held, engine=engine, start=start, end=end, step=step, idle_below=threshold,
                       kinds=kinds, pools=pools, labels=labels)  # fmt: skip

    def report(self, since: str | float = "7d", idle_below: float | None = None) -> CostReport:
        config = self.config()
        return build_report(self.usage(since, idle_below, config), config)

    def _fleet_facts(self, config: CostConfig) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, str]]]:
        """Which workloads are jobs and services, and each node's pool and labels, as agents reported them."""
        plane = self.plane
        with plane.lock:
            kinds = {job.name: "job" for job in plane.fleet.jobs()}
            pools: dict[str, str] = {}
            labels: dict[str, dict[str, str]] = {}
            for node in plane.fleet.nodes.values():
                kinds.update({fact.service: "service" for fact in node.services})
                inventory = node.inventory
                if inventory is None:
                    continue
                model = inventory.gpus[0].model if inventory.gpus else ""
                labels[node.name] = dict(inventory.labels)
                pools[node.name] = config.pool_of(inventory.labels, model_key(model) if model else node.name)
        return kinds, pools, labels
