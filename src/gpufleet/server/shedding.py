"""Reads yield to the control loop.

Python threads share one interpreter: a flood of reads (dashboards, scripts, a misbehaving exporter) can take it from
the control loop, which is what turns agents' reports into incidents and remediation. While the loop is behind, reads
are answered 503 with `Retry-After` before they reach a handler, and the loop catches up; `/healthz`, `/metrics`, the
dashboard's page, agents' pushes and people's changes always go through.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from gpufleet.server.security import READS, ASGIApp, Receive, Scope, Send

BEHIND_S = 10.0  # the loop turns every second (or every tick of the twin); this far behind, reads wait
RETRY_AFTER_S = 2
ALWAYS = frozenset({"/healthz", "/metrics", "/", "/favicon.ico"})


def sheddable(method: str, path: str) -> bool:
    """Whether a request is a read that waits while the control loop is behind."""
    return method in READS and path not in ALWAYS and not path.startswith(("/static/", "/docs", "/openapi.json"))


class Shed:
    """`lag()` is how long ago the control loop last turned (seconds), or None before its first turn."""

    def __init__(self, app: ASGIApp, lag: Callable[[], float | None], behind_s: float = BEHIND_S) -> None:
        self.app = app
        self.lag = lag
        self.behind_s = behind_s
        self.shed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and sheddable(scope["method"], scope["path"]):
            lag = self.lag()
            if lag is not None and lag > self.behind_s:
                self.shed += 1
                await _busy(send, lag)
                return
        await self.app(scope, receive, send)


async def _busy(send: Send, lag: float) -> None:
    body = json.dumps(
        {
            "error": f"the control plane is busy: its control loop is {lag:.0f} s behind, and reads wait until it "
            "catches up",
            "fix": f"retry after {RETRY_AFTER_S} s (fewer or slower readers help)",
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def loop_lag(last_turn: Callable[[], float | None]) -> Callable[[], float | None]:
    """`lag` from the monotonic time of the loop's last turn."""

    def lag() -> float | None:
        last = last_turn()
        return None if last is None else time.monotonic() - last

    return lag
