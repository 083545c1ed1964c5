"""A durable local spool for the records bound for the control plane: nothing is lost while it is unreachable.

Records are appended to SQLite under increasing sequence numbers; the pusher sends the oldest ones and deletes them
only once the control plane has acknowledged them. The spool's `incarnation` is made when its file is created:
an agent whose data folder was lost starts a new stream (its sequence numbers start again at 1), which the control
plane tells apart from the old one, so nothing of it is dropped as a duplicate.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

from gpufleet.errors import BackendError
from gpufleet.model.observe import Observation, Record
from gpufleet.model.wire import encode
from gpufleet.private_files import private_database, private_dir

_decode: msgspec.json.Decoder[Observation] = msgspec.json.Decoder(Observation)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class RecordSpool:
    def __init__(self, path: Path) -> None:
        try:
            private_dir(path.parent)  # the agent's data folder and its spool are its owner's only
            private_database(path)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise BackendError(
                f"cannot open the agent's spool {path}: {exc}", fix="check the agent's --data-dir is writable"
            ) from exc
        self._lock = threading.Lock()
        self.path = path
        self._inode = os.stat(path).st_ino
        stored = self.get("incarnation")
        self.new = stored is None  # made now: a new stream, and whatever the agent had read before is read again
        if stored is None:
            stored = secrets.token_hex(8)
            self.set("incarnation", stored)
        self.incarnation = stored

    def lost(self) -> str | None:
        """Why the spool's file is no longer where the agent keeps it (deleted, or replaced), or None."""
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            return f"{self.path} was deleted"
        except OSError as exc:
            return f"{self.path} cannot be read: {exc.strerror}"
        return None if inode == self._inode else f"{self.path} was replaced by another file"

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set(self, key: str, value: str) -> None:
        """Agent state that must survive a restart with the spool (e.g. how far the kernel log was read)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def append(self, observations: Sequence[Observation]) -> None:
        if not observations:
            return
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO spool(body) VALUES (?)", [(encode(o).decode(),) for o in observations])
            self._db.execute("COMMIT")

    def peek(self, limit: int = 500) -> list[Record]:
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM spool ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [Record(int(seq), _decode.decode(body)) for seq, body in rows]

    def last_assigned(self) -> int:
        """The highest sequence number this spool ever gave a record (acknowledged ones included)."""
        with self._lock:
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'spool'").fetchone()
        return int(row[0]) if row else 0

    def ack(self, up_to_seq: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM spool WHERE seq <= ?", (up_to_seq,))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM spool").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
