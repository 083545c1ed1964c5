"""The append-only audit log: who (a token's name, or the remediation engine) did what to which target, why, and
with what result. The database refuses UPDATE and DELETE on it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpufleet.state.db import Database, where

COLUMNS = (
    "seq", "time", "recorded", "actor", "action", "target", "decision", "reason", "incident", "cause", "runbook",
    "step", "dry_run", "backend", "request",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    time: float  # the cluster clock (epoch seconds)
    recorded: float  # wall time of the write
    actor: str
    action: str
    target: str
    decision: str
    reason: str
    incident: str
    cause: str
    runbook: str
    step: str
    dry_run: bool
    backend: str
    request: str

    def as_dict(self) -> dict[str, Any]:
        return {c: getattr(self, c) for c in COLUMNS}


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, *, time_: float | None = None, **row: Any) -> None:
        row = {k: v for k, v in row.items() if v is not None}
        row["time"] = time.time() if time_ is None else time_
        row.setdefault("recorded", time.time())
        row["dry_run"] = int(bool(row.get("dry_run", False)))
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"audit has no column {sorted(unknown)}")
        cols = ", ".join(row)
        self.db.execute(f"INSERT INTO audit ({cols}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))

    def entries(
        self, incident: str | None = None, limit: int | None = None, actor: str | None = None
    ) -> list[AuditEntry]:
        """Oldest first; with `limit`, the newest `limit` entries."""
        clause, args = where({"incident": incident, "actor": actor})
        sql = f"SELECT {', '.join(COLUMNS)} FROM audit{clause}"
        if limit:
            sql = f"SELECT * FROM ({sql} ORDER BY seq DESC LIMIT {int(limit)}) AS newest ORDER BY seq"
        else:
            sql += " ORDER BY seq"
        rows = self.db.query(sql, args)
        out = []
        for r in rows:
            values = dict(zip(COLUMNS, r, strict=True))
            values["dry_run"] = bool(values["dry_run"])
            out.append(AuditEntry(**values))
        return out
