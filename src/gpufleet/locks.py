"""The process's shared locks and the one order in which they are taken.

A thread that holds one of these locks may take only locks that come later in `ORDER` (or the same reentrant lock
again). Taking two of them the other way round is how threads deadlock: the twin's thread holding the state
database's transaction while it waits for the control plane, an API thread holding the control plane while it waits
for the database.

`ORDER`, outermost first:

- `view`: a view of the API being built (server/cache.py); building it reads the control plane and the database.
- `twin`: the digital twin (sim/): stepping it, collecting its agents' batches, acting on it.
- `control`: the control plane's in-memory state (`ControlPlane.lock`); ingest and the control loop's turn.
- `state`: the state database's connection and its transaction. A transaction is taken inside `control`, never
  around it (`ControlPlane.atomically`).
- `node-actions`: the node-action queue's memory of which agents carry out what and which nodes have actions
  waiting (control/node_actions.py); an ingest tells it what the agent carries out inside its transaction.
- `fabric`: the fabric service's graph and findings (an ingest's fabric reports are taken inside its transaction).
- `metrics`: the embedded metric store.
- `tokens`: the token cache.

`ordered_lock(name)` is a plain `threading.RLock` normally. With checking on (`GPUFLEET_LOCK_ORDER=check`; the test
suite turns it on) it is an RLock that records each acquisition against the order, with the thread's stack, in
`violations()`, so a test fails on an inversion even when the race that would deadlock did not happen in it.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from dataclasses import dataclass
from typing import Any

ORDER = ("view", "twin", "control", "state", "node-actions", "fabric", "metrics", "tokens")
_RANK = {name: rank for rank, name in enumerate(ORDER)}


@dataclass(frozen=True)
class Violation:
    """A lock taken while a lock later in the order was held."""

    taken: str
    held: str
    thread: str
    stack: str

    def __str__(self) -> str:
        return f"{self.thread} took {self.taken!r} while holding {self.held!r}:\n{self.stack}"


log = logging.getLogger("gpufleet.locks")
_checking = os.environ.get("GPUFLEET_LOCK_ORDER", "") == "check"
_violations: list[Violation] = []
_violations_lock = threading.Lock()
_held = threading.local()


def check_order(on: bool = True) -> None:
    """Make the locks created from now on check the order (tests), or plain again."""
    global _checking
    _checking = on


def violations() -> list[Violation]:
    with _violations_lock:
        return list(_violations)


def clear_violations() -> None:
    with _violations_lock:
        _violations.clear()


def ordered_lock(name: str) -> Any:
    """A reentrant lock with its place in `ORDER`."""
    if name not in _RANK:
        raise ValueError(f"{name!r} is not in the lock order {ORDER}")
    return _CheckedLock(name) if _checking else threading.RLock()


class _CheckedLock:
    def __init__(self, name: str) -> None:
        self.name = name
        self.rank = _RANK[name]
        self._lock = threading.RLock()

    def _stack(self) -> list[_CheckedLock]:
        stack: list[_CheckedLock] | None = getattr(_held, "stack", None)
        if stack is None:
            stack = _held.stack = []
        return stack

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        stack = self._stack()
        if self not in stack:
            later = [held for held in stack if held.rank > self.rank]
            if later:
                violation = Violation(
                    self.name, later[-1].name, threading.current_thread().name, "".join(traceback.format_stack()[:-1])
                )
                with _violations_lock:
                    first = not any((v.taken, v.held) == (violation.taken, violation.held) for v in _violations)
                    if len(_violations) < 100:
                        _violations.append(violation)
                if first:
                    log.error("lock order broken: %s", violation)
        got = self._lock.acquire(blocking, timeout)
        if got:
            stack.append(self)
        return got

    def release(self) -> None:
        stack = self._stack()
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] is self:
                del stack[k]
                break
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<ordered lock {self.name!r}>"
