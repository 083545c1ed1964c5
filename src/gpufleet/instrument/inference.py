"""Inference metrics: request duration, time to first token, inter-token latency, outcomes, generated tokens, queue
depth and requests in flight, in the names and buckets of `names`, labelled {model, version}.

    metrics = InferenceMetrics("llama-3-8b", version="2024-06")
    with metrics.request() as r:
        with r.queued():
            await slot.acquire()
        async for chunk in generate(prompt):
            r.token(len(chunk))
            yield chunk

Time to first token runs from the start of the request (its queueing included, as the user waits through it) to
the first token; inter-token latency is the gap between token arrivals, spread over the tokens that arrived
together. An exception inside the block counts the request as an error and goes on.

Where the application configured an OpenTelemetry SDK, each request is also a span tree (request, queue, first
token, generation) and its duration and time-to-first-token observations carry the trace id as an exemplar: see
`gpufleet.instrument.tracing`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import gpufleet.instrument.names as names
from gpufleet.instrument._families import family, registry_or_default
from gpufleet.instrument.tracing import QUEUE_SPAN, RequestSpans, active_tracer

OK = "ok"
ERROR = "error"

_HELP = {
    names.INFERENCE_REQUEST_DURATION: "Seconds from a request's start to its end, errors included.",
    names.INFERENCE_TIME_TO_FIRST_TOKEN: "Seconds from a request's start to its first token.",
    names.INFERENCE_INTER_TOKEN_LATENCY: "Seconds between consecutive generated tokens.",
    names.INFERENCE_REQUESTS: "Requests finished, by outcome.",
    names.INFERENCE_ERRORS: "Requests that failed.",
    names.INFERENCE_GENERATED_TOKENS: "Tokens generated.",
    names.INFERENCE_QUEUE_DEPTH: "Requests waiting to start.",
    names.INFERENCE_IN_FLIGHT: "Requests being served.",
}
_LABELS = ("model", "version")


class _Queued:
    """Counts a wait in the queue; inside a request, the request leaves in-flight while it waits."""

    __slots__ = ("_in_flight", "_queue", "_request", "_span")

    def __init__(self, queue: Gauge, in_flight: Gauge | None, request: Request | None = None) -> None:
        self._queue, self._in_flight, self._request = queue, in_flight, request
        self._span: Any = None

    def __enter__(self) -> None:
        self._queue.inc()
        if self._in_flight is not None:
            self._in_flight.dec()
        request = self._request
        if request is not None and request.spans is not None:
            self._span = request.spans.child(QUEUE_SPAN, request.wall_ns())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._queue.dec()
        if self._in_flight is not None:
            self._in_flight.inc()
        if self._span is not None and self._request is not None:
            self._span.end(end_time=self._request.wall_ns())
            self._span = None


class Request:
    """One request being served, as `InferenceMetrics.request()` opens it."""

    __slots__ = (
        "_attributes",
        "_last",
        "_metrics",
        "_parent",
        "_start_ns",
        "auto_tokens",
        "error_type",
        "failed",
        "spans",
        "start",
        "tokens",
    )

    def __init__(
        self, metrics: InferenceMetrics, parent: Any = None, attributes: Mapping[str, Any] | None = None
    ) -> None:
        self._metrics = metrics
        self.start = 0.0
        self._last: float | None = None  # when the last token arrived
        self.tokens = 0
        self.failed = False
        self.error_type: str | None = None  # what failed, for the span's error.type
        # The ASGI middleware counts body chunks as tokens until the app reports its own.
        self.auto_tokens = True
        self._parent, self._attributes = parent, attributes
        self._start_ns = 0
        self.spans: RequestSpans | None = None  # where an OpenTelemetry SDK is configured

    def __enter__(self) -> Request:
        m = self._metrics
        self.start = time.perf_counter()
        tracer = active_tracer(m.tracer_provider)
        if tracer is not None:
            self._start_ns = time.time_ns()
            self.spans = RequestSpans(tracer, self._start_ns, m.model, m.version, self._parent, self._attributes)
        m._in_flight.inc()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        m = self._metrics
        m._in_flight.dec()
        spans = self.spans
        if exc_type is not None and not issubclass(exc_type, Exception):
            if spans is not None:
                spans.abandon(self.wall_ns())
            return  # cancelled (the client went away) or interrupted: not a served request, nor a failed one
        m._duration.observe(time.perf_counter() - self.start, self._exemplar())
        failed = self.failed or exc_type is not None
        if failed:
            m._errors.inc()
            m._requests_error.inc()
        else:
            m._requests_ok.inc()
        if spans is not None:
            error = (self.error_type or "failed") if self.failed else exc_type.__qualname__ if exc_type else None
            last = None if self._last is None else self.wall_ns(self._last)
            spans.finish(self.wall_ns(), last, self.tokens, error)

    def wall_ns(self, at: float | None = None) -> int:
        """Wall-clock nanoseconds for a perf_counter reading (now by default), on the request's own time line, so
        spans and metrics measure the same intervals."""
        at = time.perf_counter() if at is None else at
        return self._start_ns + int((at - self.start) * 1e9)

    def _exemplar(self) -> dict[str, str] | None:
        return None if self.spans is None else self.spans.exemplar()

    def first_token(self, n: int = 1) -> None:
        """The first token (or the first `n`, arriving together) is out. After the first, the same as `token()`."""
        self.token(n)

    def token(self, n: int = 1) -> None:
        """`n` more tokens arrived together; the first call of a request is its first token."""
        self.auto_tokens = False
        self._arrived(n)

    def fail(self, error_type: str | None = None) -> None:
        """Count this request as an error without raising (an error response the code returns itself);
        `error_type` names it in the trace (an HTTP status, an exception's class)."""
        self.failed = True
        if error_type is not None:
            self.error_type = error_type

    def queued(self) -> _Queued:
        """A context manager around this request's wait for a slot: queued, not in flight, while it lasts."""
        return _Queued(self._metrics._queue, self._metrics._in_flight, self)

    def chunk_sent(self) -> None:
        """A response body chunk went out: one token, until the code reports tokens itself (the ASGI middleware's
        guess for streamed responses)."""
        if self.auto_tokens:
            self._arrived(1)

    def _arrived(self, n: int) -> None:
        if n <= 0:
            return
        now = time.perf_counter()
        m = self._metrics
        if self._last is None:
            m._ttft.observe(now - self.start, self._exemplar())
            if self.spans is not None:
                self.spans.first_token(self._start_ns, self.wall_ns(now))
        elif n == 1:
            m._itl.observe(now - self._last)
        else:
            gap = (now - self._last) / n
            for _ in range(n):
                m._itl.observe(gap)
        self._last = now
        self.tokens += n
        m._tokens.inc(n)


class InferenceMetrics:
    """A served model's metrics. Children are bound here, once; every series is true from the start (no requests
    yet is 0 requests, an empty queue is 0)."""

    def __init__(
        self, model: str, version: str = "", registry: CollectorRegistry | None = None, tracer_provider: Any = None
    ) -> None:
        """`tracer_provider`: an OpenTelemetry TracerProvider for this model's spans; by default the one set
        globally, if any (`gpufleet.instrument.tracing`)."""
        if not model:
            raise ValueError("model must name the served model (it becomes the `model` label)")
        self.model, self.version = model, version
        self.tracer_provider = tracer_provider
        self.registry = registry_or_default(registry)
        labels = (model, version)
        self._duration = self._histogram(names.INFERENCE_REQUEST_DURATION, names.REQUEST_DURATION_BUCKETS, labels)
        self._ttft = self._histogram(names.INFERENCE_TIME_TO_FIRST_TOKEN, names.TIME_TO_FIRST_TOKEN_BUCKETS, labels)
        self._itl = self._histogram(names.INFERENCE_INTER_TOKEN_LATENCY, names.INTER_TOKEN_LATENCY_BUCKETS, labels)
        requests = family(
            self.registry, Counter, names.INFERENCE_REQUESTS, _HELP[names.INFERENCE_REQUESTS], (*_LABELS, "outcome")
        )
        self._requests_ok = requests.labels(model, version, OK)
        self._requests_error = requests.labels(model, version, ERROR)
        self._errors = self._counter(names.INFERENCE_ERRORS, labels)
        self._tokens = self._counter(names.INFERENCE_GENERATED_TOKENS, labels)
        self._queue = self._gauge(names.INFERENCE_QUEUE_DEPTH, labels)
        self._in_flight = self._gauge(names.INFERENCE_IN_FLIGHT, labels)
        self._queued = _Queued(self._queue, None)

    def _histogram(self, name: str, buckets: tuple[float, ...], labels: tuple[str, str]) -> Histogram:
        return family(self.registry, Histogram, name, _HELP[name], _LABELS, buckets).labels(*labels)

    def _counter(self, name: str, labels: tuple[str, str]) -> Counter:
        return family(self.registry, Counter, name, _HELP[name], _LABELS).labels(*labels)

    def _gauge(self, name: str, labels: tuple[str, str]) -> Gauge:
        return family(self.registry, Gauge, name, _HELP[name], _LABELS).labels(*labels)

    def request(self, parent: Any = None, attributes: Mapping[str, Any] | None = None) -> Request:
        """A context manager around one request, from its arrival to its last byte. `parent`: the OpenTelemetry
        context the request arrived with (its traceparent); `attributes`: more for its span."""
        return Request(self, parent, attributes)

    def queued(self) -> _Queued:
        """A context manager around a wait in the queue, for servers that queue before a request is opened."""
        return self._queued

    def set_queue_depth(self, depth: int) -> None:
        """The queue's depth, for servers that know it (a scheduler's waiting list); use this or `queued()`."""
        self._queue.set(depth)
