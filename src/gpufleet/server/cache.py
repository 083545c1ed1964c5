"""Answers to the heavy reads (summary, nodes, GPUs, jobs, fabric), encoded once and shared for a moment.

Under load every dashboard and script asks for the same few views; building one walks every GPU of the fleet under
the control plane's lock, which ingest needs too. A view is rebuilt at most once per `TTL_S`, and a reader never
waits for that: past its TTL an answer is still served while one background build replaces it (what agents push
shows within about two TTLs). Only a view that has no answer yet is built in the reader's request (one caller
builds, the others wait and share the bytes). Any change made through the API drops every view at once, so a
person who cordons a node sees it cordoned on the next read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
from fastapi.responses import Response

from gpufleet.locks import ordered_lock

TTL_S = 1.0
STALE_LIMIT_S = 10.0  # an answer older than this is not served while it is rebuilt: the reader waits instead
MAX_ENTRIES = 512  # keys carry query parameters (an incident cursor, a node): stale ones go past this many
JSON = "application/json"

log = logging.getLogger("gpufleet.server")
_encode = msgspec.json.Encoder().encode


class ReadCache:
    def __init__(self, ttl_s: float = TTL_S, stale_limit_s: float = STALE_LIMIT_S) -> None:
        self.ttl_s, self.stale_limit_s = ttl_s, stale_limit_s
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, int, bytes]] = {}  # key -> (built at, generation, body)
        self._building: dict[str, Any] = {}  # key -> the gate of the one caller building it
        self._refreshing: set[str] = set()
        self._generation = 0
        self.hits = self.builds = self.stale = 0

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def answer(self, key: str, build: Callable[[], Any]) -> Response:
        return Response(self.get(key, build), media_type=JSON)

    def get(self, key: str, build: Callable[[], Any]) -> bytes:
        with self._lock:
            entry = self._current(key)
            if entry is not None:
                age = time.monotonic() - entry[0]
                if age < self.ttl_s:
                    self.hits += 1
                    return entry[2]
                if age < self.stale_limit_s:
                    self.stale += 1
                    if key not in self._refreshing:
                        self._refreshing.add(key)
                        threading.Thread(target=self._refresh, args=(key, build), daemon=True).start()
                    return entry[2]
        return self._build_now(key, build)

    def _refresh(self, key: str, build: Callable[[], Any]) -> None:
        try:
            self._build_now(key, build)
        except Exception:  # the reader is gone; the next one builds in its request and sees the error
            log.exception("rebuilding the %s view failed", key)
        finally:
            with self._lock:
                self._refreshing.discard(key)

    def _build_now(self, key: str, build: Callable[[], Any]) -> bytes:
        with self._lock:
            gate = self._building.setdefault(key, ordered_lock("view"))
        with gate:  # one caller builds; the others wait and take what it built
            body = self._fresh(key)
            if body is not None:
                return body
            with self._lock:
                generation = self._generation
            body = _encode(build())
            with self._lock:
                self.builds += 1
                self._building.pop(key, None)  # callers already waiting hold the gate; later ones find the entry
                if generation == self._generation:  # not if a change dropped the views meanwhile
                    if len(self._entries) >= MAX_ENTRIES:
                        now = time.monotonic()
                        self._entries = {k: e for k, e in self._entries.items() if now - e[0] < self.ttl_s}
                    self._entries[key] = (time.monotonic(), generation, body)
            return body

    def _current(self, key: str) -> tuple[float, int, bytes] | None:
        """The entry for `key` if no change has dropped it since it was built (call holding the lock)."""
        entry = self._entries.get(key)
        return entry if entry is not None and entry[1] == self._generation else None

    def _fresh(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._current(key)
            if entry is not None and time.monotonic() - entry[0] < self.ttl_s:
                self.hits += 1
                return entry[2]
        return None
