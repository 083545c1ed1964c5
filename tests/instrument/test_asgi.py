from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gpufleet.instrument import InferenceMetrics, MetricsMiddleware, inference, names, request_handle
from gpufleet.instrument.asgi import Receive, Scope, Send
from tests.instrument.conftest import Clock, Scrape, scrape

LABELS = {"model": "toy", "version": "1"}
TTFT, ITL, DURATION = (
    names.INFERENCE_TIME_TO_FIRST_TOKEN,
    names.INFERENCE_INTER_TOKEN_LATENCY,
    names.INFERENCE_REQUEST_DURATION,
)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock().install(monkeypatch, inference)


def streaming(chunks: Sequence[bytes], clock: Clock | None = None, status: int = 200, gap: float = 0.02) -> Any:
    """An app that streams `chunks`, the clock moving `gap` before each one (0.1 s before the first)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        for i, chunk in enumerate(chunks):
            if clock is not None:
                clock.advance(0.1 if i == 0 else gap)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def get(app: Any, *paths: str) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.get(path) for path in paths]

    return asyncio.run(run())


def test_a_streamed_response_is_timed_chunk_by_chunk(clock: Clock) -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", "1", registry=registry)
    app = MetricsMiddleware(streaming([b"Hello", b"", b" world", b"!"], clock), metrics)
    (response,) = get(app, "/v1/generate")
    assert response.text == "Hello world!"
    s = scrape(registry)
    assert s.value(f"{TTFT}_count", **LABELS) == 1
    assert s.value(f"{TTFT}_sum", **LABELS) == pytest.approx(0.1)
    assert s.value(f"{ITL}_count", **LABELS) == 2  # the empty chunk is no token
    assert s.value(f"{ITL}_sum", **LABELS) == pytest.approx(0.06)
    assert s.value(f"{DURATION}_count", **LABELS) == 1
    assert s.value(f"{DURATION}_sum", **LABELS) == pytest.approx(0.16)
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 3
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="ok") == 1
    assert s.value(names.INFERENCE_IN_FLIGHT, **LABELS) == 0


def test_server_errors_and_exceptions_are_errors_client_errors_are_not() -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", "1", registry=registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/boom":
            raise RuntimeError("model crashed")
        status = 503 if scope["path"] == "/busy" else 404
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})

    wrapped = MetricsMiddleware(app, metrics)
    get(wrapped, "/busy", "/missing")
    with pytest.raises(RuntimeError, match="model crashed"):
        get(wrapped, "/boom")
    s = scrape(registry)
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="error") == 2
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="ok") == 1
    assert s.value(names.INFERENCE_ERRORS, **LABELS) == 2
    assert s.value(f"{DURATION}_count", **LABELS) == 3
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 0  # an error page is no generated text
    assert s.value(names.INFERENCE_IN_FLIGHT, **LABELS) == 0


def test_only_the_given_paths_are_timed_and_metrics_are_served() -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", "1", registry=registry)
    app = MetricsMiddleware(streaming([b"x"]), metrics, paths=["/v1/"], metrics_path="/metrics")
    responses = get(app, "/healthz", "/v1/chat/completions", "/metrics")
    assert [r.status_code for r in responses] == [200, 200, 200]
    exposition = Scrape.parse(responses[2].text)  # what a scraper sees, through prometheus-client's parser
    assert exposition.types[DURATION] == "histogram"
    assert exposition.value(f"{DURATION}_count", **LABELS) == 1  # /v1/ only: not /healthz, not /metrics
    assert exposition.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 1
    assert responses[2].headers["content-type"].startswith("text/plain")


def test_the_app_can_report_its_own_tokens_and_errors(clock: Clock) -> None:
    registry = CollectorRegistry()
    metrics = InferenceMetrics("toy", "1", registry=registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        handle = request_handle(scope)
        assert handle is not None
        clock.advance(0.05)
        handle.first_token()
        clock.advance(0.04)
        handle.token(4)  # a non-streamed answer: generated, then sent in one piece
        handle.fail()  # ...that says it failed, with a 200
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"five tokens in one body"})

    get(MetricsMiddleware(app, metrics), "/generate")
    s = scrape(registry)
    assert s.value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 5  # the body chunk is not counted on top
    assert s.value(f"{TTFT}_sum", **LABELS) == pytest.approx(0.05)
    assert s.value(f"{ITL}_count", **LABELS) == 4
    assert s.value(names.INFERENCE_REQUESTS, **LABELS, outcome="error") == 1


def test_starlette_sees_the_handle_on_request_state() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    registry = CollectorRegistry()

    async def endpoint(request: Request) -> PlainTextResponse:
        request.state.inference.token(3)
        return PlainTextResponse("abc")

    app = MetricsMiddleware(Starlette(routes=[Route("/gen", endpoint)]), InferenceMetrics("toy", "1", registry))
    (response,) = get(app, "/gen")
    assert response.text == "abc"
    assert scrape(registry).value(names.INFERENCE_GENERATED_TOKENS, **LABELS) == 3


def test_other_scopes_pass_through_and_a_shared_state_is_not_touched() -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    registry = CollectorRegistry()
    middleware = MetricsMiddleware(app, InferenceMetrics("toy", "1", registry))
    shared_state: dict[str, Any] = {"db": "pool"}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    lifespan: Scope = {"type": "lifespan"}
    http: Scope = {"type": "http", "path": "/x", "state": shared_state, "headers": []}
    asyncio.run(middleware(lifespan, receive, send))
    asyncio.run(middleware(http, receive, send))
    assert seen[0] is lifespan
    assert request_handle(seen[1]) is not None
    assert seen[1]["state"]["db"] == "pool"
    assert shared_state == {"db": "pool"}  # the handle went into a copy
    assert request_handle(http) is None
    assert scrape(registry).value(names.INFERENCE_REQUESTS, **LABELS, outcome="ok") == 1
