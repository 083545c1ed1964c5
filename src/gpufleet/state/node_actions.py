"""Node actions as the database keeps them: one row per action id, queued -> dispatched -> its outcome.

The id is the key everywhere: queueing an id again returns the row there is (a remediation pass that asks again,
a control plane that restarted); the first result for an id stands, later copies of it are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from gpufleet.model.actions import ActionResult, NodeAction
from gpufleet.state.db import Database

QUEUED = "queued"
DISPATCHED = "dispatched"  # handed to the node's agent at least once; handed again until its result comes
OPEN_STATES = (QUEUED, DISPATCHED)


@dataclass(frozen=True, slots=True)
class ActionRow:
    action: NodeAction
    requested_by: str
    created: float
    state: str  # queued, dispatched, or the result's outcome
    dispatched: float | None
    finished: float | None
    result: ActionResult | None

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


_COLUMNS = "body, requested_by, created, state, dispatched, finished, result"


def _row(row: tuple[object, ...]) -> ActionRow:
    body, requested_by, created, state, dispatched, finished, result = row
    return ActionRow(
        msgspec.json.decode(str(body), type=NodeAction),
        str(requested_by),
        float(created),  # type: ignore[arg-type]
        str(state),
        None if dispatched is None else float(dispatched),  # type: ignore[arg-type]
        None if finished is None else float(finished),  # type: ignore[arg-type]
        None if result is None else msgspec.json.decode(str(result), type=ActionResult),
    )


class NodeActionTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, action: NodeAction, requested_by: str, now: float) -> ActionRow:
        """Queue `action` unless its id is there already; the row for the id either way."""
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO node_actions (id, node, kind, incident, body, requested_by, created, deadline, state) "
                "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING",
                (
                    action.id,
                    action.node,
                    action.kind.value,
                    action.incident,
                    msgspec.json.encode(action).decode(),
                    requested_by,
                    now,
                    action.deadline,
                    QUEUED,
                ),
            )
            row = self.get(action.id)
        assert row is not None
        return row

    def get(self, action_id: str) -> ActionRow | None:
        row = self.db.one(f"SELECT {_COLUMNS} FROM node_actions WHERE id = ?", (action_id,))
        return None if row is None else _row(row)

    def open_for(self, node: str) -> list[ActionRow]:
        """The node's actions without a result yet, oldest first."""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM node_actions WHERE node = ? AND state IN (?, ?) ORDER BY created, id",
            (node, *OPEN_STATES),
        )
        return [_row(r) for r in rows]

    def has_open(self) -> set[str]:
        """The nodes with actions waiting."""
        rows = self.db.query("SELECT DISTINCT node FROM node_actions WHERE state IN (?, ?)", OPEN_STATES)
        return {str(r[0]) for r in rows}

    def dispatched(self, ids: list[str], now: float) -> None:
        if not ids:
            return
        with self.db.transaction():
            self.db.executemany(
                "UPDATE node_actions SET state = ?, dispatched = COALESCE(dispatched, ?) WHERE id = ? AND state = ?",
                [(DISPATCHED, now, i, QUEUED) for i in ids],
            )

    def finish(self, result: ActionResult, now: float) -> bool:
        """Record the action's result; False when it had one already (a copy sent again) or is unknown."""
        with self.db.transaction():
            row = self.db.one("SELECT state FROM node_actions WHERE id = ?", (result.id,))
            if row is None or row[0] not in OPEN_STATES:
                return False
            self.db.execute(
                "UPDATE node_actions SET state = ?, finished = ?, result = ? WHERE id = ? AND state IN (?, ?)",
                (result.outcome.value, now, msgspec.json.encode(result).decode(), result.id, *OPEN_STATES),
            )
        return True

    def listed(self, *, node: str | None = None, incident: str | None = None, limit: int = 500) -> list[ActionRow]:
        """Newest first."""
        clauses, args = [], []
        if node:
            clauses.append("node = ?")
            args.append(node)
        if incident:
            clauses.append("incident = ?")
            args.append(incident)
        sql = f"SELECT {_COLUMNS} FROM node_actions"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        rows = self.db.query(sql + " ORDER BY created DESC, id DESC LIMIT ?", (*args, limit))
        return [_row(r) for r in rows]
