"""Send spooled events to the control plane, backing off while it is down."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx

from gpufleet.agent.spool import EventSpool

log = logging.getLogger("gpufleet.agent")


class EventPusher:
    def __init__(
        self, spool: EventSpool, url: str, token: Callable[[], str | None], agent_id: str, batch: int = 500
    ) -> None:
        self.spool = spool
        self.url = url.rstrip("/") + "/api/v1/events"
        self.token = token  # read on every push: the token file may appear or rotate while the agent runs
        self.agent_id = agent_id
        self.batch = batch
        self.connected = False
        self.sent = 0
        self._warned = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(timeout=5.0)

    def push_once(self) -> bool:
        """Send one batch. True if the spool is now empty or the batch was accepted."""
        rows = self.spool.peek(self.batch)
        if not rows:
            return True
        token = self.token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = {"agent": self.agent_id, "events": [{"seq": seq, **event} for seq, event in rows]}
        try:
            resp = self._client.post(self.url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            self._down(f"control plane unreachable at {self.url}: {type(exc).__name__}")
            return False
        if resp.status_code >= 400:
            self._down(f"control plane refused events ({resp.status_code}): {resp.text[:200]}")
            return False
        self.spool.ack(rows[-1][0])
        self.sent += len(rows)
        if self._warned:
            log.info("event push to %s resumed; %d events waiting", self.url, len(self.spool))
        self.connected, self._warned = True, False
        return True

    def _down(self, message: str) -> None:
        if not self._warned:  # one line per outage, not one per retry
            log.warning("%s; events stay in the local spool (%d waiting)", message, len(self.spool))
        self.connected, self._warned = False, True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="event-pusher", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._client.close()

    def _loop(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            ok = self.push_once()
            if ok and len(self.spool) > 0:
                continue  # drain fast while it answers
            backoff = 0.5 if ok else min(backoff * 2, 30.0)
            self._wake.wait(backoff if not ok else 1.0)
            self._wake.clear()
