from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from gpufleet.instrument import InferenceMetrics, inference, names
from tests.instrument.conftest import Clock, Scrape, scrape

LABELS = {"model": "llama", "version": "v2"}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock().install(monkeypatch, inference)


def buckets(s: Scrape, name: str, **labels: str) -> dict[str, float]:
    """The histogram's cumulative counts by `le`."""
    return {
        dict(lab)["le"]: v
        for (n, lab), v in s.samples.items()
        if n == f"{name}_bucket" and dict(lab).items() >= labels.items()
    }


def test_a_streamed_request(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = InferenceMetrics("llama", "v2", registry=registry)
    with m.request() as r:
        clock.advance(0.25)
        r.first_token()
        for _ in range(4):
            clock.advance(0.02)
            r.token()
        clock.advance(0.01)
    s = scrape(registry)
    ttft, itl, duration = (
        names.INFERENCE_TIME_TO_FIRST_TOKEN,
        names.INFERENCE_INTER_TOKEN_LATENCY,
        names.INFERENCE_REQUEST_DURATION,
    )
    assert s.value(f"{ttft}_count", **LABELS) == 1
    assert s.value(f"{ttft}_sum", **LABELS) == pytest.approx(0.25)
    assert buckets(s, ttft, **LABELS)["0.2"] == 0  # 0.25 s lands in the 0.3 bucket, the SLO's bound
    assert buckets(s, ttft, **LABELS)["0.3"] == 1
    assert s.value(f"{itl}_count", **LABELS) == 4
    assert s.value(f"{itl}_sum", **LABELS) == pytest.approx(0.08)
    assert buckets(s, itl, **LABELS)["0.015"] == 0
    assert buckets(s, itl, **LABELS)["0.02"] == 4
    assert s.value(f"{duration}_count", **LABELS) == 1
    assert s.value(f"{duration}_sum", **LABELS) == pytest.approx(0.34)
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 5
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="ok") == 1
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="error") == 0
    assert s.value(names.INFERENCE_ERRORS, **LABELS) == 0
    assert s.value(names.INFERENCE_IN_FLIGHT, **LABELS) == 0


def test_tokens_arriving_together_share_the_gap(clock: Clock) -> None:
    registry = CollectorRegistry()
    m = InferenceMetrics("llama", "v2", registry=registry)
    with m.request() as r:
        clock.advance(0.1)
        r.token(2)  # the first call is the first token(s): time to first token only
        clock.advance(0.11)
        r.token(4)
    s = scrape(registry)
    itl = names.INFERENCE_INTER_TOKEN_LATENCY
    assert s.value(f"{names.INFERENCE_TIME_TO_FIRST_TOKEN}_count", **LABELS) == 1
    assert s.value(f"{itl}_count", **LABELS) == 4
    assert s.value(f"{itl}_sum", **LABELS) == pytest.approx(0.11)
    assert buckets(s, itl, **LABELS)["0.025"] == 0  # 0.0275 s each
    assert buckets(s, itl, **LABELS)["0.03"] == 4
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 6
    assert r.tokens == 6


def test_an_exception_is_an_error_and_goes_on() -> None:
    registry = CollectorRegistry()
    m = InferenceMetrics("llama", "v2", registry=registry)
    with pytest.raises(ValueError, match="bad prompt"), m.request():
        raise ValueError("bad prompt")
    with m.request() as r:
        r.fail()  # an error response the server returns itself
    s = scrape(registry)
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="error") == 2
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="ok") == 0
    assert s.value(names.INFERENCE_ERRORS, **LABELS) == 2
    assert s.value(f"{names.INFERENCE_REQUEST_DURATION}_count", **LABELS) == 2
    assert s.value(names.INFERENCE_IN_FLIGHT, **LABELS) == 0


def test_a_cancelled_request_leaves_in_flight_and_counts_nowhere() -> None:
    registry = CollectorRegistry()
    m = InferenceMetrics("llama", "v2", registry=registry)
    with pytest.raises(asyncio.CancelledError), m.request():
        raise asyncio.CancelledError
    s = scrape(registry)
    assert s.value(names.INFERENCE_IN_FLIGHT, **LABELS) == 0
    assert s.value(names.INFERENCE_ERRORS, **LABELS) == 0
    assert s.value(f"{names.INFERENCE_REQUEST_DURATION}_count", **LABELS) == 0


def test_queue_depth_and_in_flight() -> None:
    registry = CollectorRegistry()
    m = InferenceMetrics("llama", "v2", registry=registry)

    def gauges() -> tuple[float | None, float | None]:
        s = scrape(registry)
        return s.value(names.INFERENCE_QUEUE_DEPTH, **LABELS), s.value(names.INFERENCE_IN_FLIGHT, **LABELS)

    assert gauges() == (0, 0)
    with m.request() as r:
        assert gauges() == (0, 1)
        with r.queued():
            assert gauges() == (1, 0)  # waiting for a slot: queued, not served
        assert gauges() == (0, 1)
        with m.queued():
            assert gauges() == (1, 1)
    assert gauges() == (0, 0)
    m.set_queue_depth(7)
    assert gauges() == (7, 0)


def test_histograms_use_the_contract_buckets_and_versions_are_apart() -> None:
    registry = CollectorRegistry()
    a, b = InferenceMetrics("llama", "v1", registry=registry), InferenceMetrics("llama", "v2", registry=registry)
    with a.request() as r:
        r.token()
    with b.request():
        pass
    s = scrape(registry)
    for name, bounds in (
        (names.INFERENCE_REQUEST_DURATION, names.REQUEST_DURATION_BUCKETS),
        (names.INFERENCE_TIME_TO_FIRST_TOKEN, names.TIME_TO_FIRST_TOKEN_BUCKETS),
        (names.INFERENCE_INTER_TOKEN_LATENCY, names.INTER_TOKEN_LATENCY_BUCKETS),
    ):
        assert s.types[name] == "histogram"
        got = sorted(float(le) for le in buckets(s, name, model="llama", version="v1"))
        assert got == [*bounds, float("inf")]
    assert s.value(names.INFERENCE_GENERATED_TOKENS, model="llama", version="v1") == 1
    assert s.value(names.INFERENCE_GENERATED_TOKENS, model="llama", version="v2") == 0
    assert s.value(names.INFERENCE_REQUESTS, model="llama", version="v2", outcome="ok") == 1


def test_every_exported_name_is_one_of_the_contract() -> None:
    registry = CollectorRegistry()
    InferenceMetrics("llama", registry=registry)
    contract = {v for k, v in vars(names).items() if k.startswith("INFERENCE_") and not k.endswith("_BUCKETS")}
    types = scrape(registry).types
    exported = {f"{n}_total" if kind == "counter" else n for n, kind in types.items() if not n.endswith("_created")}
    assert exported == contract


def test_a_model_name_is_required() -> None:
    with pytest.raises(ValueError, match="model must name"):
        InferenceMetrics("", registry=CollectorRegistry())
