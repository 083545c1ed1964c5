"""An inference service's own series on the twin (request duration, time to first token and inter-token latency
histograms, requests by outcome, errors, generated tokens, queue depth, in flight) and the service faults."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.instrument import names
from gpufleet.model import InferenceService
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.source import TwinSource
from gpufleet.sim.twin import Twin
from gpufleet.spec.scenario_spec import FaultType
from tests.sim.apptwin import Window, app_twin, collect, counter, fault, series_of, service_histogram

HISTOGRAMS = {
    names.INFERENCE_REQUEST_DURATION: names.REQUEST_DURATION_BUCKETS,
    names.INFERENCE_TIME_TO_FIRST_TOKEN: names.TIME_TO_FIRST_TOKEN_BUCKETS,
    names.INFERENCE_INTER_TOKEN_LATENCY: names.INTER_TOKEN_LATENCY_BUCKETS,
}


def serving(faults: list[InjectedFault] | None = None, **chat: object) -> Twin:
    """A twin serving `chat` (2 GPUs, 80 requests/s, version v7) and `embed` (1 GPU) on n-002."""
    fields: dict[str, object] = {"requests_per_s": 80.0, "version": "v7", "tokens_per_request": 24.0, **chat}
    services = [
        InferenceService("chat", "n-002", (0, 1), **fields),  # type: ignore[arg-type]
        InferenceService("embed", "n-002", (2,), requests_per_s=40.0, tokens_per_request=1.0),
    ]
    return app_twin(faults, services=services)


def requests(frame: object, service: str) -> tuple[float, float]:
    """(requests, errors) so far."""
    ok = counter(frame, names.INFERENCE_REQUESTS, service, outcome="ok")  # type: ignore[arg-type]
    failed = counter(frame, names.INFERENCE_REQUESTS, service, outcome="error")  # type: ignore[arg-type]
    return ok + failed, failed


def test_a_service_exports_its_series_with_the_instruments_names_and_buckets() -> None:
    twin = serving()
    twin.run(120)
    start = collect(twin)
    twin.run(300)
    frame = collect(twin)
    for name, buckets in HISTOGRAMS.items():
        hist = service_histogram(frame, "chat", name)
        assert hist.bounds == buckets and hist.count > 0
        assert (np.diff(hist.bucket_counts) >= 0).all() and hist.bucket_counts[-1] <= hist.count
    labels = {dict(items)["version"] for (n, items) in frame.histograms if n == names.INFERENCE_REQUEST_DURATION}
    assert labels == {"v7", "v1"}  # chat's own version; embed's default
    total, errors = requests(frame, "chat")
    assert total == service_histogram(frame, "chat").count and errors == 0
    assert counter(frame, names.INFERENCE_ERRORS, "chat") == 0
    tokens = counter(frame, names.INFERENCE_GENERATED_TOKENS, "chat")
    assert tokens == pytest.approx(24 * total, rel=0.1)
    itl = service_histogram(frame, "chat", names.INFERENCE_INTER_TOKEN_LATENCY)
    assert itl.count == pytest.approx(23 * total, rel=0.1)  # one gap fewer than tokens per request
    assert counter(frame, names.INFERENCE_QUEUE_DEPTH, "chat") == 0
    assert counter(frame, names.INFERENCE_IN_FLIGHT, "chat") > 0
    window = Window(start, "chat")
    assert window.quantile(frame, "chat", 0.5) < window.quantile(frame, "chat", 0.99) < 0.5
    ttft = Window(start, "chat", names.INFERENCE_TIME_TO_FIRST_TOKEN)
    assert ttft.quantile(frame, "chat", 0.95, names.INFERENCE_TIME_TO_FIRST_TOKEN) < 0.1
    assert series_of(collect(twin, "n-000"), "model", "chat") == set()  # only its own node reports it


def test_an_slo_breach_takes_p99_past_two_seconds_and_leaves_errors_alone() -> None:
    twin = serving([fault(FaultType.slo_breach, 300, service="chat", factor=10.0, duration=600)])
    twin.run(240)
    start = collect(twin)
    twin.run(60)
    healthy = Window(start, "chat").quantile(collect(twin), "chat", 0.99)
    start = collect(twin)
    twin.run(300)
    frame = collect(twin)
    assert healthy < 0.5 < 2.0 < Window(start, "chat").quantile(frame, "chat", 0.99)
    assert requests(frame, "chat")[1] == 0
    assert Window(start, "embed").quantile(frame, "embed", 0.99) < 0.5  # the other service is untouched
    twin.run(400)  # the breach is over
    start = collect(twin)
    twin.run(120)
    assert Window(start, "chat").quantile(collect(twin), "chat", 0.99) < 0.5


def test_an_error_burst_fails_its_fraction_of_requests() -> None:
    twin = serving([fault(FaultType.error_burst, 200, service="chat", factor=0.3, duration=400)])
    twin.run(200)
    start = collect(twin)
    twin.run(300)
    frame = collect(twin)
    (t0, e0), (t1, e1) = requests(start, "chat"), requests(frame, "chat")
    assert (e1 - e0) / (t1 - t0) == pytest.approx(0.3, abs=0.03)
    assert counter(frame, names.INFERENCE_ERRORS, "chat") == e1
    assert Window(start, "chat").quantile(frame, "chat", 0.99) < 0.5  # failing, not slow


def test_a_traffic_ramp_past_capacity_builds_a_queue_and_latency() -> None:
    twin = serving(
        [fault(FaultType.traffic_ramp, 200, service="chat", factor=3.0, duration=600)],
        requests_per_s=60.0,
        capacity_per_gpu=60.0,  # 120 requests/s for its two GPUs: the ramp ends at 180
    )
    twin.run(140)
    start = collect(twin)
    twin.run(60)
    before = collect(twin)
    base_rate = (requests(before, "chat")[0] - requests(start, "chat")[0]) / 60
    base_p99 = Window(start, "chat").quantile(before, "chat", 0.99)
    twin.run(540)
    start = collect(twin)
    twin.run(60)
    peak = collect(twin)
    rate = (requests(peak, "chat")[0] - requests(start, "chat")[0]) / 60
    assert rate > 2.5 * base_rate
    assert counter(peak, names.INFERENCE_QUEUE_DEPTH, "chat") > 100
    assert counter(before, names.INFERENCE_QUEUE_DEPTH, "chat") == 0
    assert Window(start, "chat").quantile(peak, "chat", 0.99) > 4 * base_p99
    twin.run(600)  # the ramp is over and the queue drains
    assert counter(collect(twin), names.INFERENCE_QUEUE_DEPTH, "chat") == 0


def test_a_service_that_goes_down_leaves_no_series_and_comes_back_fresh() -> None:
    twin = serving([fault(FaultType.service_down, 200, service="chat", duration=300)])
    source = TwinSource(twin, "n-002")
    frame = source.new_frame()
    twin.run(190)
    source.collect(frame)
    served = service_histogram(frame, "chat").count
    twin.run(100)
    source.collect(frame)
    assert series_of(frame, "model", "chat") == set()  # stale, not zero
    assert service_histogram(frame, "embed").count > 0
    assert (twin.gpus.util[twin.services[0].gpus] == 0).all()
    twin.run(300)
    source.collect(frame)
    assert 0 < service_histogram(frame, "chat").count < served  # a new process: its counters began again


def test_a_throttled_gpu_slows_its_service() -> None:
    twin = serving([fault(FaultType.power_brake, 300, node="n-002", gpu=1, duration=900)])
    twin.run(120)
    start = collect(twin)
    twin.run(120)
    before = Window(start, "chat").quantile(collect(twin), "chat", 0.5)
    twin.run(120)  # the brake pins one of its GPUs' clocks low; the service runs at its slower GPU's pace
    assert twin.gpus.sm_clock[twin.gpu("n-002", 1)] < 0.5 * twin.gpus.max_clock[twin.gpu("n-002", 1)]
    start = collect(twin)
    twin.run(120)
    assert Window(start, "chat").quantile(collect(twin), "chat", 0.5) > 1.5 * before
