"""Inference services seen from their own request-duration histograms: requests, errors and latency percentiles
over the last minute, for the push. A percentile needs enough requests to mean something; with fewer it is
absent, not zero."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from gpufleet.model.observe import ServiceFact
from gpufleet.telemetry.frame import LabelItems, MetricFrame
from gpufleet.telemetry.quantile import histogram_quantile

# histogram -> the label that names the service (gpufleet's own instrumentation, vLLM's)
LATENCY_HISTOGRAMS = {
    "gpufleet_inference_request_duration_seconds": "model",
    "vllm:e2e_request_latency_seconds": "model_name",
}
ERRORS = "gpufleet_inference_request_errors_total"
WINDOW_S = 60.0
MIN_REQUESTS = 20  # fewer in the window: no percentile


@dataclass(slots=True)
class _Point:
    time: float
    buckets: np.ndarray
    count: int


class ServiceWindows:
    def __init__(self, window_s: float = WINDOW_S, min_requests: int = MIN_REQUESTS) -> None:
        self.window_s, self.min_requests = window_s, min_requests
        self._past: dict[tuple[str, LabelItems], deque[_Point]] = {}  # per histogram, its points in the window

    def facts(self, frame: MetricFrame, now: float) -> list[ServiceFact]:
        out = []
        for (name, labels), hist in frame.histograms.items():
            label = LATENCY_HISTOGRAMS.get(name)
            service = dict(labels).get(label or "")
            if not service:
                continue
            past = self._past.setdefault((name, labels), deque())
            point = _Point(now, hist.bucket_counts.copy(), hist.count)
            if past and point.count < past[-1].count:  # the server restarted: its counters began again
                past.clear()
            past.append(point)
            while len(past) > 1 and now - past[1].time >= self.window_s:
                past.popleft()
            first = past[0]
            requests = point.count - first.count
            span = now - first.time
            quantiles: list[float | None] = [None, None, None]
            if requests >= self.min_requests:
                window = point.buckets - first.buckets
                quantiles = [round(histogram_quantile(q, hist.bounds, window, requests), 6) for q in (0.5, 0.95, 0.99)]
            errors = frame.gauges.get((ERRORS, ((label or "model", service),)), 0.0)
            out.append(
                ServiceFact(
                    service=service,
                    requests=point.count,
                    errors=int(errors),
                    requests_per_s=round(requests / span, 3) if span > 0 else 0.0,
                    p50_s=quantiles[0],
                    p95_s=quantiles[1],
                    p99_s=quantiles[2],
                    window_s=round(span, 3),
                )
            )
        return out
