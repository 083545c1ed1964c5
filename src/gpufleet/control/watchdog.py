"""The control loop's watchdog: when the loop stops turning, every thread's stack goes to the log, once per stall.

A stalled loop is a deadlock or a thread starved of the interpreter; either way the stacks at that moment say which,
and they are gone by the time someone attaches a debugger.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

from gpufleet.background import Background

log = logging.getLogger("gpufleet.control")

STALL_S = 30.0  # as long as /healthz waits before it calls the loop stalled
CHECK_EVERY_S = 5.0


def thread_stacks() -> str:
    """Every thread's name and stack, innermost call last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'thread "{names.get(ident, ident)}":\n{stack}')
    return "\n".join(parts)


class LoopWatchdog(Background):
    """Checks every `every_s` how long ago the loop last turned (`last_turn()`, monotonic seconds, None before the
    first turn)."""

    thread_name = "watchdog"

    def __init__(
        self, last_turn: Callable[[], float | None], stall_s: float = STALL_S, every_s: float = CHECK_EVERY_S
    ) -> None:
        super().__init__()
        self.last_turn = last_turn
        self.stall_s = stall_s
        self.every_s = every_s
        self.stalls = 0
        self._stalled_since: float | None = None

    def run(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.check()

    def check(self, now: float | None = None) -> bool:
        """Whether the loop is stalled now; the first check of a stall logs every thread's stack."""
        now = time.monotonic() if now is None else now
        last = self.last_turn()
        stalled = last is not None and now - last > self.stall_s
        if stalled and self._stalled_since is None:
            assert last is not None
            self._stalled_since = last
            self.stalls += 1
            log.error(
                "the control loop has not turned for %.0f s; the threads' stacks:\n%s", now - last, thread_stacks()
            )
        elif not stalled and self._stalled_since is not None:
            log.warning("the control loop turns again after a stall of %.0f s", (last or now) - self._stalled_since)
            self._stalled_since = None
        return stalled
