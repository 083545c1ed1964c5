"""The remediation books on both engines: step outcomes (one per incident, step and mode, replaced as a step
moves on), rate-limit times, dry-run's nodes taken out, paused runs, failures counted once, and the breaker; each
mode with its own books."""

from __future__ import annotations

from gpufleet.remediate.store import RemediationStore, StepRecord
from gpufleet.state import Database
from tests.pg import StateTarget


def _step(incident: str, step: str, outcome: str, when: float, action: str = "cordon", node: str = "n1") -> StepRecord:
    return StepRecord(incident, step, action, f"node/{node}", outcome, when, f"{step} {outcome}")


def test_a_step_is_kept_once_per_incident_step_and_mode(state_db: Database) -> None:
    on = RemediationStore(state_db)
    dry = on.with_mode("dry-run")
    on.record_step(_step("INC-1", "cordon", "waiting", 10.0))
    on.record_step(_step("INC-1", "cordon", "done", 20.0))  # the same step, moved on
    dry.record_step(_step("INC-1", "cordon", "would", 30.0))
    assert on.step("INC-1", "cordon") == _step("INC-1", "cordon", "done", 20.0)
    assert dry.step("INC-1", "cordon") == _step("INC-1", "cordon", "would", 30.0)
    assert on.step("INC-1", "drain") is None
    assert state_db.one("SELECT COUNT(*) FROM remediation_steps") == (2,)


def test_action_times_taken_out_and_open_runs(state_db: Database) -> None:
    on = RemediationStore(state_db)
    dry = on.with_mode("dry-run")
    on.record_step(_step("INC-1", "cordon", "done", 100.0))
    on.record_step(_step("INC-2", "cordon", "failed", 200.0, node="n2"))
    on.record_step(_step("INC-3", "cordon", "deferred", 300.0, node="n3"))
    on.record_step(_step("INC-4", "drain", "waiting", 50.0, action="drain", node="n4"))
    assert on.action_times("cordon", since=150.0) == [200.0]
    assert on.action_times("cordon", since=0.0) == [100.0, 200.0]
    assert on.open_runs() == ["INC-4", "INC-3"]  # paused runs, the oldest first
    dry.record_step(_step("INC-5", "cordon", "would", 10.0, node="n5"))
    dry.record_step(_step("INC-6", "drain", "would", 20.0, action="drain", node="n6"))
    dry.record_step(_step("INC-5", "uncordon", "would", 30.0, action="uncordon", node="n5"))
    assert dry.taken_out() == {"n6"} and on.taken_out() == set()
    assert dry.action_times("cordon", since=0.0) == [10.0] and dry.open_runs() == []


def test_a_failure_counts_once_per_incident(state_db: Database) -> None:
    on = RemediationStore(state_db)
    assert on.record_failure("INC-1", "n1", 100.0) is True
    assert on.record_failure("INC-1", "n1", 110.0) is False
    assert on.record_failure("INC-2", "n1", 120.0) is True
    assert on.record_failure("INC-3", "n2", 130.0) is True
    assert on.failing_nodes(since=0.0) == ["n1", "n2"] and on.failing_nodes(since=125.0) == ["n2"]
    assert on.with_mode("dry-run").failing_nodes(since=0.0) == []
    assert on.failures(since=105.0) == [("n1", 120.0), ("n2", 130.0)]  # each counted failure with its time


def test_the_breaker_is_closed_until_tripped_and_kept_across_restarts(state: StateTarget) -> None:
    on = RemediationStore(state.open())
    assert on.breaker().tripped is False
    on.set_breaker(True, 500.0, "5 nodes failed in 10m", "remediation")
    on.with_mode("dry-run").set_breaker(False, 10.0, "", "")
    on.db.close()
    again = RemediationStore(state.open())
    state_now = again.breaker()
    assert (state_now.tripped, state_now.since, state_now.reason) == (True, 500.0, "5 nodes failed in 10m")
    again.set_breaker(False, 600.0, "reset", "alice")
    assert (again.breaker().tripped, again.breaker().changed_by) == (False, "alice")
    assert again.with_mode("dry-run").breaker().since == 10.0


def test_an_incident_is_kept_for_a_paused_run(state_db: Database) -> None:
    store = RemediationStore(state_db)
    body = {
        "id": "INC-000004", "cause": "gpu-lost", "entity": {"kind": "gpu", "node": "n1", "index": 2},
        "severity": "critical", "state": "open", "first_seen": 1.0, "last_seen": 2.0, "count": 1,
    }  # fmt: skip
    store.save_incident("INC-000004", body)
    store.save_incident("INC-000004", {**body, "state": "resolved"})  # the control plane's row is not overwritten
    assert store.incident_body("INC-000004") == body
    store.audit(time=5.0, action="cordon", target="node/n1", decision="done", incident="INC-000004")
    [entry] = store.audit_entries(incident="INC-000004")
    assert entry.actor == "remediation" and entry.time == 5.0
