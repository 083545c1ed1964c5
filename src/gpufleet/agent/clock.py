"""The node's clock, read every CLOCK_EVERY_S in a thread of its own (a time daemon's command may take seconds,
and the collector never waits on it): served on /metrics as `gpufleet_clock_offset_seconds`,
`gpufleet_clock_error_seconds` and `gpufleet_clock_synchronized`, and carried to the control plane with each push
(`Batch.clock`), which compares the clocks of a job's nodes (control/clock_skew.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import msgspec

from gpufleet.agent.collector import SourceDown
from gpufleet.background import Background
from gpufleet.errors import GpufleetError
from gpufleet.model.observe import ClockFact
from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.agent")

CLOCK_EVERY_S = 30.0


class ClockWatch(Background):
    """Reads the clock with `read` every `every_s`; `latest` is the last reading (None until the first)."""

    name = "clock"
    thread_name = "clock"
    join_s = 2.0

    def __init__(self, read: Callable[[], ClockFact], every_s: float = CLOCK_EVERY_S) -> None:
        super().__init__()
        self.read = read
        self.every_s = every_s
        self._lock = threading.Lock()
        self._latest: ClockFact | None = None
        self._why: str | None = None

    @property
    def latest(self) -> ClockFact | None:
        with self._lock:
            return self._latest

    def read_once(self) -> None:
        try:
            fact, why = self.read(), None
            # held to the contract here: a reading the control plane would refuse must not cost the push it rides
            msgspec.json.decode(msgspec.json.encode(fact), type=ClockFact)
        except msgspec.ValidationError as exc:
            fact, why = None, f"the clock reading is out of range ({exc})"
        except GpufleetError as exc:
            fact, why = None, exc.message
        except Exception as exc:  # a reader's bug must not end the thread
            fact, why = None, f"{type(exc).__name__}: {exc}"
        with self._lock:
            if fact is not None:
                self._latest = fact
            self._why = why

    def run(self) -> None:
        while not self.stopping.is_set():
            self.read_once()
            self.stopping.wait(self.every_s)

    def collect(self, frame: MetricFrame) -> None:
        """The last reading's gauges; down with the reason when the last read failed."""
        with self._lock:
            fact, why = self._latest, self._why
        if fact is not None:
            labels = {"source": fact.source}
            if fact.offset_s is not None:
                frame.set_gauge("gpufleet_clock_offset_seconds", labels, fact.offset_s)
            if fact.error_s is not None:
                frame.set_gauge("gpufleet_clock_error_seconds", labels, fact.error_s)
            if fact.synchronised is not None:
                frame.set_gauge("gpufleet_clock_synchronized", labels, 1.0 if fact.synchronised else 0.0)
        if why is not None:
            raise SourceDown(why)
