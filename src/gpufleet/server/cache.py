"""Answers to the heavy reads (summary, nodes, GPUs, jobs, fabric), encoded once and shared for a moment.

Under load every dashboard and script asks for the same few views; building one walks every GPU of the fleet under
the control plane's lock, which ingest needs too. A view is rebuilt at most once per `TTL_S` (one caller builds,
the others wait for it and share the bytes), and any change made through the API drops every view at once, so a
person who cordons a node sees it cordoned on the next read. What agents push shows within `TTL_S`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
from fastapi.responses import Response

TTL_S = 1.0
MAX_ENTRIES = 512  # keys carry query parameters (an incident cursor, a node): stale ones go past this many
JSON = "application/json"

_encode = msgspec.json.Encoder().encode


class ReadCache:
    def __init__(self, ttl_s: float = TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, int, bytes]] = {}  # key -> (built at, generation, body)
        self._building: dict[str, threading.Lock] = {}
        self._generation = 0
        self.hits = self.builds = 0

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def answer(self, key: str, build: Callable[[], Any]) -> Response:
        return Response(self.get(key, build), media_type=JSON)

    def get(self, key: str, build: Callable[[], Any]) -> bytes:
        body = self._fresh(key)
        if body is not None:
            return body
        with self._lock:
            gate = self._building.setdefault(key, threading.Lock())
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

    def _fresh(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and time.monotonic() - entry[0] < self.ttl_s and entry[1] == self._generation:
                self.hits += 1
                return entry[2]
        return None
