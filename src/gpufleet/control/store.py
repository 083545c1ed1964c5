"""Durable control-plane state in SQLite (the embedded default): events seen and actions taken.

Writes go through one connection guarded by a lock; SQLite in WAL mode keeps readers from blocking the writer.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError
from gpufleet.model import Incident


def incident_to_json(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "cause": incident.cause.value,
        "entity": str(incident.entity),
        "node": incident.entity.node,
        "severity": incident.severity.value,
        "state": incident.state.value,
        "summary": incident.summary,
        "first_seen": incident.first_seen,
        "last_seen": incident.last_seen,
        "count": incident.count,
        "action": incident.action,
        "xid": incident.xid,
        "effects": list(incident.effects),
        "evidence": [{"time": e.time, "source": e.source, "text": e.text} for e in incident.evidence],
    }


SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sim_time REAL NOT NULL,
    wall_time REAL NOT NULL,
    kind TEXT NOT NULL,
    entity TEXT NOT NULL,
    message TEXT NOT NULL,
    attrs TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, id);
CREATE TABLE IF NOT EXISTS agent_events (
    agent TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    received REAL NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    entity TEXT NOT NULL,
    message TEXT NOT NULL,
    attrs TEXT NOT NULL,
    PRIMARY KEY (agent, seq)
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    wall_time REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    cause TEXT NOT NULL,
    entity TEXT NOT NULL,
    severity TEXT NOT NULL,
    state TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    count INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS incidents_state ON incidents(state, first_seen);
"""


class StateStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open state database {path}: {exc}", fix="check the data directory") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add_events(self, rows: list[tuple[float, str, str, str, dict[str, Any]]]) -> None:
        if not rows:
            return
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO events(sim_time, wall_time, kind, entity, message, attrs) VALUES (?,?,?,?,?,?)",
                [(t, now, kind, entity, msg, json.dumps(attrs, default=str)) for t, kind, entity, msg, attrs in rows],
            )
            self._db.execute("COMMIT")

    def add_agent_events(self, agent: str, events: list[dict[str, Any]]) -> int:
        """Store events an agent pushed; a (agent, seq) already stored is skipped. Returns how many were new."""
        now = time.time()
        rows = [
            (
                agent,
                int(e["seq"]),
                float(e.get("time", now)),
                now,
                str(e.get("node", "")),
                str(e.get("kind", "")),
                str(e.get("entity", "")),
                str(e.get("message", "")),
                json.dumps(e.get("attrs", {}), default=str),
            )
            for e in events
        ]
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR IGNORE INTO agent_events VALUES (?,?,?,?,?,?,?,?,?)", rows)
            self._db.execute("COMMIT")
            return self._db.total_changes - before

    def _select(self, query: str, where: tuple[str, Any] | None, order: str, limit: int) -> list[tuple[Any, ...]]:
        """`query` filtered on one column when `where` has a value, ordered and limited."""
        args: list[Any] = []
        if where is not None and where[1]:
            query += f" WHERE {where[0]} = ?"
            args.append(where[1])
        with self._lock:
            return self._db.execute(f"{query} ORDER BY {order} LIMIT ?", [*args, limit]).fetchall()

    def agent_events(self, agent: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        keys = ("agent", "seq", "time", "node", "kind", "entity", "message", "attrs")
        rows = self._select(f"SELECT {', '.join(keys)} FROM agent_events", ("agent", agent), "time, seq", limit)
        return [{**dict(zip(keys, r, strict=True)), "attrs": json.loads(r[7])} for r in rows]

    def events(self, kind: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        keys = ("id", "sim_time", "wall_time", "kind", "entity", "message", "attrs")
        rows = self._select(f"SELECT {', '.join(keys)} FROM events", ("kind", kind), "id DESC", limit)
        return [{**dict(zip(keys, r, strict=True)), "attrs": json.loads(r[6])} for r in rows]

    def count_events(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def audit(self, actor: str, action: str, target: str, result: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO audit(wall_time, actor, action, target, result) VALUES (?,?,?,?,?)",
                (time.time(), actor, action, target, result),
            )

    def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT wall_time, actor, action, target, result FROM audit ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [dict(zip(("wall_time", "actor", "action", "target", "result"), r, strict=True)) for r in rows]

    def upsert_incident(self, run: str, incident: Incident) -> None:
        """Keep an incident as it is now (one row per incident; updates replace it)."""
        body = json.dumps(incident_to_json(incident), default=str)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO incidents VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    f"{run}/{incident.id}",
                    run,
                    incident.cause.value,
                    str(incident.entity),
                    incident.severity.value,
                    incident.state.value,
                    incident.first_seen,
                    incident.last_seen,
                    incident.count,
                    body,
                ),
            )

    def incidents(self, state: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        rows = self._select("SELECT id, run, body FROM incidents", ("state", state), "first_seen DESC", limit)
        return [{"key": r[0], "run": r[1], **json.loads(r[2])} for r in rows]

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
