"""Run the twin in the background at a chosen speed, and hand consistent views of it to readers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from gpufleet.control.store import StateStore
from gpufleet.model import Event
from gpufleet.sim.twin import Twin

T = TypeVar("T")


class TwinRunner:
    """Steps `twin` so that `speed` simulated seconds pass per wall second; readers take the lock via `read`."""

    def __init__(
        self, twin: Twin, store: StateStore, speed: float = 1.0, on_tick: Callable[[], object] | None = None
    ) -> None:
        self.twin = twin
        self.on_tick = on_tick  # the health loop, run after every step
        self.store = store
        self.speed = speed
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: list[Event] = []
        twin.listeners.append(self._pending.append)

    def read(self, fn: Callable[[Twin], T]) -> T:
        with self._lock:
            return fn(self.twin)

    def act(self, fn: Callable[[Twin], T]) -> T:
        with self._lock:
            result = fn(self.twin)
            self._flush()
            return result

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="twin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        rows = [(e.time, e.kind, str(e.entity), e.message, e.attrs) for e in self._pending]
        self._pending.clear()
        self.store.add_events(rows)

    def _loop(self) -> None:
        start_wall = time.monotonic()
        start_sim = self.twin.time
        while not self._stop.is_set():
            target = start_sim + (time.monotonic() - start_wall) * self.speed
            with self._lock:
                # Bounded catch-up so a slow host never freezes readers for long.
                for _ in range(2000):
                    if self.twin.time + self.twin.tick > target:
                        break
                    self.twin.step()
                    if self.on_tick is not None:
                        self.on_tick()
                self._flush()
            self._stop.wait(0.05)
