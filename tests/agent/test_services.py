"""An inference service's facts from its histogram: a one-minute window, no percentile on too little traffic,
and a restarted server's counters beginning again."""

from __future__ import annotations

import numpy as np

from gpufleet.agent.services import ERRORS, ServiceWindows
from gpufleet.telemetry.frame import MetricFrame

NAME = "gpufleet_inference_request_duration_seconds"
BOUNDS = [0.05, 0.1, 0.25, 0.5, 1.0]


def _frame() -> MetricFrame:
    return MetricFrame(entities=())


def _observe(frame: MetricFrame, values: list[float], service: str = "chat") -> None:
    frame.histogram(NAME, {"model": service}, BOUNDS).observe(values)


def test_percentiles_cover_the_last_minute_only() -> None:
    frame, windows = _frame(), ServiceWindows(window_s=60.0, min_requests=20)
    _observe(frame, [2.0] * 100)  # slow, long ago
    windows.facts(frame, 0.0)
    _observe(frame, [0.07] * 100)
    windows.facts(frame, 30.0)
    _observe(frame, [0.07] * 100)
    (fact,) = windows.facts(frame, 100.0)  # the window now starts at t=30: the slow requests are out of it
    assert fact.service == "chat"
    assert fact.requests == 300
    assert fact.p99_s is not None and 0.05 < fact.p99_s <= 0.1
    assert fact.window_s == 70.0
    assert fact.requests_per_s == round(100 / 70, 3)


def test_too_little_traffic_gives_no_percentile() -> None:
    frame, windows = _frame(), ServiceWindows(min_requests=20)
    windows.facts(frame, 0.0)
    _observe(frame, [0.2] * 5)
    windows.facts(frame, 1.0)
    (fact,) = windows.facts(frame, 2.0)
    assert fact.p50_s is None and fact.p99_s is None
    assert fact.requests == 5


def test_a_restarted_server_starts_a_new_window() -> None:
    frame, windows = _frame(), ServiceWindows(min_requests=1)
    _observe(frame, [0.07] * 50)
    windows.facts(frame, 0.0)
    frame.histograms.clear()  # the server restarted: its histogram begins again, lower
    _observe(frame, [0.3] * 10)
    (fact,) = windows.facts(frame, 10.0)
    assert fact.requests == 10 and fact.p50_s is None  # nothing to take a difference from yet
    _observe(frame, [0.3] * 30)
    (fact,) = windows.facts(frame, 20.0)
    assert fact.p50_s is not None and 0.25 < fact.p50_s <= 0.5


def test_errors_and_other_histograms() -> None:
    frame, windows = _frame(), ServiceWindows()
    _observe(frame, [0.1])
    frame.histogram("http_request_duration_seconds", {"handler": "/"}, BOUNDS).observe([0.1])
    frame.histogram("vllm:e2e_request_latency_seconds", {"model_name": "llama"}, BOUNDS).observe(np.full(3, 0.2))
    frame.set_gauge(ERRORS, {"model": "chat"}, 4)
    facts = {f.service: f for f in windows.facts(frame, 0.0)}
    assert set(facts) == {"chat", "llama"}  # not every histogram is a service
    assert facts["chat"].errors == 4 and facts["llama"].requests == 3
