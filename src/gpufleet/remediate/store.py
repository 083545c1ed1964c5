"""Durable remediation state in SQLite: the append-only audit log, step outcomes (idempotency), node failures
seen by the circuit breaker, and the breaker itself. Survives restarts; the audit table refuses UPDATE and DELETE."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,          -- the cluster clock (twin time or wall time)
    recorded REAL NOT NULL,      -- wall time of the write
    incident TEXT NOT NULL,
    cause TEXT NOT NULL,
    runbook TEXT NOT NULL,
    step TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL,
    dry_run INTEGER NOT NULL,
    backend TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TABLE IF NOT EXISTS steps (
    incident TEXT NOT NULL,
    step TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    time REAL NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (incident, step)
);
CREATE TABLE IF NOT EXISTS failures (
    incident TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL           -- the incident as JSON, so a paused runbook can continue after a restart
);
CREATE TABLE IF NOT EXISTS breaker (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    state TEXT NOT NULL,
    since REAL NOT NULL,
    reason TEXT NOT NULL,
    changed_by TEXT NOT NULL
);
"""

# Outcomes after which a step never runs again for the same incident.
FINAL_OUTCOMES = frozenset({"done", "passed", "failed", "skipped"})


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    time: float
    recorded: float
    incident: str
    cause: str
    runbook: str
    step: str
    action: str
    target: str
    decision: str
    reason: str
    dry_run: bool
    backend: str


@dataclass(frozen=True, slots=True)
class StepRecord:
    incident: str
    step: str
    action: str
    target: str
    outcome: str
    time: float
    detail: str


@dataclass(frozen=True, slots=True)
class BreakerState:
    tripped: bool
    since: float
    reason: str
    changed_by: str


class RemediationStore:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise BackendError(f"cannot open remediation state {self.path}: {exc}") from None

    def close(self) -> None:
        self.db.close()

    # --- audit ---------------------------------------------------------------------------------------------------

    def audit(self, **row: Any) -> None:
        row.setdefault("recorded", time.time())
        row["dry_run"] = int(bool(row.get("dry_run", False)))
        cols = ", ".join(row)
        self.db.execute(f"INSERT INTO audit ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))

    def audit_entries(self, incident: str | None = None, limit: int | None = None) -> list[AuditEntry]:
        sql, args = "SELECT * FROM audit", []
        if incident:
            sql += " WHERE incident = ?"
            args.append(incident)
        sql += " ORDER BY seq"
        if limit:
            sql = (
                f"SELECT * FROM ({sql.replace(' ORDER BY seq', ' ORDER BY seq DESC')} LIMIT {int(limit)}) ORDER BY seq"
            )
        rows = self.db.execute(sql, args).fetchall()
        return [
            AuditEntry(
                seq=r[0], time=r[1], recorded=r[2], incident=r[3], cause=r[4], runbook=r[5], step=r[6], action=r[7],
                target=r[8], decision=r[9], reason=r[10], dry_run=bool(r[11]), backend=r[12],
            )
            for r in rows
        ]  # fmt: skip

    # --- step outcomes -------------------------------------------------------------------------------------------

    def step(self, incident: str, step: str) -> StepRecord | None:
        row = self.db.execute("SELECT * FROM steps WHERE incident = ? AND step = ?", (incident, step)).fetchone()
        return StepRecord(*row) if row else None

    def record_step(self, rec: StepRecord) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rec.incident, rec.step, rec.action, rec.target, rec.outcome, rec.time, rec.detail),
        )

    def action_times(self, action: str, since: float) -> list[float]:
        """When actions of this kind were carried out (for rate limits), oldest first."""
        rows = self.db.execute(
            "SELECT time FROM steps WHERE action = ? AND outcome IN ('done', 'passed', 'failed') AND time >= ? "
            "ORDER BY time",
            (action, since),
        ).fetchall()
        return [r[0] for r in rows]

    def open_runs(self) -> list[str]:
        """Incidents whose runbook paused (waiting, deferred, refused, error) and may continue."""
        rows = self.db.execute(
            "SELECT incident FROM steps WHERE outcome NOT IN ('done', 'passed', 'failed', 'skipped') "
            "GROUP BY incident ORDER BY MIN(time), incident"
        ).fetchall()
        return [r[0] for r in rows]

    def save_incident(self, incident_id: str, body: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO incidents VALUES (?, ?)", (incident_id, json.dumps(body)))

    def incident_body(self, incident_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT body FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        return json.loads(row[0]) if row else None

    # --- circuit breaker -------------------------------------------------------------------------------------------

    def record_failure(self, incident: str, node: str, when: float) -> bool:
        """Count a node failure once per incident. Returns False if this incident was already counted."""
        cur = self.db.execute("INSERT OR IGNORE INTO failures VALUES (?, ?, ?)", (incident, node, when))
        return cur.rowcount == 1

    def failing_nodes(self, since: float) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT node FROM failures WHERE time >= ? ORDER BY node", (since,)).fetchall()
        return [r[0] for r in rows]

    def breaker(self) -> BreakerState:
        row = self.db.execute("SELECT state, since, reason, changed_by FROM breaker WHERE id = 1").fetchone()
        if row is None:
            return BreakerState(False, 0.0, "", "")
        return BreakerState(row[0] == "tripped", row[1], row[2], row[3])

    def set_breaker(self, tripped: bool, since: float, reason: str, changed_by: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO breaker VALUES (1, ?, ?, ?, ?)",
            ("tripped" if tripped else "closed", since, reason, changed_by),
        )
