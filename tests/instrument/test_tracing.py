"""Spans and exemplars with the OpenTelemetry SDK's own in-memory exporter: the request's span tree, its parent
from the traceparent header, the trace id on the latency histogram's exemplar, and nothing at all without an SDK."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpufleet.instrument import InferenceMetrics, MetricsMiddleware, inference, names, request_handle
from gpufleet.instrument.asgi import Receive, Scope, Send
from gpufleet.instrument.tracing import FIRST_TOKEN_SPAN, GENERATION_SPAN, QUEUE_SPAN, REQUEST_SPAN
from tests.instrument.conftest import Clock

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"  # the W3C Trace Context spec's example traceparent


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock().install(monkeypatch, inference)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def streaming(clock: Clock, chunks: list[bytes], status: int = 200, queue: float = 0.0) -> Any:
    """An app that waits `queue` seconds in the queue, then streams `chunks` (0.1 s to the first, 0.02 between)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        handle = request_handle(scope)
        assert handle is not None
        if queue:
            with handle.queued():
                clock.advance(queue)
        await send({"type": "http.response.start", "status": status, "headers": []})
        for i, chunk in enumerate(chunks):
            clock.advance(0.1 if i == 0 else 0.02)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def get(app: Any, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(run())


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def exemplars(registry: CollectorRegistry, family: str) -> list[tuple[float, dict[str, str]]]:
    """(bucket bound, exemplar labels) of every bucket of `family` with an exemplar, in the OpenMetrics exposition."""
    out = []
    for fam in text_string_to_metric_families(openmetrics(registry).decode()):
        if fam.name == family:
            for sample in fam.samples:
                if sample.name.endswith("_bucket") and sample.exemplar is not None:
                    out.append((float(sample.labels["le"]), dict(sample.exemplar.labels)))
    return out


def test_a_streamed_request_is_a_span_tree_under_its_traceparent(
    clock: Clock, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("llama-3-8b", "v2", registry=registry, tracer_provider=provider)
    app = MetricsMiddleware(streaming(clock, [b"Hello", b" world", b"!"], queue=0.25), metrics)
    assert get(app, "/v1/chat", {"traceparent": PARENT}).text == "Hello world!"

    spans = by_name(exporter)
    assert set(spans) == {REQUEST_SPAN, QUEUE_SPAN, FIRST_TOKEN_SPAN, GENERATION_SPAN}
    request = spans[REQUEST_SPAN]
    assert request.kind is SpanKind.SERVER
    assert f"{request.context.trace_id:032x}" == TRACE_ID  # joined the caller's trace
    assert request.parent is not None and request.parent.span_id == 0x00F067AA0BA902B7
    assert {s.parent.span_id for s in spans.values() if s is not request and s.parent} == {request.context.span_id}
    attrs = dict(request.attributes or {})
    assert attrs["gen_ai.request.model"] == "llama-3-8b" and attrs["gpufleet.model.version"] == "v2"
    assert attrs["http.request.method"] == "GET" and attrs["url.path"] == "/v1/chat"
    assert attrs["http.response.status_code"] == 200 and attrs["gen_ai.usage.output_tokens"] == 3
    assert request.status.status_code is StatusCode.UNSET
    # the spans measure what the histograms measure: queue 0.25, first token at 0.35, then two gaps of 0.02
    assert seconds(spans[QUEUE_SPAN]) == pytest.approx(0.25)
    assert seconds(spans[FIRST_TOKEN_SPAN]) == pytest.approx(0.35)
    assert seconds(spans[GENERATION_SPAN]) == pytest.approx(0.04)
    assert seconds(request) == pytest.approx(0.39)


def test_the_slow_request_behind_a_p99_breach_is_its_exemplar(
    clock: Clock, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", registry=registry, tracer_provider=provider)
    fast = MetricsMiddleware(streaming(clock, [b"a", b"b"]), metrics)
    slow = MetricsMiddleware(streaming(clock, [b"a", b"b"], queue=20.0), metrics)
    for _ in range(20):
        get(fast, "/v1/gen")
    get(slow, "/v1/gen")
    slow_trace = next(
        f"{s.context.trace_id:032x}"
        for s in exporter.get_finished_spans()
        if s.name == REQUEST_SPAN and seconds(s) > 20
    )
    by_bound = dict(exemplars(registry, names.INFERENCE_REQUEST_DURATION))
    slowest = max(by_bound)
    assert slowest > 20 and by_bound[slowest]["trace_id"] == slow_trace
    assert len(by_bound[slowest]["span_id"]) == 16
    fast_bound = min(by_bound)
    assert fast_bound < 1 and by_bound[fast_bound]["trace_id"] != slow_trace
    ttft = dict(exemplars(registry, names.INFERENCE_TIME_TO_FIRST_TOKEN))
    assert ttft[max(ttft)]["trace_id"] == slow_trace  # 20 s in the queue is 20 s to the first token


def test_errors_mark_the_span(clock: Clock, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
    metrics = InferenceMetrics("toy", registry=CollectorRegistry(), tracer_provider=provider)
    get(MetricsMiddleware(streaming(clock, [b"overloaded"], status=503), metrics), "/v1/gen")
    request = by_name(exporter)[REQUEST_SPAN]
    assert request.status.status_code is StatusCode.ERROR
    assert dict(request.attributes or {})["error.type"] == "503"
    exporter.clear()

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError):
        get(MetricsMiddleware(broken, metrics), "/v1/gen")
    request = by_name(exporter)[REQUEST_SPAN]
    assert dict(request.attributes or {})["error.type"] == "RuntimeError"
    assert request.status.status_code is StatusCode.ERROR


def test_the_apps_own_spans_nest_under_the_request(exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
    tracer = provider.get_tracer("app")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        with tracer.start_as_current_span("model.forward"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    metrics = InferenceMetrics("toy", registry=CollectorRegistry(), tracer_provider=provider)
    get(MetricsMiddleware(app, metrics), "/v1/gen")
    spans = by_name(exporter)
    assert spans["model.forward"].parent is not None
    assert spans["model.forward"].parent.span_id == spans[REQUEST_SPAN].context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # the middleware left the context as it found it


def test_an_unsampled_trace_leaves_no_exemplar(clock: Clock, exporter: InMemorySpanExporter) -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", registry=registry, tracer_provider=provider)
    get(MetricsMiddleware(streaming(clock, [b"a"]), metrics), "/v1/gen")
    assert exporter.get_finished_spans() == ()
    assert exemplars(registry, names.INFERENCE_REQUEST_DURATION) == []


GLOBAL_PROBE = """
import asyncio, httpx, sys
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from gpufleet.instrument import InferenceMetrics, MetricsMiddleware

async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})

def call(metrics):
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=MetricsMiddleware(app, metrics)),
                                     base_url="http://t") as client:
            await client.get("/v1/gen")
    asyncio.run(run())

registry = CollectorRegistry()
call(InferenceMetrics("before", registry=registry))
print("otel imported:", "opentelemetry.trace" in sys.modules)
from opentelemetry import trace
call(InferenceMetrics("proxy", registry=registry))
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
call(InferenceMetrics("sdk", registry=registry))
requests = [s for s in exporter.get_finished_spans() if s.name == "inference.request"]
print("spans:", [dict(s.attributes)["gen_ai.request.model"] for s in requests])
text = generate_latest(registry).decode()
import re
print("exemplars of:", sorted({re.search(r'model="(\\w+)"', l).group(1) for l in text.splitlines() if " # {" in l}))
"""


def test_nothing_happens_without_a_configured_sdk_and_the_global_one_is_used_once_set() -> None:
    done = subprocess.run([sys.executable, "-c", GLOBAL_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "otel imported: False",  # the library never imports OpenTelemetry itself
        "spans: ['sdk']",  # the API's default (proxy) provider gives nothing; the SDK's does
        "exemplars of: ['sdk']",
    ]
