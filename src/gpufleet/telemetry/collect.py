"""One collection tick: sources fill a MetricFrame, the frame is rendered once for /metrics and stored.

Collection runs on its own clock (never on scrape): `tick()` fills, renders and stores; `/metrics` handlers
serve `latest_text()`, the text of the last tick. A source that raises is marked down in
`gpufleet_source_up{source}` and logged once per failure streak; the other sources are still served, so one
bad GPU or file never takes the endpoint down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from gpufleet.telemetry.exposition import ExpositionConfig, Renderer
from gpufleet.telemetry.frame import GpuEntity, IbPort, MetricFrame

log = logging.getLogger("gpufleet.telemetry")

SOURCE_UP = "gpufleet_source_up"


class FrameSource(Protocol):
    """What the twin, NVML, sysfs and kernel-log readers implement to feed the agent."""

    name: str

    def fill(self, frame: MetricFrame) -> None:
        """Write this tick's values into the frame's arrays (rows it does not own stay untouched)."""
        ...


class FrameSink(Protocol):
    def ingest(self, frame: MetricFrame, timestamp: float | None = None) -> int: ...


class Collector:
    def __init__(
        self,
        entities: Sequence[GpuEntity],
        sources: Sequence[FrameSource],
        ib_ports: Sequence[IbPort] = (),
        sinks: Sequence[FrameSink] = (),
        exposition: ExpositionConfig | None = None,
        frame: MetricFrame | None = None,
    ) -> None:
        self.frame = frame or MetricFrame(tuple(entities), ib_ports=tuple(ib_ports))
        self.sources = list(sources)
        self.sinks = list(sinks)
        self.renderer = Renderer(exposition)
        self._text = ""
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}

    def tick(self, now: float | None = None) -> None:
        frame = self.frame
        frame.timestamp = time.time() if now is None else now
        frame.clear_values()
        for source in self.sources:
            try:
                source.fill(frame)
            except Exception as exc:
                self._mark(source.name, False, f"{type(exc).__name__}: {exc}")
            else:
                self._mark(source.name, True, "")
        text = self.renderer.render(frame)
        with self._lock:
            self._text = text
        for sink in self.sinks:
            try:
                sink.ingest(frame)
            except Exception as exc:
                self._mark(f"sink:{type(sink).__name__}", False, f"{type(exc).__name__}: {exc}")

    def _mark(self, name: str, ok: bool, why: str) -> None:
        self.frame.set_gauge(SOURCE_UP, {"source": name}, 1.0 if ok else 0.0)
        if ok:
            if self._failing.pop(name, None) is not None:
                log.warning("telemetry source %s recovered", name)
        elif name not in self._failing:
            self._failing[name] = why
            log.error("telemetry source %s failed: %s", name, why)

    def latest_text(self) -> str:
        with self._lock:
            return self._text

    @property
    def failing(self) -> dict[str, str]:
        return dict(self._failing)
