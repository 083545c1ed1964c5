"""The workload manager's view on the agent that watches it (`gpufleet agent --workload slurm|kubernetes`): read in
a thread of its own at most every `every_s`, so a slow `squeue` or API server never holds up a collection, and the
latest report handed to every push (it is latest-value state: a push that carried it and was lost is made good by
the next one). A failing read is logged once, when it starts failing, and once when it recovers; the last good
report stands meanwhile (its `time` shows how old it is).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gpufleet.background import Background
from gpufleet.errors import GpufleetError
from gpufleet.model.observe import SchedulerReport

log = logging.getLogger("gpufleet.agent")

REFRESH_S = 15.0


class WorkloadWatch(Background):
    thread_name = "workload"

    def __init__(self, read: Callable[[], SchedulerReport], what: str, every_s: float = REFRESH_S) -> None:
        super().__init__()
        self.read = read
        self.what = what
        self.every_s = every_s
        self.latest: SchedulerReport | None = None
        self.failing: str | None = None  # the message of the failure under way
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> SchedulerReport | None:
        with self._lock:
            return self.latest

    def refresh(self) -> None:
        try:
            report = self.read()
        except Exception as exc:  # any failure of the reader leaves the agent running
            why = exc.message if isinstance(exc, GpufleetError) else f"{type(exc).__name__}: {exc}"
            if self.failing is None:
                log.warning("reading %s's queue failed (retrying every %gs): %s", self.what, self.every_s, why)
            self.failing = why
            return
        if self.failing is not None:
            log.info("reading %s's queue works again", self.what)
        self.failing = None
        self.reads += 1
        with self._lock:
            self.latest = report

    def run(self) -> None:
        while not self.stopping.is_set():
            self.refresh()
            self.stopping.wait(self.every_s)
