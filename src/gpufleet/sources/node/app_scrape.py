"""Application metrics on a real node: the /metrics of the training and serving processes it runs (gpufleet.instrument,
vLLM), scraped in a thread of their own and put into the node's frame like any other source's values.

Only the application families are kept (training_*, gpufleet_inference_*, vllm:*), at most `max_series` per target,
so a chatty server cannot flood the agent. A target that stops answering has its series removed at the next
collection: a service that stops reporting is stale, never zero. Histograms are assembled from their `_bucket`,
`_sum` and `_count` samples; one whose buckets do not add up is passed on as read and judged downstream.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
import numpy as np

from gpufleet.background import Background
from gpufleet.parsers.prometheus_text import Metadata, Sample, parse_lines
from gpufleet.telemetry.frame import Histogram, LabelItems, MetricFrame

log = logging.getLogger("gpufleet.agent")

PREFIXES = ("training_", "gpufleet_inference_", "vllm:")
MAX_SERIES = 5000
TIMEOUT_S = 5.0
Key = tuple[str, LabelItems]


@dataclass(slots=True)
class AppSeries:
    gauges: dict[Key, float] = field(default_factory=dict)
    histograms: dict[Key, Histogram] = field(default_factory=dict)
    dropped: int = 0  # series past the cap


def _wanted(name: str) -> bool:
    return name.startswith(PREFIXES)


def read_app_metrics(lines: Iterable[str], max_series: int = MAX_SERIES) -> AppSeries:
    """The application series of one scrape. `le` buckets, `_sum` and `_count` fold into histograms; every other
    sample of a wanted family is a plain value. Bad lines are skipped (the parser reports them, never raises)."""
    out = AppSeries()
    buckets: dict[Key, dict[float, float]] = {}
    sums: dict[Key, float] = {}
    counts: dict[Key, float] = {}
    histogram_families: set[str] = set()
    samples: list[Sample] = []
    for item in parse_lines(lines):
        if isinstance(item, Sample):
            if _wanted(item.name):
                samples.append(item)
        elif isinstance(item, Metadata) and item.kind == "TYPE" and item.text.strip() == "histogram":
            histogram_families.add(item.name)
    for s in samples:
        base, part = _histogram_part(s.name, histogram_families)
        if base is None:
            if len(out.gauges) < max_series:
                out.gauges[(s.name, s.labels)] = s.value
            else:
                out.dropped += 1
            continue
        labels = tuple((k, v) for k, v in s.labels if k != "le")
        key = (base, labels)
        if part == "bucket":
            le = s.label("le")
            bound = math.inf if le in ("+Inf", "Inf", "inf") else _float(le)
            if bound is not None:
                buckets.setdefault(key, {})[bound] = s.value
        elif part == "sum":
            sums[key] = s.value
        else:
            counts[key] = s.value
    for key, by_bound in buckets.items():
        if len(out.histograms) >= max_series:
            out.dropped += 1
            continue
        finite = sorted(b for b in by_bound if math.isfinite(b))
        total = counts.get(key, by_bound.get(math.inf, by_bound[finite[-1]] if finite else 0.0))
        hist = Histogram(
            tuple(finite),
            np.array([by_bound[b] for b in finite], dtype=np.float64),
            sums.get(key, 0.0),
            int(total) if math.isfinite(total) and total >= 0 else -1,
        )
        out.histograms[key] = hist
    return out


def _histogram_part(name: str, families: set[str]) -> tuple[str | None, str]:
    for part in ("bucket", "sum", "count"):
        suffix = f"_{part}"
        if name.endswith(suffix) and name[: -len(suffix)] in families:
            return name[: -len(suffix)], part
    return None, ""


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class AppScrape(Background):
    """Scrapes the targets every `every_s` and keeps each one's last good read (dropped when it fails)."""

    thread_name = "app-scrape"

    def __init__(self, targets: list[str], every_s: float = 5.0, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__()
        self.targets, self.every_s, self.timeout_s = targets, every_s, timeout_s
        self.latest: dict[str, AppSeries] = {}
        self.failing: dict[str, str] = {}
        self._lock = threading.Lock()

    def refresh(self, client: httpx.Client) -> None:
        for url in self.targets:
            try:
                response = client.get(url, timeout=self.timeout_s)
                response.raise_for_status()
                series = read_app_metrics(response.text.splitlines())
            except httpx.HTTPError as exc:
                if url not in self.failing:
                    log.warning("scraping %s failed (retrying every %gs): %s", url, self.every_s, exc)
                self.failing[url] = str(exc)
                with self._lock:
                    self.latest.pop(url, None)  # its series go stale, not zero
                continue
            if self.failing.pop(url, None) is not None:
                log.info("application metrics at %s answer again", url)
            if series.dropped:
                log.warning("%s exports more than %d application series; %d dropped", url, MAX_SERIES, series.dropped)
            with self._lock:
                self.latest[url] = series

    def snapshot(self) -> list[AppSeries]:
        with self._lock:
            return list(self.latest.values())

    def run(self) -> None:
        with httpx.Client() as client:
            while not self.stopping.is_set():
                self.refresh(client)
                self.stopping.wait(self.every_s)


class AppMetricsSource:
    """The MetricSource side: each collection replaces the application series in the frame with the scrapes'."""

    name = "app"

    def __init__(self, scrape: AppScrape) -> None:
        self.scrape = scrape
        self._mine: set[Key] = set()

    def collect(self, frame: MetricFrame) -> None:
        gauges: dict[Key, float] = {}
        histograms: dict[Key, Histogram] = {}
        for series in self.scrape.snapshot():
            gauges.update(series.gauges)
            histograms.update(series.histograms)
        for key in self._mine - gauges.keys() - histograms.keys():
            frame.gauges.pop(key, None)
            frame.histograms.pop(key, None)
        frame.gauges.update(gauges)
        frame.histograms.update(histograms)
        self._mine = set(gauges) | set(histograms)
