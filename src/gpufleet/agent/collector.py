"""Collect on the agent's own clock, never on scrape: each tick fills the frame and renders /metrics once.

A scrape only copies the last rendered body, so a slow or failing source can never make Prometheus time out.
A source that fails is marked `gpufleet_source_up{source=...} 0`, logged once (and once when it recovers), and
the rest keep being served. A source whose state another thread knows (the kernel log's Xids, read by the follower)
says it by raising `SourceDown` after filling what it has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from gpufleet.background import Background
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.exposition.dcgm import Renderer
from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.agent")


class SourceDown(Exception):
    """Raised by a source, after filling what it has, that is down for a reason it states itself (`why`, reported as
    it is); `why=None` while it cannot tell yet whether it is up (nothing is reported for it)."""

    def __init__(self, why: str | None) -> None:
        super().__init__(why or "not known yet")
        self.why = why


class MetricSource(Protocol):
    name: str

    def collect(self, frame: MetricFrame) -> None: ...


class FrameSink(Protocol):
    """Where each collected frame also goes (the embedded store, a remote writer)."""

    def ingest(self, frame: MetricFrame, timestamp: float | None = None) -> int: ...


class Collector(Background):
    thread_name = "collector"
    join_s = 5.0

    def __init__(
        self,
        frame: MetricFrame,
        sources: list[MetricSource],
        interval: float = 1.0,
        exposition: ExpositionConfig | None = None,
        guard: Callable[[Callable[[], None]], None] | None = None,
        sinks: list[FrameSink] | None = None,
        after: list[Callable[[MetricFrame], None]] | None = None,
    ) -> None:
        self.frame = frame
        self.sources = sources
        self.after = list(after or [])  # what runs on each collected frame (the edge detectors)
        self.interval = interval
        self.renderer = Renderer(exposition)
        self.sinks = list(sinks or [])
        self.guard = guard or (lambda fn: fn())  # e.g. the twin runner's lock
        self.body = b""
        self.last_collect = 0.0
        self.collections = 0
        self.source_up: dict[str, bool] = {}
        super().__init__()

    def collect_once(self) -> None:
        self.guard(self._collect)
        for hook in self.after:
            self._run(f"edge:{getattr(hook, '__name__', 'hook')}", partial(hook, self.frame))
        self.body = self.renderer.render(self.frame).encode()
        for sink in self.sinks:
            self._run(f"sink:{type(sink).__name__}", partial(sink.ingest, self.frame))
        self.last_collect = time.time()
        self.collections += 1

    def _collect(self) -> None:
        self.frame.clear_values()
        self.frame.timestamp = time.time()
        for source in self.sources:
            self._run(source.name, partial(source.collect, self.frame))

    def _run(self, name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
            self.report(name, True)
        except SourceDown as exc:
            if exc.why is not None:
                self.report(name, False, exc.why)
        except Exception as exc:  # one bad source must not take the agent down
            self.report(name, False, f"{type(exc).__name__}: {exc}")

    def report(self, name: str, ok: bool, why: str = "") -> None:
        """A source's state, as `gpufleet_source_up{source=...}`; logged once when it fails and once when it
        recovers, never on every collection."""
        was = self.source_up.get(name)
        if not ok and was is not False:
            log.error("source %s is down: %s; serving the other sources", name, why or "failed")
        if ok and was is False:
            log.info("source %s recovered", name)
        self.source_up[name] = ok
        self.frame.set_gauge("gpufleet_source_up", {"source": name}, 1.0 if ok else 0.0)
        if ok:
            self.frame.sources_down.pop(name, None)
        else:  # carried to the control plane in the node's metric snapshot
            self.frame.sources_down[name] = (why or "failed")[:1000]

    def run(self) -> None:
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            self.collect_once()
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (a suspended host): skip missed ticks instead of bursting
                next_tick = time.monotonic()
                delay = 0
            self.stopping.wait(delay)
