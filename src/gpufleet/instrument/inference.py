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
"""

from __future__ import annotations

import time
from types import TracebackType

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import gpufleet.instrument.names as names
from gpufleet.instrument._families import family, registry_or_default

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

    __slots__ = ("_in_flight", "_queue")

    def __init__(self, queue: Gauge, in_flight: Gauge | None) -> None:
        self._queue, self._in_flight = queue, in_flight

    def __enter__(self) -> None:
        self._queue.inc()
        if self._in_flight is not None:
            self._in_flight.dec()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._queue.dec()
        if self._in_flight is not None:
            self._in_flight.inc()


class Request:
    """One request being served, as `InferenceMetrics.request()` opens it."""

    __slots__ = ("_last", "_metrics", "auto_tokens", "failed", "start", "tokens")

    def __init__(self, metrics: InferenceMetrics) -> None:
        self._metrics = metrics
        self.start = 0.0
        self._last: float | None = None  # when the last token arrived
        self.tokens = 0
        self.failed = False
        # The ASGI middleware counts body chunks as tokens until the app reports its own.
        self.auto_tokens = True

    def __enter__(self) -> Request:
        self.start = time.perf_counter()
        self._metrics._in_flight.inc()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        m = self._metrics
        m._in_flight.dec()
        if exc_type is not None and not issubclass(exc_type, Exception):
            return  # cancelled (the client went away) or interrupted: not a served request, nor a failed one
        m._duration.observe(time.perf_counter() - self.start)
        if self.failed or exc_type is not None:
            m._errors.inc()
            m._requests_error.inc()
        else:
            m._requests_ok.inc()

    def first_token(self, n: int = 1) -> None:
        """The first token (or the first `n`, arriving together) is out. After the first, the same as `token()`."""
        self.token(n)

    def token(self, n: int = 1) -> None:
        """`n` more tokens arrived together; the first call of a request is its first token."""
        self.auto_tokens = False
        self._arrived(n)

    def fail(self) -> None:
        """Count this request as an error without raising (an error response the code returns itself)."""
        self.failed = True

    def queued(self) -> _Queued:
        """A context manager around this request's wait for a slot: queued, not in flight, while it lasts."""
        return _Queued(self._metrics._queue, self._metrics._in_flight)

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
            m._ttft.observe(now - self.start)
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

    def __init__(self, model: str, version: str = "", registry: CollectorRegistry | None = None) -> None:
        if not model:
            raise ValueError("model must name the served model (it becomes the `model` label)")
        self.model, self.version = model, version
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

    def request(self) -> Request:
        """A context manager around one request, from its arrival to its last byte."""
        return Request(self)

    def queued(self) -> _Queued:
        """A context manager around a wait in the queue, for servers that queue before a request is opened."""
        return self._queued

    def set_queue_depth(self, depth: int) -> None:
        """The queue's depth, for servers that know it (a scheduler's waiting list); use this or `queued()`."""
        self._queue.set(depth)
