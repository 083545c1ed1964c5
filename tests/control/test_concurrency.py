"""Everything `gpufleet up` runs at once, on one state database: the twin stepping and delivering its moments with
their checkpoints, another agent pushing, people acknowledging, mitigating and resolving incidents, token checks
and reads. No thread may wait on another past a generous bound, and the shared locks keep their one order
(gpufleet.locks; the suite's `lock_order` fixture fails the test on any inversion, deadlock or not)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.control.watchdog import thread_stacks
from gpufleet.errors import GpufleetError
from gpufleet.locks import ordered_lock
from gpufleet.model import IncidentState
from gpufleet.model.observe import Record
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.journal import TwinJournal
from gpufleet.sim.runner import SimRunner
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from gpufleet.state import tokens as tokens_module
from gpufleet.state.tokens import TokenStore
from tests.control.helpers import batch, lost_gpu
from tests.twins import door, small_twin

SECONDS = float(os.environ.get("GPUFLEET_STRESS_S", "30"))  # longer by hand: GPUFLEET_STRESS_S=300
STUCK_S = 60.0  # far beyond any one operation's time on a busy machine; only a deadlock or starvation reaches it
FAULTS = [
    InjectedFault(k, kind, 20.0 + 15.0 * k, node=f"n-00{k % 4}", gpu=k % 8, code=code)
    for k, (kind, code) in enumerate(
        [(FaultType.xid, 13), (FaultType.gpu_off_bus, None), (FaultType.xid, 31), (FaultType.ecc_dbe, None)] * 4
    )
]
STATES = [IncidentState.acknowledged, IncidentState.mitigated, IncidentState.resolved]


class Workers:
    """Threads that each repeat one operation until stopped, noting when each operation ended."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.done: dict[str, int] = {}
        self.last: dict[str, float] = {}
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def add(self, name: str, operation: Callable[[random.Random], None]) -> None:
        rng = random.Random(name)
        self.done[name], self.last[name] = 0, time.monotonic()

        def loop() -> None:
            while not self.stop.is_set():
                try:
                    operation(rng)
                except GpufleetError:
                    pass  # refused as a person would be (an incident already resolved, say)
                except Exception as exc:  # anything else is a defect the test reports
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                self.done[name] += 1
                self.last[name] = time.monotonic()
                time.sleep(0.001)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def stuck(self) -> list[str]:
        now = time.monotonic()
        return [name for name, last in self.last.items() if now - last > STUCK_S]


def test_twin_pushes_transitions_and_token_checks_at_once_never_stall(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.setattr(tokens_module, "CACHE_S", 0.0)  # type: ignore[attr-defined]  # every check reads the database
    twin = small_twin(nodes=4, job_nodes=4, faults=list(FAULTS), restart=60.0)
    db = Database(tmp_path / "state.db")
    journal = TwinJournal(db, "concurrency")
    journal.reset()
    lock = ordered_lock("twin")
    plane, fleet = door(twin, remediation="on", db=db, lock=lock)
    runner = SimRunner(
        twin, fleet, plane.ingest, plane.tick, lock=lock, atomically=plane.atomically, journal=journal, speed=5_000.0
    )
    tokens = TokenStore(db)
    _, secret = tokens.create("ops", "operator", "test")
    outside = {"seq": 0}

    def transition(rng: random.Random) -> None:
        open_ = [i["id"] for i in plane.incidents(limit=50) if i["state"] != "resolved"]
        if open_:
            plane.transition(rng.choice(open_), rng.choice(STATES), "ops")

    def authenticate(rng: random.Random) -> None:
        assert tokens.authenticate(secret if rng.random() < 0.8 else f"gf_{rng.random()}") is not None or True

    def push(rng: random.Random) -> None:
        outside["seq"] += 1
        plane.ingest(batch("edge-1", [Record(outside["seq"], lost_gpu("edge-1", time.time()))], incarnation="e"))

    def read(rng: random.Random) -> None:
        plane.incidents(limit=100)
        plane.store.audit_log.entries(limit=20)

    workers = Workers()
    runner.start()
    try:
        for k in range(3):
            workers.add(f"people-{k}", transition)
        for k in range(2):
            workers.add(f"tokens-{k}", authenticate)
            workers.add(f"reads-{k}", read)
        workers.add("edge-agent", push)
        deadline = time.monotonic() + SECONDS
        steps = runner.steps
        stepped_at = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if runner.steps != steps:
                steps, stepped_at = runner.steps, time.monotonic()
            stuck = workers.stuck() + (["twin"] if time.monotonic() - stepped_at > STUCK_S else [])
            assert not stuck, f"{stuck} waited over {STUCK_S:.0f} s:\n{thread_stacks()}"
    finally:
        workers.stop.set()
        runner.stop()
    joined_by = time.monotonic() + STUCK_S
    for thread in workers.threads:
        thread.join(timeout=max(0.0, joined_by - time.monotonic()))
    assert not [t.name for t in workers.threads if t.is_alive()], thread_stacks()
    assert runner.error is None and plane.loop_error is None and not workers.errors, workers.errors[:5]
    assert all(workers.done.values()) and runner.steps > 0, (workers.done, runner.steps)
    transitioned = [e for e in plane.store.audit_log.entries(actor="ops", limit=1000) if e.action in STATES]
    assert transitioned, "no incident changed hands: the test did not exercise transitions"
