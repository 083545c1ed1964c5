"""Request counts and latency per route, for the control plane's own `/metrics`."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (method, route, status) -> count; (method, route) -> [per-bucket counts..., over the last, sum, count]
        self.count: dict[tuple[str, str, int], int] = {}
        self.hist: dict[tuple[str, str], list[float]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (method, route, status)
            self.count[key] = self.count.get(key, 0) + 1
            h = self.hist.setdefault((method, route), [0.0] * (len(BUCKETS) + 3))
            h[bisect.bisect_left(BUCKETS, seconds)] += 1  # the last slot before sum counts +Inf only
            h[-2] += seconds
            h[-1] += 1

    def exposition(self) -> str:
        with self._lock:
            count, hist = dict(self.count), {k: list(v) for k, v in self.hist.items()}
        lines = [
            "# HELP gpufleet_http_requests_total API requests answered, by route and status.",
            "# TYPE gpufleet_http_requests_total counter",
        ]
        for (method, route, status), total in sorted(count.items()):
            lines.append(f'gpufleet_http_requests_total{{method="{method}",route="{route}",code="{status}"}} {total}')
        lines += [
            "# HELP gpufleet_http_request_duration_seconds Time to answer, by route.",
            "# TYPE gpufleet_http_request_duration_seconds histogram",
        ]
        for (method, route), h in sorted(hist.items()):
            labels = f'method="{method}",route="{route}"'
            running = 0.0
            for bound, n in zip(BUCKETS, h, strict=False):
                running += n
                lines.append(f'gpufleet_http_request_duration_seconds_bucket{{{labels},le="{bound}"}} {running:.0f}')
            lines.append(f'gpufleet_http_request_duration_seconds_bucket{{{labels},le="+Inf"}} {h[-1]:.0f}')
            lines.append(f"gpufleet_http_request_duration_seconds_sum{{{labels}}} {h[-2]:.6f}")
            lines.append(f"gpufleet_http_request_duration_seconds_count{{{labels}}} {h[-1]:.0f}")
        return "\n".join(lines) + "\n"


class Measured:
    """ASGI layer that times each HTTP request and files it under its route's template (never the raw path, so
    made-up paths cannot grow the series)."""

    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or ("unmatched" if status == 404 else "other")
            if template != "/api/v1/stream":  # a stream lasts as long as its client: not a latency
                self.metrics.observe(scope["method"], template, status, time.perf_counter() - started)
