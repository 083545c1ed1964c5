"""An ASGI middleware that times every HTTP request of an inference server into `InferenceMetrics`, and can serve
/metrics beside it. Pure ASGI: it works under uvicorn, hypercorn, Starlette or FastAPI, and imports none of them.

    app = MetricsMiddleware(app, InferenceMetrics("llama-3-8b"), paths=["/v1/"], metrics_path="/metrics")

What it assumes, without help from the app:
- a request ends when the app returns; a response status >= 500, or an exception from the app, is an error; a
  request cancelled under the app (the client went away) leaves in-flight and counts in no outcome;
- in a streamed response each non-empty body chunk is one token: the first is the first token, the gaps between
  the next ones are inter-token latencies. A response sent in one piece is one token, whose time is its time to
  first token. The body of a response with status >= 400 is an error message, not tokens.

With an OpenTelemetry SDK configured, each timed request is a span (`gpufleet.instrument.tracing`) whose parent is
the request's W3C `traceparent`, and it is the current span while the app runs, so the app's own spans nest under
it.

An app that knows better reports itself through the request's handle, `request_handle(scope)` (in Starlette or
FastAPI also `request.state.inference`): once it calls `token()` or `first_token()` the middleware stops counting
chunks, and `fail()` marks an error the status does not show (a stream that ends in an error event).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import make_asgi_app

from gpufleet.instrument.inference import InferenceMetrics, Request
from gpufleet.instrument.tracing import active_tracer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STATE_KEY = "inference"  # scope["state"][STATE_KEY]: Starlette's request.state.inference


def request_handle(scope: Scope) -> Request | None:
    """The handle of the request the middleware is timing, or None outside it (another path, no middleware)."""
    state = scope.get("state")
    handle = state.get(STATE_KEY) if isinstance(state, dict) else None
    return handle if isinstance(handle, Request) else None


class MetricsMiddleware:
    """Times the HTTP requests whose path starts with one of `paths` (all of them when None), and serves the
    registry of `metrics` at `metrics_path` when given. Other traffic (websockets, lifespan) passes untouched."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: InferenceMetrics,
        paths: Iterable[str] | None = None,
        *,
        metrics_path: str | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = None if paths is None else tuple(paths)
        self.metrics_path = metrics_path
        self._metrics_app = make_asgi_app(metrics.registry) if metrics_path else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if self._metrics_app is not None and path == self.metrics_path:
            await self._metrics_app(scope, receive, send)
            return
        if self.paths is not None and not path.startswith(self.paths):
            await self.app(scope, receive, send)
            return

        traced = active_tracer(self.metrics.tracer_provider) is not None
        parent, attributes = _trace_context(scope) if traced else (None, None)
        with self.metrics.request(parent, attributes) as handle:
            # A scope of our own: a server may share one state dict between requests.
            scope = {**scope, "state": {**scope.get("state", {}), STATE_KEY: handle}}

            tokens_in_body = True

            async def timed_send(message: Message) -> None:
                nonlocal tokens_in_body
                kind = message["type"]
                if kind == "http.response.body":
                    if tokens_in_body and message.get("body"):
                        handle.chunk_sent()  # before the send: the time the app produced it
                elif kind == "http.response.start":
                    status = message["status"]
                    tokens_in_body = status < 400  # an error page is no generated text
                    if status >= 500:
                        handle.fail(str(status))  # HTTP semantic conventions: error.type is the status code
                    if handle.spans is not None:
                        handle.spans.request.set_attribute("http.response.status_code", status)
                await send(message)

            if handle.spans is None:
                await self.app(scope, receive, timed_send)
                return
            context = sys.modules["opentelemetry.context"]
            token = context.attach(sys.modules["opentelemetry.trace"].set_span_in_context(handle.spans.request))
            try:
                await self.app(scope, receive, timed_send)
            finally:
                context.detach(token)


def _trace_context(scope: Scope) -> tuple[Any, dict[str, Any]]:
    """The OpenTelemetry context the request's headers carry (traceparent, with the globally configured
    propagator) and its HTTP attributes. Only called where the application configured an SDK."""
    propagate = importlib.import_module("opentelemetry.propagate")
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        headers[key] = f"{headers[key]},{value.decode('latin-1')}" if key in headers else value.decode("latin-1")
    attributes = {"http.request.method": scope.get("method", ""), "url.path": scope["path"]}
    return propagate.extract(headers), attributes
