"""Live updates by Server-Sent Events: the dashboard and `gpufleet get -w` follow the fleet without polling.

Each connection gets `summary` (headline figures) every few seconds, `incident` when one opens or changes state,
and `event` for each new event; a comment line keeps idle proxies from closing it. What every connection looks at
(the newest events, the incidents, the headline) is read once per poll for all of them, not once per connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from gpufleet.control import views
from gpufleet.control.service import ControlPlane

POLL_S = 1.0
SUMMARY_EVERY_S = 5.0
KEEPALIVE_S = 15.0
HEADLINE = (
    "time", "nodes", "nodes_lost", "gpus", "gpus_lost", "gpus_throttled", "gpus_idle_held", "util_mean", "temp_max",
    "power_kw", "jobs", "links_down", "incidents_open", "incidents_critical", "simulated_time",
)  # fmt: skip


T = TypeVar("T")


class Shared(Generic[T]):
    """A read every stream needs, made at most once per `ttl_s` however many streams ask."""

    def __init__(self, read: Callable[[], T], ttl_s: float) -> None:
        self.read, self.ttl_s = read, ttl_s
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._value: T | None = None
        self.reads = 0

    def get(self) -> T:
        with self._lock:  # the others wait for the one reading, then share it
            if self._value is None or time.monotonic() - self._at >= self.ttl_s:
                self._value, self._at = self.read(), time.monotonic()
                self.reads += 1
            return self._value


def _frame(kind: str, data: Any, ident: str | None = None) -> str:
    head = f"id: {ident}\n" if ident else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, default=str, separators=(',', ':'))}\n\n"


def router(plane: ControlPlane) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["stream"])

    def headline() -> dict[str, Any]:
        body = views.summary(plane, with_history=False)
        return {k: body[k] for k in HEADLINE}

    def incident_keys() -> dict[str, tuple[str, float, int, dict[str, Any]]]:
        return {r["id"]: (r["state"], r["last_seen"], r["count"], r) for r in plane.incidents(limit=500)}

    # a little under the poll, so each connection's next poll finds a fresh read
    shared_headline = Shared(headline, SUMMARY_EVERY_S * 0.9)
    shared_events = Shared(lambda: plane.store.events(None, None, 200), POLL_S * 0.9)
    shared_incidents = Shared(incident_keys, POLL_S * 0.9)

    async def follow(request: Request, after: int) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        last_summary = last_beat = 0.0
        known = await run_in_threadpool(shared_incidents.get)
        if after < 0:
            newest = await run_in_threadpool(plane.store.events, None, None, 1)
            after = int(newest[0]["id"]) if newest else 0
        yield "retry: 3000\n\n"
        while not await request.is_disconnected():
            now = loop.time()
            if now - last_summary >= SUMMARY_EVERY_S:
                last_summary = last_beat = now
                yield _frame("summary", await run_in_threadpool(shared_headline.get))
            events = await run_in_threadpool(shared_events.get)
            for event in reversed([e for e in events if int(e["id"]) > after]):
                after = int(event["id"])
                last_beat = now
                yield _frame("event", event, str(after))
            current = await run_in_threadpool(shared_incidents.get)
            for inc_id, key in current.items():
                if known.get(inc_id, (None,))[:3] != key[:3]:
                    last_beat = now
                    yield _frame("incident", key[3])
            known = current
            if now - last_beat >= KEEPALIVE_S:
                last_beat = now
                yield ": keepalive\n\n"
            await asyncio.sleep(POLL_S)

    @api.get(
        "/stream",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "summary, incident and event frames."}},
    )
    async def stream(
        request: Request,
        after: int = Query(-1, ge=-1, description="Replay events after this id (the `id:` of the last one seen)."),
    ) -> StreamingResponse:
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else after
        return StreamingResponse(
            follow(request, start),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return api
