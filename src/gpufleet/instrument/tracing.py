"""OpenTelemetry spans for served requests, and the exemplars that tie a latency histogram to them.

When the application has configured an OpenTelemetry SDK (a TracerProvider set globally, or one handed to
`InferenceMetrics`), each request becomes a span tree:

    inference.request            SERVER span, from arrival to the last byte; the incoming traceparent is its parent
      inference.queue            each wait for a slot (`Request.queued()`)
      inference.first_token      from arrival to the first token: the time to first token the user waited
      inference.generation       from the first token to the last

and the request-duration and time-to-first-token observations carry the span's trace and span ids as an exemplar
(`{trace_id="...", span_id="..."}`, the label names Grafana and Prometheus' exemplar storage look up), so a p99
breach on the dashboard opens the slow requests' traces. Exemplars go out in the OpenMetrics exposition, which
Prometheus asks for when `--enable-feature=exemplar-storage` is on.

Attributes follow the OpenTelemetry semantic conventions v1.37.0: HTTP server (`http.request.method`, `url.path`,
`http.response.status_code`, `error.type`) and GenAI, still "development" there (`gen_ai.request.model`,
`gen_ai.usage.output_tokens`); the model's version goes in `gpufleet.model.version`.

Without an SDK nothing here runs: OpenTelemetry is looked up among the modules the application already imported,
never imported by this library, and a process whose tracer provider is still the API's default (a proxy or no-op)
gets no spans and no exemplars.
"""

from __future__ import annotations

import sys
from typing import Any

TRACER_NAME = "gpufleet.instrument"
REQUEST_SPAN = "inference.request"
QUEUE_SPAN = "inference.queue"
FIRST_TOKEN_SPAN = "inference.first_token"
GENERATION_SPAN = "inference.generation"


def active_tracer(provider: Any = None) -> Any:
    """The tracer to use now, or None when no SDK is configured (or OpenTelemetry was never imported)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
    return provider.get_tracer(TRACER_NAME)


class RequestSpans:
    """The spans of one request. Timestamps are wall-clock nanoseconds (OpenTelemetry's), taken by the caller."""

    __slots__ = ("_generation", "_trace", "_tracer", "request")

    def __init__(
        self, tracer: Any, start_ns: int, model: str, version: str, parent: Any = None, attributes: Any = None
    ) -> None:
        self._trace = sys.modules["opentelemetry.trace"]
        self._tracer = tracer
        attrs = {"gen_ai.request.model": model, **(attributes or {})}
        if version:
            attrs["gpufleet.model.version"] = version
        kind = self._trace.SpanKind.SERVER
        self.request = tracer.start_span(REQUEST_SPAN, context=parent, kind=kind, attributes=attrs, start_time=start_ns)
        self._generation: Any = None

    def child(self, name: str, start_ns: int) -> Any:
        return self._tracer.start_span(name, context=self._trace.set_span_in_context(self.request), start_time=start_ns)

    def first_token(self, start_ns: int, now_ns: int) -> None:
        """The first token is out: the wait for it is a span, and the generation's starts."""
        self.child(FIRST_TOKEN_SPAN, start_ns).end(end_time=now_ns)
        self._generation = self.child(GENERATION_SPAN, now_ns)

    def finish(self, now_ns: int, last_token_ns: int | None, tokens: int, error: str | None) -> None:
        if self._generation is not None:
            self._generation.end(end_time=last_token_ns or now_ns)
        self.request.set_attribute("gen_ai.usage.output_tokens", tokens)
        if error is not None:
            self.request.set_attribute("error.type", error)
            self.request.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        self.request.end(end_time=now_ns)

    def abandon(self, now_ns: int) -> None:
        """The request was cancelled under the app (the client went away): the span ends, marked so."""
        if self._generation is not None:
            self._generation.end(end_time=now_ns)
        self.request.set_attribute("error.type", "cancelled")
        self.request.end(end_time=now_ns)

    def exemplar(self) -> dict[str, str] | None:
        """{trace_id, span_id} of the request span, when its trace is sampled (an unsampled one is nowhere to look
        up)."""
        ctx = self.request.get_span_context()
        if not ctx.trace_flags.sampled:
            return None
        return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
