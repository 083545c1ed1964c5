"""Run the twin behind the control plane's door: step it, let its agents push, turn the control loop.

`SimRunner` does that in a background thread at a chosen speed (`gpufleet up`), holding the twin's lock only while
the twin steps and its agents read it, never while the control plane works, so API readers wait at most for one
tick of the twin. A moment's batches and the twin's checkpoint are delivered in one transaction that the control
plane opens (`atomically`), so the locks are taken in their one order (gpufleet.locks). `run_headless` does the
same as fast as the machine allows (`get incidents -f`, benchmarks).
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gpufleet.background import Background
from gpufleet.locks import ordered_lock
from gpufleet.model.observe import Ack, Batch
from gpufleet.sim.backend import TwinBackend
from gpufleet.sim.fleet import SimFleet
from gpufleet.sim.journal import Checkpoint, TwinJournal
from gpufleet.sim.twin import Twin

log = logging.getLogger("gpufleet.sim")
MAX_CATCH_UP = 200  # steps per pass before readers get a turn
# the twin is snapshot every this many simulated seconds (and no more often than every SNAPSHOT_MIN_WALL_S of wall
# time): a restart replays at most that much, however old the twin is
SNAPSHOT_EVERY_S = 600.0
SNAPSHOT_MIN_WALL_S = 30.0
RESTORE_PROGRESS_S = 5.0
SPEED_CHECK_S = 10.0  # wall seconds after which the twin says if it runs slower than asked

Transport = Callable[[Batch], Ack]


class SimRunner(Background):
    thread_name = "twin"

    def __init__(
        self,
        twin: Twin,
        fleet: SimFleet,
        transport: Transport,
        tick: Callable[[], None],
        *,
        lock: threading.RLock,
        atomically: Callable[[], AbstractContextManager[None]] | None = None,
        journal: TwinJournal | None = None,
        speed: float = 1.0,
    ) -> None:
        self.twin = twin
        self.fleet = fleet
        self.transport = transport
        self.tick = tick
        self.lock = lock
        self.atomically = atomically
        self.journal = journal
        self.speed = speed
        self.error: str | None = None
        self.steps = 0
        self._saved_latched: dict[str, float] = {}
        self._snapshot_at = (twin.time, time.monotonic())  # (twin time, wall time) of the last snapshot
        self.pending: tuple[Checkpoint, list[tuple[float, str, list[Any]]], TwinBackend] | None = None
        super().__init__()

    # --- restart ------------------------------------------------------------------------------------------------

    def restore(
        self,
        checkpoint: Checkpoint,
        actions: list[tuple[float, str, list[Any]]],
        backend: TwinBackend,
        progress: Callable[[float], None] | None = None,
    ) -> int:
        """Bring the twin (freshly built, or as its last snapshot left it) to its checkpoint, replaying every action
        at its moment; the agents go on from their stream positions. Returns how many actions were replayed."""
        journal, backend.journal = backend.journal, None  # replayed actions are in the journal already
        pending = list(actions)
        replayed = 0
        try:
            while True:
                with self.lock:  # readers of the twin see whole steps
                    while pending and pending[0][0] <= self.twin.time:
                        _, action, args = pending.pop(0)
                        try:
                            backend.apply(action, *args, replaying=True)
                        except Exception as exc:  # an action that failed then fails again now: same twin
                            log.debug("replayed %s%s: %s", action, tuple(args), exc)
                        replayed += 1
                    if self.twin.time >= checkpoint.time - 1e-9:
                        break
                    self.twin.step()
                if progress is not None:
                    progress(self.twin.time)
        finally:
            backend.journal = journal
        self.fleet.incarnation = checkpoint.incarnation
        self.fleet.health.restore(checkpoint.latched)
        self._saved_latched = dict(checkpoint.latched)
        for node, position in checkpoint.agents.items():
            agent = self.fleet.agents.get(node)
            if agent is not None:
                agent.seq = position["seq"]
                agent.kmsg_seen = position["kmsg"]
        return replayed

    # --- one tick ------------------------------------------------------------------------------------------------

    def _latched(self) -> dict[str, float] | None:
        """The agents' detectors' state, when it changed since it was last saved."""
        latched = self.fleet.health.latched()
        if latched == self._saved_latched:
            return None
        self._saved_latched = latched
        return latched

    def _snapshot_due(self) -> bool:
        return (
            self.journal is not None
            and self.journal.snapshots
            and self.twin.time - self._snapshot_at[0] >= SNAPSHOT_EVERY_S
            and time.monotonic() - self._snapshot_at[1] >= SNAPSHOT_MIN_WALL_S
        )

    def _snapshot(self) -> tuple[bytes, int] | None:
        """The pickled twin and the last action it has had, taken under the twin's lock, as every action is
        journaled: the snapshot holds exactly those up to here. None (said once) for a twin that cannot be."""
        assert self.journal is not None
        self._snapshot_at = (self.twin.time, time.monotonic())
        try:
            return pickle.dumps(self.twin, protocol=pickle.HIGHEST_PROTOCOL), self.journal.last_action()
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            self._snapshot_at = (float("inf"), float("inf"))
            log.warning("the twin cannot be snapshot (%s): a restart brings it back from its start", exc)
            return None

    def finish_restore(self) -> None:
        """Bring the twin back now if a restore is pending (the thread does it first when it starts)."""
        if self.pending is not None:
            self._restore_pending()

    def step_once(self) -> None:
        self.finish_restore()
        snapshot: tuple[bytes, int] | None = None
        with self.lock:
            self.twin.step()
            batches = self.fleet.collect()
            if self._snapshot_due():
                snapshot = self._snapshot()
        if self.atomically is not None:
            with self.atomically():  # the moment's batches and its checkpoint: all or none
                self.fleet.deliver(batches, self.transport)
                if self.journal is not None:
                    self.journal.checkpoint(
                        self.twin.time, self.fleet.incarnation, self.fleet.positions(), self._latched()
                    )
                    if snapshot is not None:
                        self.journal.save_snapshot(self.twin.time, *snapshot)
        else:
            self.fleet.deliver(batches, self.transport)
        self.tick()
        self.steps += 1

    # --- in the background ---------------------------------------------------------------------------------------

    def _restore_pending(self) -> None:
        """The restore `gpufleet up` left to this thread, so the API serves the stored state meanwhile; a line of
        progress every few seconds, and the twin's actions refused until it is done."""
        assert self.pending is not None
        checkpoint, actions, backend = self.pending
        started, from_s = time.monotonic(), self.twin.time
        said = [started]

        def progress(now: float) -> None:
            wall = time.monotonic()
            if wall - said[0] >= RESTORE_PROGRESS_S:
                said[0] = wall
                done = 100.0 * now / checkpoint.time if checkpoint.time else 100.0
                speed = (now - from_s) / (wall - started)
                left = (checkpoint.time - now) / speed if speed > 0 else float("inf")
                log.info(
                    "bringing the twin back to %.2f h: at %.2f h (%.0f %%), %.0fx real time, %.0f s left",
                    checkpoint.time / 3600, now / 3600, done, speed, left,
                )  # fmt: skip

        replayed = self.restore(checkpoint, actions, backend, progress)
        self.pending = None
        backend.ready.set()
        log.info(
            "twin restored to %.2f h in %.1f s (%d actions replayed)",
            self.twin.time / 3600,
            time.monotonic() - started,
            replayed,
        )

    def run(self) -> None:
        try:
            self.finish_restore()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("the twin could not be brought back")
            return
        start_wall, start_sim = time.monotonic(), self.twin.time
        first_wall, first_sim, warned = start_wall, start_sim, False
        try:
            while not self.stopping.is_set():
                target = start_sim + (time.monotonic() - start_wall) * self.speed
                for _ in range(MAX_CATCH_UP):
                    if self.twin.time + self.twin.tick > target or self.stopping.is_set():
                        break
                    self.step_once()
                behind = target - self.twin.time
                if not warned and time.monotonic() - first_wall >= SPEED_CHECK_S:
                    warned = True
                    achieved = (self.twin.time - first_sim) / (time.monotonic() - first_wall)
                    if achieved < 0.8 * self.speed:
                        log.warning(
                            "the twin runs at about %.0fx on this host, below the requested %gx: simulated time "
                            "goes as fast as the host allows",
                            achieved,
                            self.speed,
                        )
                if behind > 30 * self.twin.tick * max(1.0, self.speed):  # this host cannot keep up: stop chasing
                    start_wall, start_sim = time.monotonic(), self.twin.time
                self.stopping.wait(min(0.05, self.twin.tick / self.speed))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("the twin stopped")


def run_headless(
    twin: Twin,
    fleet: SimFleet,
    transport: Transport,
    tick: Callable[[], None],
    seconds: float,
    progress: Callable[[float], None] | None = None,
    before_step: Callable[[], None] | None = None,
) -> None:
    """Step the twin `seconds` of simulated time as fast as possible, through the same door."""
    runner = SimRunner(twin, fleet, transport, tick, lock=ordered_lock("twin"))
    steps = round(seconds / twin.tick)
    report = max(1, steps // 200)
    for k in range(steps):
        if before_step is not None:
            before_step()
        runner.step_once()
        if progress is not None and (k + 1) % report == 0:
            progress((k + 1) * twin.tick)
