"""A durable local spool for events bound for the control plane: nothing is lost while it is unreachable.

Events are appended to SQLite with a per-agent sequence number; the pusher sends the oldest batch and deletes it
only after the control plane acknowledged it. The control plane ignores a (agent, seq) it has already stored, so a
batch re-sent after a lost acknowledgement is not duplicated.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError


class EventSpool:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)"
            )
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open the event spool {path}: {exc}", fix="check the agent's data dir") from exc
        self._lock = threading.Lock()

    def append(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO spool(body) VALUES (?)", [(json.dumps(e, default=str),) for e in events])
            self._db.execute("COMMIT")

    def peek(self, limit: int = 500) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM spool ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [(int(seq), json.loads(body)) for seq, body in rows]

    def ack(self, up_to_seq: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM spool WHERE seq <= ?", (up_to_seq,))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM spool").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
