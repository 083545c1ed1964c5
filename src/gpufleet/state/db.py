"""The control plane's one state database (SQLite, the embedded default).

One connection, one re-entrant lock: every thread (API handlers, ingest, the control loop, remediation) goes
through it, so no SQLite object is ever used from a thread it was not made for. `transaction()` makes a block
atomic: a batch is written whole or not at all, and a failed one leaves nothing behind for the next.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError
from gpufleet.state.schema import SCHEMA, SCHEMA_VERSION

DB_NAME = "state.db"


class Database:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise BackendError(
                f"cannot open the state database {self.path}: {exc}",
                fix="check that the data directory ($GPUFLEET_HOME) is writable and the file is a gpufleet database",
            ) from None
        self._lock = threading.RLock()
        self._depth = 0
        stored = self.get_meta("schema_version")
        if stored is None:
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        elif int(stored) > SCHEMA_VERSION:
            raise BackendError(
                f"{self.path} was written by a newer gpufleet (schema {stored}, this one reads {SCHEMA_VERSION})",
                fix="upgrade gpufleet, or point $GPUFLEET_HOME at another directory",
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together, or none do. Nested blocks join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._db.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._db.execute("ROLLBACK")
                raise
            self._depth = 0
            self._db.execute("COMMIT")

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; returns the row id it inserted (or 0)."""
        with self._lock:
            return self._db.execute(sql, args).lastrowid or 0

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self._lock:
                self._db.executemany(sql, rows)

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._db.execute(sql, args).fetchone()
            return row

    def get_meta(self, key: str) -> str | None:
        row = self.one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))


def where(filters: Mapping[str, Any], *conditions: str) -> tuple[str, list[Any]]:
    """A WHERE clause (with its leading space) and its arguments from the filters that are set: None and "" are
    not; a list or tuple matches any of its items. `conditions` are fixed SQL conditions joined in too."""
    parts: list[str] = list(conditions)
    args: list[Any] = []
    for column, value in filters.items():
        if value is None or value == "":
            continue
        if isinstance(value, list | tuple):
            parts.append(f"{column} IN ({', '.join('?' * len(value))})")
            args.extend(value)
        else:
            parts.append(f"{column} = ?")
            args.append(value)
    return (f" WHERE {' AND '.join(parts)}" if parts else ""), args


def open_state(directory: Path) -> Database:
    """The state database of a data directory ($GPUFLEET_HOME)."""
    return Database(Path(directory) / DB_NAME)
