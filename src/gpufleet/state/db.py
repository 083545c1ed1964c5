"""The control plane's one state database: what it answers, and SQLite (the embedded default) answering it.

One connection, one re-entrant lock: every thread (API handlers, ingest, the control loop, remediation) goes
through it, so no connection is ever used by two threads at once (nor SQLite's from a thread it was not made
for). `transaction()` makes a block atomic: a batch is written whole or not at all, and a failed one leaves
nothing behind for the next.

Callers write SQL once for both engines: `?` placeholders, and `INSERT ... ON CONFLICT (...) DO UPDATE / DO
NOTHING` rather than SQLite's `INSERT OR REPLACE / IGNORE`. `gpufleet.state.open_state` picks the engine: a data
directory's SQLite file, or a PostgreSQL URL (state/postgres.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.errors import BackendError
from gpufleet.locks import ordered_lock
from gpufleet.state.migrations import migrate

DB_NAME = "state.db"


class Database:
    """The interface every engine answers. `Database(path)` is the SQLite database at `path` (or ":memory:"), as
    it always was; `open_state` also reaches PostgreSQL."""

    dialect = ""
    location = ""  # where the database is, for messages (never with a password)
    directory: Path | None = None  # the data directory beside it (tickets and other files), if there is one

    def __new__(cls, *args: Any, **kwargs: Any) -> Database:
        return super().__new__(SQLiteDatabase if cls is Database else cls)

    def __init__(self, path: Path | str = ":memory:") -> None:
        self._lock = ordered_lock("state")
        self._depth = 0

    # --- what each engine provides ----------------------------------------------------------------------------

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _rollback(self) -> None:
        raise NotImplementedError

    def lock_schema(self) -> None:
        """Inside a transaction: keep other processes from migrating this database until it ends."""
        raise NotImplementedError

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement. Returns the id of the row it inserted: SQLite gives it for any INSERT, PostgreSQL
        when the statement ends in `RETURNING <id column>` (which SQLite also accepts); else 0."""
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # --- the same on every engine -----------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

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
            self._begin()
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._rollback()
                raise
            self._depth = 0
            self._commit()

    def get_meta(self, key: str) -> str | None:
        row = self.one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


class SQLiteDatabase(Database):
    """One SQLite file (WAL; readable by its owner only), or one in memory."""

    dialect = "sqlite"

    def __init__(self, path: Path | str = ":memory:") -> None:
        super().__init__()
        self.path = self.location = str(path)
        memory = self.path in (":memory:", "")
        self.directory = None if memory else Path(self.path).parent
        try:
            if not memory:
                _private_file(Path(self.path))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
        except (sqlite3.Error, OSError) as exc:
            raise BackendError(
                f"cannot open the state database {self.path}: {exc}",
                fix="check that the data directory ($GPUFLEET_HOME) is writable and the file is a gpufleet database",
            ) from None
        try:
            migrate(self)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise BackendError(
                f"cannot read the state database {self.path}: {exc}",
                fix="point $GPUFLEET_HOME at a gpufleet data directory (this file is not a gpufleet database)",
            ) from None
        except BaseException:
            self._db.close()
            raise

    def _begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._db.execute("COMMIT")

    def _rollback(self) -> None:
        self._db.execute("ROLLBACK")

    def lock_schema(self) -> None:
        pass  # BEGIN IMMEDIATE already holds the file's write lock

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
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


def _private_file(path: Path) -> None:
    """Create the database file readable by its owner only before SQLite opens it (SQLite gives its -wal and
    -shm files the database file's mode), and take away others' access to one made before."""
    from gpufleet.private_files import private_database

    private_database(path)


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
