"""Inference services seen from their own series: request-duration, time-to-first-token and inter-token histograms,
errors, generated tokens and queue depth (gpufleet.instrument's names, or vLLM's), into one `ServiceFact` per
service and version for the push.

The last minute's traffic and p50/p95/p99 are computed here for a quick look; the cumulative histograms travel too,
so the control plane judges the SLOs over its own windows, summed across replicas. A percentile needs enough
requests to mean something; with fewer it is absent, not zero. A histogram that breaks Prometheus' rules (bounds
not ascending, cumulative counts falling) is skipped and said in the fact's `problems`, never half-read.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import numpy as np

from gpufleet.instrument import names
from gpufleet.model.observe import HistogramFact, ServiceFact
from gpufleet.telemetry.frame import Histogram, LabelItems, MetricFrame
from gpufleet.telemetry.quantile import histogram_quantile


@dataclass(frozen=True, slots=True)
class Dialect:
    """One server's names for the same signals, and the label that names the service."""

    service_label: str
    ttft: str
    inter_token: str
    errors: str | None
    generated_tokens: str
    queue_depth: str

    @property
    def histograms(self) -> tuple[str, str]:
        return self.ttft, self.inter_token


# request-duration histogram -> how the rest of that server's series are named
DIALECTS = {
    names.INFERENCE_REQUEST_DURATION: Dialect(
        "model",
        names.INFERENCE_TIME_TO_FIRST_TOKEN,
        names.INFERENCE_INTER_TOKEN_LATENCY,
        names.INFERENCE_ERRORS,
        names.INFERENCE_GENERATED_TOKENS,
        names.INFERENCE_QUEUE_DEPTH,
    ),
    names.VLLM_REQUEST_DURATION: Dialect(
        "model_name",
        names.VLLM_TIME_TO_FIRST_TOKEN,
        names.VLLM_INTER_TOKEN_LATENCY,
        None,  # vLLM counts finished requests by reason, not errors
        names.VLLM_GENERATED_TOKENS,
        names.VLLM_QUEUE_DEPTH,
    ),
}
LATENCY_HISTOGRAMS = {name: d.service_label for name, d in DIALECTS.items()}
ERRORS = names.INFERENCE_ERRORS
WINDOW_S = 60.0
MIN_REQUESTS = 20  # fewer in the window: no percentile


@dataclass(slots=True)
class _Point:
    time: float
    buckets: np.ndarray
    count: int


@lru_cache(maxsize=1024)
def _bounds_problem(bounds: tuple[float, ...]) -> str | None:
    """Why a histogram's bounds cannot be read (they rarely change, so each set is judged once)."""
    if not all(math.isfinite(b) for b in bounds) or any(a >= b for a, b in pairwise(bounds)):
        return "bucket bounds are not finite and ascending"
    return None


def histogram_fact(hist: Histogram) -> tuple[HistogramFact | None, str | None]:
    """The wire form of a scraped histogram, or why it cannot be read. Runs on every push of every service: plain
    Python on a few dozen buckets, not numpy calls that cost more to set up than to run."""
    bounds = hist.bounds
    counts = [float(c) for c in hist.bucket_counts.tolist()]
    if not bounds or len(bounds) != len(counts):
        return None, f"{len(bounds)} bucket bounds for {len(counts)} counts"
    why = _bounds_problem(tuple(bounds))
    if why:
        return None, why
    if not all(math.isfinite(c) for c in counts) or counts[0] < 0 or any(a > b for a, b in pairwise(counts)):
        return None, "cumulative bucket counts fall from one bucket to the next"
    if not math.isfinite(hist.count) or hist.count < counts[-1]:
        return None, f"count {hist.count} is below the last bucket's {counts[-1]:g}"
    total = hist.sum if math.isfinite(hist.sum) else 0.0
    return HistogramFact(list(bounds), counts, float(hist.count), total), None


class ServiceWindows:
    def __init__(self, window_s: float = WINDOW_S, min_requests: int = MIN_REQUESTS) -> None:
        self.window_s, self.min_requests = window_s, min_requests
        self._past: dict[tuple[str, LabelItems], deque[_Point]] = {}  # per histogram, its points in the window

    def facts(self, frame: MetricFrame, now: float) -> list[ServiceFact]:
        out = []
        for (name, labels), hist in frame.histograms.items():
            dialect = DIALECTS.get(name)
            label = dict(labels)
            service = label.get(dialect.service_label, "") if dialect else ""
            if dialect is None or not service:
                continue
            problems: list[str] = []
            latency, why = histogram_fact(hist)
            if why:
                problems.append(f"{name}: {why}; skipped")
            quantiles, requests, span = self._window((name, labels), hist, now) if latency else ([None] * 3, 0, 0.0)
            ttft, inter_token = (self._histogram(frame, name, labels, problems) for name in dialect.histograms)
            tokens, queue = (
                self._gauge(frame, name, labels) for name in (dialect.generated_tokens, dialect.queue_depth)
            )
            errors = frame.gauges.get((dialect.errors, labels), 0.0) if dialect.errors else 0.0
            out.append(
                ServiceFact(
                    service=service,
                    requests=int(hist.count) if latency else 0,
                    errors=int(errors) if math.isfinite(errors) and errors >= 0 else 0,
                    requests_per_s=round(requests / span, 3) if span > 0 else 0.0,
                    p50_s=quantiles[0],
                    p95_s=quantiles[1],
                    p99_s=quantiles[2],
                    window_s=round(span, 3),
                    version=label.get("version", ""),
                    latency=latency,
                    ttft=ttft,
                    inter_token=inter_token,
                    generated_tokens=tokens,
                    queue_depth=queue,
                    problems=problems[:16],
                )
            )
        return out

    def _window(
        self, key: tuple[str, LabelItems], hist: Histogram, now: float
    ) -> tuple[list[float | None], int, float]:
        past = self._past.setdefault(key, deque())
        point = _Point(now, np.asarray(hist.bucket_counts).copy(), int(hist.count))
        if past and point.count < past[-1].count:  # the server restarted: its counters began again
            past.clear()
        past.append(point)
        while len(past) > 1 and now - past[1].time >= self.window_s:
            past.popleft()
        first = past[0]
        requests = point.count - first.count
        quantiles: list[float | None] = [None, None, None]
        if requests >= self.min_requests:
            window = point.buckets - first.buckets
            quantiles = [round(histogram_quantile(q, hist.bounds, window, requests), 6) for q in (0.5, 0.95, 0.99)]
        return quantiles, requests, now - first.time

    @staticmethod
    def _histogram(frame: MetricFrame, name: str, labels: LabelItems, problems: list[str]) -> HistogramFact | None:
        """One of the service's other histograms, under the same labels as its request-duration histogram."""
        hist = frame.histograms.get((name, labels))
        if hist is None:
            return None
        fact, why = histogram_fact(hist)
        if why:
            problems.append(f"{name}: {why}; skipped")
        return fact

    @staticmethod
    def _gauge(frame: MetricFrame, name: str, labels: LabelItems) -> float | None:
        value = frame.gauges.get((name, labels))
        return value if value is not None and math.isfinite(value) and value >= 0 else None
