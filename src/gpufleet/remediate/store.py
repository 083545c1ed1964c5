"""Durable remediation state, in the control plane's one state database: step outcomes (idempotency), node failures
the circuit breaker counts, the breaker itself, and the shared append-only audit log.

A store works in one mode. `on` keeps the books of real action; `dry-run` keeps its own: a dry run meets the same
budgets, rate limits and breaker that acting would (it counts the nodes it would have taken out and the failures
it would have seen), without touching the real ones. What dry-run says is what on would do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpufleet.state import AuditEntry, AuditLog, Database, IncidentTable

StoreMode = Literal["on", "dry-run"]

# Outcomes after which a step never runs again for the same incident.
FINAL_OUTCOMES = frozenset({"done", "passed", "failed", "skipped", "escalated"})
# A step begun (its intent written before the backend was called) but never confirmed: the control plane stopped
# in between. It is not run again by anyone; a person finishes it.
UNCONFIRMED = frozenset({"started", "interrupted"})
# In a dry run, "would" is the outcome of a step that acting would have carried out.
DRY_FINAL = FINAL_OUTCOMES | {"would"}
ACTOR = "remediation"

__all__ = ["FINAL_OUTCOMES", "UNCONFIRMED", "AuditEntry", "BreakerState", "RemediationStore", "StepRecord"]


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
    def __init__(self, db: Database | Path | str, mode: StoreMode = "on") -> None:
        self.db = db if isinstance(db, Database) else Database(db)
        self._owned = not isinstance(db, Database)
        self.mode: StoreMode = mode
        self.audit_log = AuditLog(self.db)
        self.incidents = IncidentTable(self.db)

    def with_mode(self, mode: StoreMode) -> RemediationStore:
        return RemediationStore(self.db, mode)

    @property
    def final(self) -> frozenset[str]:
        return DRY_FINAL if self.mode == "dry-run" else FINAL_OUTCOMES

    def close(self) -> None:
        if self._owned:
            self.db.close()

    # --- audit ---------------------------------------------------------------------------------------------------

    def audit(self, *, time: float, **row: Any) -> None:
        self.audit_log.append(time_=time, actor=ACTOR, **row)

    def audit_entries(self, incident: str | None = None, limit: int | None = None) -> list[AuditEntry]:
        return self.audit_log.entries(incident=incident, limit=limit)

    # --- step outcomes -------------------------------------------------------------------------------------------

    def step(self, incident: str, step: str) -> StepRecord | None:
        row = self.db.one(
            "SELECT incident, step, action, target, outcome, time, detail FROM remediation_steps "
            "WHERE incident = ? AND step = ? AND mode = ?",
            (incident, step, self.mode),
        )
        return StepRecord(*row) if row else None

    def record_step(self, rec: StepRecord) -> None:
        self.db.execute(
            "INSERT INTO remediation_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (incident, step, mode) "
            "DO UPDATE SET action = excluded.action, target = excluded.target, outcome = excluded.outcome, "
            "time = excluded.time, detail = excluded.detail",
            (rec.incident, rec.step, self.mode, rec.action, rec.target, rec.outcome, rec.time, rec.detail),
        )

    def action_times(self, action: str, since: float) -> list[float]:
        """When actions of this kind were carried out (for rate limits), oldest first."""
        outcomes = ("done", "passed", "failed", "would") if self.mode == "dry-run" else ("done", "passed", "failed")
        marks = ", ".join("?" * len(outcomes))
        rows = self.db.query(
            f"SELECT time FROM remediation_steps WHERE mode = ? AND action = ? AND outcome IN ({marks}) "
            "AND time >= ? ORDER BY time",
            (self.mode, action, *outcomes, since),
        )
        return [r[0] for r in rows]

    def done_on(self, action: str, target: str, since: float, other_than: str = "") -> list[str]:
        """The incidents for which `action` was carried out on `target` since `since`, oldest first."""
        rows = self.db.query(
            "SELECT incident FROM remediation_steps WHERE mode = ? AND action = ? AND target = ? AND outcome = ? "
            "AND time >= ? AND incident <> ? ORDER BY time",
            (self.mode, action, target, "would" if self.mode == "dry-run" else "done", since, other_than),
        )
        return [str(r[0]) for r in rows]

    def taken_out(self) -> set[str]:
        """Dry run: the nodes earlier steps would have cordoned, drained or rebooted (never uncordoned again)."""
        rows = self.db.query(
            "SELECT target, action FROM remediation_steps WHERE mode = ? AND outcome = 'would' "
            "AND action IN ('cordon', 'drain', 'reboot-node', 'uncordon') ORDER BY time",
            (self.mode,),
        )
        out: set[str] = set()
        for target, action in rows:
            node = target.split("/", 1)[1] if target.startswith("node/") else target
            if action == "uncordon":
                out.discard(node)
            else:
                out.add(node)
        return out

    def open_runs(self) -> list[str]:
        """Incidents whose runbook paused (waiting, deferred, refused, error) and may continue."""
        done = self.final
        marks = ", ".join("?" * len(done))
        rows = self.db.query(
            f"SELECT incident FROM remediation_steps WHERE mode = ? AND outcome NOT IN ({marks}) "
            "GROUP BY incident ORDER BY MIN(time), incident",
            (self.mode, *sorted(done)),
        )
        return [r[0] for r in rows]

    def save_incident(self, incident_id: str, body: dict[str, Any]) -> None:
        """Keep the incident a runbook works on, so a paused run can continue after a restart. The control plane
        keeps the same row up to date; the CLI's file incidents land here too."""
        if self.incidents.get(incident_id) is None:
            self.incidents.save([body])

    def incident_body(self, incident_id: str) -> dict[str, Any] | None:
        return self.incidents.get(incident_id)

    # --- circuit breaker -------------------------------------------------------------------------------------------

    def record_failure(self, incident: str, node: str, when: float) -> bool:
        """Count a node failure once per incident. Returns False if this incident was already counted."""
        before = self.db.one(
            "SELECT 1 FROM remediation_failures WHERE incident = ? AND mode = ?", (incident, self.mode)
        )
        if before is not None:
            return False
        self.db.execute(
            "INSERT INTO remediation_failures VALUES (?, ?, ?, ?) ON CONFLICT (incident, mode) DO NOTHING",
            (incident, self.mode, node, when),
        )
        return True

    def failures(self, since: float) -> list[tuple[str, float]]:
        """Each counted failure since then: (node, time), oldest first."""
        rows = self.db.query(
            "SELECT node, time FROM remediation_failures WHERE mode = ? AND time >= ? ORDER BY time, node",
            (self.mode, since),
        )
        return [(str(r[0]), float(r[1])) for r in rows]

    def failing_nodes(self, since: float) -> list[str]:
        rows = self.db.query(
            "SELECT DISTINCT node FROM remediation_failures WHERE mode = ? AND time >= ? ORDER BY node",
            (self.mode, since),
        )
        return [r[0] for r in rows]

    def breaker(self) -> BreakerState:
        row = self.db.one("SELECT state, since, reason, changed_by FROM breaker WHERE mode = ?", (self.mode,))
        if row is None:
            return BreakerState(False, 0.0, "", "")
        return BreakerState(row[0] == "tripped", row[1], row[2], row[3])

    def set_breaker(self, tripped: bool, since: float, reason: str, changed_by: str) -> None:
        self.db.execute(
            "INSERT INTO breaker VALUES (?, ?, ?, ?, ?) ON CONFLICT (mode) DO UPDATE SET state = excluded.state, "
            "since = excluded.since, reason = excluded.reason, changed_by = excluded.changed_by",
            (self.mode, "tripped" if tripped else "closed", since, reason, changed_by),
        )
