"""The control plane's door and loop: exactly-once ingest, range checks, a failed batch that poisons nothing,
agent incarnations, lost agents, incident ids across restarts, conditions that clear, and remediation in dry-run and
on taking the same decisions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpufleet.control.service import ControlPlane
from gpufleet.errors import BackendError
from gpufleet.locks import ordered_lock
from gpufleet.model import Entity, EntityKind, IncidentState, RootCause, Severity
from gpufleet.model.observe import (
    Finding,
    KernelReport,
    MetricSnapshot,
    Record,
)
from gpufleet.model.wire import WireError, decode_batch, encode
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests.control.helpers import T0, Clock, batch, inventory, lost_gpu, plane_at
from tests.pg import StateTarget
from tests.twins import door, small_twin


def test_a_record_is_stored_once_however_often_it_is_sent(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    report = KernelReport(T0, "a", "xid", "Xid 79", "NVRM: Xid (PCI:0000:3b:00): 79, ...", gpu=3, xid=79)
    records = [Record(1, report), Record(2, lost_gpu("a", T0))]
    first = plane.ingest(batch("a", records, inventory=inventory("a")))
    again = plane.ingest(batch("a", records))
    assert (first.acked, first.stored, first.duplicates) == (2, 2, 0)
    assert (again.acked, again.stored, again.duplicates) == (2, 0, 2)
    assert plane.store.count_events(agent="a") == 2
    assert [i.cause for i in plane.book.incidents.values()] == [RootCause.gpu_lost]
    assert plane.book.incidents["INC-000001"].count == 1


def test_a_new_spool_is_a_new_stream_and_nothing_of_it_is_dropped(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    plane.ingest(batch("a", [Record(k, lost_gpu("a", T0, gpu=k % 8)) for k in range(1, 16)]))
    # the agent's data folder was lost: its new spool starts again at 1, under a new incarnation
    ack = plane.ingest(batch("a", [Record(k, lost_gpu("a", T0 + 5, gpu=k % 8)) for k in range(1, 16)], "inc-2"))
    assert ack.stored == 15 and ack.duplicates == 0
    assert plane.store.count_events(agent="a") == 30


def test_out_of_range_sequence_numbers_are_refused_before_anything_is_written(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    body = encode(batch("a", [Record(1, lost_gpu("a", T0))])).replace(b'"seq":1', b'"seq":9223372036854775808')
    with pytest.raises(WireError, match="seq"):
        decode_batch(body)
    ok = plane.ingest(decode_batch(encode(batch("a", [Record(1, lost_gpu("a", T0))]))))
    assert ok.stored == 1 and plane.health().healthy


def test_a_failed_batch_leaves_nothing_behind_and_the_next_one_is_taken(state_db: Database, monkeypatch: Any) -> None:
    plane = plane_at(state_db, Clock())
    real = plane.store.store_batch

    def broken(*args: Any, **kw: Any) -> None:
        with plane.db.transaction():
            plane.db.execute(
                "INSERT INTO events(agent, incarnation, seq, time, received, node, kind, entity, "
                "message, body) VALUES ('a','inc-1',1,0,0,'a','kmsg','x','half-written','{}')"
            )
            raise BackendError("disk full")

    monkeypatch.setattr(plane.store, "store_batch", broken)
    records = [Record(1, lost_gpu("a", T0))]
    with pytest.raises(BackendError):
        plane.ingest(batch("a", records))
    assert plane.store.count_events() == 0  # the transaction rolled back
    assert plane.book.incidents == {}  # and nothing was correlated from it
    monkeypatch.setattr(plane.store, "store_batch", real)
    ack = plane.ingest(batch("a", records))  # the same batch, re-sent by the agent
    assert ack.stored == 1 and plane.store.count_events(agent="a") == 1
    assert [i.cause for i in plane.book.incidents.values()] == [RootCause.gpu_lost]


def test_incident_ids_are_unique_for_the_life_of_the_database(state: StateTarget) -> None:
    plane = plane_at(state.open(), Clock())
    plane.ingest(batch("a", [Record(1, lost_gpu("a", T0))]))
    plane.db.close()
    again = plane_at(state.open(), Clock())
    assert again.book.incidents["INC-000001"].cause is RootCause.gpu_lost  # reloaded
    again.ingest(batch("a", [Record(2, lost_gpu("a", T0 + 1))]))  # the same fault: deduplicated after a restart
    again.ingest(batch("b", [Record(1, lost_gpu("b", T0 + 2))]))
    assert sorted(again.book.incidents) == ["INC-000001", "INC-000002"]
    assert again.book.incidents["INC-000001"].count == 2
    assert again.incident("INC-000001")["cause"] == "gpu-lost"


def test_a_silent_agent_marks_its_node_agent_lost(state_db: Database) -> None:
    from gpufleet.control import views

    clock = Clock()
    plane = plane_at(state_db, clock)
    plane.ingest(batch("a", [], inventory=inventory("a"), interval=1.0))
    clock.now += 2.0
    plane.tick()
    assert views.node_rows(plane)[0]["status"] == "Ready"
    clock.now += 2.0
    plane.tick()
    assert views.node_rows(plane)[0]["status"] == "AgentLost"
    assert plane.store.events(kind="agent")[0]["message"].endswith("is AgentLost")
    plane.ingest(batch("a", [], when=clock.now))
    assert views.node_rows(plane)[0]["status"] == "Ready"


def test_a_condition_that_clears_resolves_after_its_hold_but_a_reported_fault_stays_open(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    brake = Finding(T0, RootCause.power_brake, Entity(EntityKind.gpu, "a", 0), Severity.warning, "power brake",
                    "asserted 3 s", "telemetry", action="CHECK_MECHANICALS")  # fmt: skip
    plane.ingest(batch("a", [Record(1, brake), Record(2, lost_gpu("a", T0))]))
    hold = plane.thresholds.control.resolve_after_s[RootCause.power_brake]
    clock.now = T0 + hold - 1
    plane.tick()
    assert all(i.state is IncidentState.open for i in plane.book.incidents.values())
    clock.now = T0 + hold + 1
    plane.tick()
    states = {i.cause: i.state for i in plane.book.incidents.values()}
    assert states == {RootCause.power_brake: IncidentState.resolved, RootCause.gpu_lost: IncidentState.open}
    assert plane.incident("INC-000001")["state"] == "resolved"
    # the brake again, later: a new incident, not the resolved one reopened
    plane.ingest(batch("a", [Record(3, brake)]))
    assert len(plane.book.incidents) == 3


def test_metric_snapshots_feed_the_views_and_the_store(tmp_path: Path) -> None:
    from gpufleet.control import views
    from gpufleet.telemetry.store import EmbeddedStore

    clock = Clock()
    db = Database(tmp_path / "s.db")
    plane = ControlPlane(db, ObserveOnlyBackend(lambda: ["a"]), clock=clock, metrics=EmbeddedStore(None))
    fields = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    values = np.array([[90.0] * 7 + [np.nan], [60.0] * 7 + [np.nan], [500.0] * 7 + [np.nan]])
    snap = MetricSnapshot.of(T0, list(range(8)), fields, values)
    plane.ingest(batch("a", [], inventory=inventory("a"), metrics=snap))
    plane.tick()
    row = views.node_rows(plane)[0]
    assert row["gpu_util_pct"] == 90.0 and row["power_kw"] == 3.5 and row["gpus_allocatable"] == 7
    assert [g["health"] for g in views.gpu_rows(plane, "a")][-1] == "lost"
    assert plane.metrics is not None
    (sample,) = plane.metrics.store.instant('gpufleet_node_power_watts{node="a"}')
    assert sample.value == 3500.0


def _drain_wave(remediation: str, tmp_path: Path) -> tuple[list[str], Any]:
    """16 nodes lose a GPU within two minutes; what remediation decides for each, in order."""
    twin = small_twin(nodes=16, job_nodes=0)
    db = Database(tmp_path / f"{remediation}.db")
    plane, fleet = door(twin, remediation=remediation, db=db)
    decisions = []
    run_headless(twin, fleet, plane.ingest, plane.tick, 1)
    for k in range(16):
        plane.ingest(batch(f"n-{k:03d}", [Record(1, lost_gpu(f"n-{k:03d}", plane.clock()))], incarnation=f"t{k}"))
        plane.tick()
        plane.clock = (lambda base, dt: lambda: base + dt)(plane.clock(), 7.0)  # 7 s later
    for audit in plane.store.audit_log.entries(actor="remediation"):
        if audit.action in ("cordon", "drain", "breaker-trip"):
            same = {"would": "done", "would-trip": "breaker-tripped"}.get(audit.decision, audit.decision)
            decisions.append(f"{audit.incident}:{audit.action}:{same}")
    return decisions, twin


def test_dry_run_decides_what_acting_would(tmp_path: Path) -> None:
    dry, dry_twin = _drain_wave("dry-run", tmp_path)
    on, on_twin = _drain_wave("on", tmp_path)
    assert dry == on
    assert any("breaker-trip" in d for d in on)  # the wave trips the breaker ...
    assert sum(":drain:done" in d for d in on) < 16  # ... before every node is drained
    assert not any(n.unschedulable for n in dry_twin.cluster.nodes)  # dry-run touched nothing
    assert any(n.unschedulable for n in on_twin.cluster.nodes)


def test_remediation_in_the_running_loop_never_fails_on_thread_affinity(state_db: Database) -> None:
    """Ingest, the loop and remediation run on different threads over one state database."""
    from gpufleet.sim.runner import SimRunner

    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 5.0, node="n-001", gpu=2)], restart=30.0)
    lock = ordered_lock("twin")
    plane, fleet = door(twin, remediation="on", db=state_db, lock=lock)
    runner = SimRunner(twin, fleet, plane.ingest, plane.tick, lock=lock, atomically=plane.atomically, speed=200.0)
    runner.start()
    try:
        deadline = time.monotonic() + 120  # a bound for a busy machine; it takes about a second on an idle one
        while not (plane.remediation.reports and twin.time > 60) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        runner.stop()
    assert runner.error is None and plane.loop_error is None
    assert plane.remediation.reports > 0 and plane.remediation.errors == 0
    done = [e for e in plane.store.audit_log.entries(actor="remediation") if e.decision == "done"]
    assert done and twin.cluster.node("n-001").unschedulable


def test_a_node_action_the_backend_cannot_take_is_refused_and_audited(state_db: Database) -> None:
    from gpufleet.remediate.backends.base import UnsupportedActionError

    plane = plane_at(state_db, Clock())
    plane.ingest(batch("n1", [], inventory=inventory("n1")))
    with pytest.raises(UnsupportedActionError, match="no backend to cordon on n1"):
        plane.node_action("admin", "cordon", "n1")
    [entry] = [e for e in plane.store.audit_log.entries() if e.action == "cordon"]
    assert entry.target == "node/n1" and entry.decision.startswith("failed: no backend to cordon")


def test_incidents_audit_and_streams_survive_a_restart(state: StateTarget) -> None:
    """What one control plane stored, the next one on the same database (SQLite file or PostgreSQL) starts from."""
    clock = Clock()
    plane = plane_at(state.open(), clock, remediation="dry-run")
    records = [Record(1, lost_gpu("a", T0)), Record(2, lost_gpu("a", T0, gpu=5))]
    plane.ingest(batch("a", records, inventory=inventory("a")))
    plane.tick()
    plane.audit("alice", "ack", "incident/INC-000001", "done")
    audit = [e.as_dict() for e in plane.store.audit_log.entries()]
    assert {e["actor"] for e in audit} == {"alice", "remediation"}
    plane.close()
    plane.db.close()

    again = plane_at(state.open(), clock, remediation="dry-run")
    assert sorted(again.book.incidents) == ["INC-000001", "INC-000002"]
    assert again.incident("INC-000002")["entity"]["index"] == 5
    assert [e.as_dict() for e in again.store.audit_log.entries()] == audit
    assert sorted(again.fleet.nodes) == ["a"]  # from the stored inventory
    ack = again.ingest(batch("a", records))  # re-sent after the restart: already held
    assert (ack.stored, ack.duplicates) == (0, 2)
    again.ingest(batch("b", [Record(1, lost_gpu("b", T0 + 1))]))
    assert sorted(again.book.incidents)[-1] == "INC-000003"


def test_the_fall_off_count_of_a_node_survives_a_restart(state: StateTarget) -> None:
    """Three fall-offs, each rebooted and resolved, then a restart: the fourth within 30 days still escalates."""
    clock = Clock()
    plane = plane_at(state.open(), clock)
    day = 86_400.0
    for k in range(3):
        clock.now = T0 + k * day
        plane.ingest(batch("a", [Record(k + 1, lost_gpu("a", clock.now))], when=clock.now))
        (inc,) = plane.book.open_incidents()
        plane.transition(inc.id, IncidentState.resolved, "alice")  # rebooted, passed its diag
    plane.close()
    plane.db.close()

    clock.now = T0 + 3 * day
    again = plane_at(state.open(), clock)
    assert again.book.open_incidents() == []
    again.ingest(batch("a", [Record(4, lost_gpu("a", clock.now))], when=clock.now))
    (escalated,) = again.book.open_incidents()
    assert escalated.action == "RMA" and "more than 3" in escalated.summary


def test_gpu_holders_are_what_the_agents_report_and_reach_a_gpu_scoped_backend() -> None:
    twin = small_twin(nodes=3, job_nodes=2)
    plane, fleet = door(twin)
    assert plane.gpu_holders("n-000") is None  # nothing reported yet  # type: ignore[attr-defined]
    run_headless(twin, fleet, plane.ingest, plane.tick, 5)  # type: ignore[attr-defined]
    assert plane.gpu_holders("n-000") == {i: "training/job-n-000" for i in range(8)}  # type: ignore[attr-defined]
    assert plane.gpu_holders("n-002") == {i: "" for i in range(8)}  # type: ignore[attr-defined]
    assert plane.backend.gpu_holders("n-001") == plane.gpu_holders("n-001")  # type: ignore[attr-defined]


def test_a_slow_turn_of_the_loop_is_logged_with_where_its_time_went(
    state_db: Database, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn long enough to shed reads says which phase took it, so an operator can tell correlation from
    remediation or a backend that hangs."""
    import gpufleet.control.service as service

    clock = Clock()
    plane = plane_at(state_db, clock)
    plane.ingest(batch("a", [], inventory=inventory("a"), interval=1.0))
    slow_run = plane.remediation.run

    def slow_remediation(now: float) -> None:
        time.sleep(0.3)
        slow_run(now)

    monkeypatch.setattr(plane.remediation, "run", slow_remediation)
    monkeypatch.setattr(service, "SLOW_TURN_S", 0.25)
    with caplog.at_level("WARNING", logger="gpufleet.control"):
        plane.tick()
    (line,) = [r.getMessage() for r in caplog.records if "turn took" in r.getMessage()]
    phases = dict(part.rsplit(" ", 2)[:2] for part in line[line.index("(") + 1 : -1].split(", "))
    assert list(phases) == ["waiting for ingest", "correlation", "incidents saved", "fleet series", "pruning",
                            "backend", "remediation"]  # fmt: skip
    assert float(phases["remediation"]) >= 0.3 > float(phases["correlation"])
