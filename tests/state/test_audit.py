"""The audit log on both engines: oldest first, the newest N with a limit, filters, and append-only in the
database itself (UPDATE, DELETE, and on PostgreSQL TRUNCATE are refused)."""

from __future__ import annotations

import pytest

from gpufleet.state import AuditLog, Database
from tests.pg import StateTarget


def _fill(log: AuditLog) -> None:
    for k in range(6):
        log.append(
            time_=1000.0 + k,
            actor="remediation" if k % 2 else "alice",
            action="cordon",
            target=f"node/n-{k}",
            decision="done",
            incident=f"INC-00000{k % 3}",
            dry_run=k == 5,
        )


def test_entries_are_oldest_first_and_a_limit_keeps_the_newest(state_db: Database) -> None:
    log = AuditLog(state_db)
    _fill(log)
    entries = log.entries()
    assert [e.target for e in entries] == [f"node/n-{k}" for k in range(6)]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)
    assert [e.target for e in log.entries(limit=2)] == ["node/n-4", "node/n-5"]
    assert [e.target for e in log.entries(incident="INC-000001", limit=1)] == ["node/n-4"]
    assert [e.target for e in log.entries(actor="alice")] == ["node/n-0", "node/n-2", "node/n-4"]
    last = entries[-1]
    assert last.dry_run is True and entries[0].dry_run is False
    assert (last.time, last.reason, last.cause, last.step) == (1005.0, "", "-", "-")
    with pytest.raises(ValueError, match="no column"):
        log.append(actor="a", action="b", target="c", decision="d", colour="red")


def test_the_audit_log_is_append_only(state_db: Database) -> None:
    log = AuditLog(state_db)
    _fill(log)
    changes = ["UPDATE audit SET decision = 'undone'", "DELETE FROM audit WHERE seq > 0"]
    if state_db.dialect == "postgresql":
        changes.append("TRUNCATE audit")
    for sql in changes:
        with pytest.raises(Exception, match="append-only"):
            state_db.execute(sql)
        with pytest.raises(Exception, match="append-only"), state_db.transaction():
            state_db.execute(sql)
    assert [e.decision for e in log.entries()] == ["done"] * 6
    log.append(actor="alice", action="uncordon", target="node/n-0", decision="done")  # appending still works
    assert len(log.entries()) == 7


def test_the_audit_log_outlives_the_process(state: StateTarget) -> None:
    db = state.open()
    _fill(AuditLog(db))
    db.close()
    again = AuditLog(state.open())
    again.append(actor="bob", action="drain", target="node/n-9", decision="done")
    entries = again.entries()
    assert [e.target for e in entries][-2:] == ["node/n-5", "node/n-9"]
    assert entries[-1].seq > entries[-2].seq  # numbering goes on after a restart
