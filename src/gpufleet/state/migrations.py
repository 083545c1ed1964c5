"""Bring a state database to this gpufleet's schema: the migrations it has not had, in order, in one transaction.

Several servers may start against one PostgreSQL at once; the database's own lock (`Database.lock_schema`) makes
the second wait for the first and then find nothing left to do. A database written by a newer gpufleet is refused
rather than half-understood.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gpufleet.errors import BackendError
from gpufleet.state.schema import META, MIGRATIONS, SCHEMA_VERSION, Migration


class Migratable(Protocol):
    """What a migration needs of a database (every `gpufleet.state.db.Database` answers it): the database is
    handed in, so this module stays below the engines that run it when they open."""

    @property
    def dialect(self) -> str: ...
    @property
    def location(self) -> str: ...
    def transaction(self) -> AbstractContextManager[None]: ...
    def lock_schema(self) -> None: ...
    def execute(self, sql: str, args: Sequence[Any] = ()) -> int: ...
    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...


def version(db: Migratable) -> int:
    """The schema version the database is at (0 for a new one)."""
    stored = db.get_meta("schema_version")
    return int(stored) if stored is not None else 0


def migrate(db: Migratable, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Apply what the database lacks; returns the version it is at now."""
    latest = len(migrations)
    with db.transaction():
        db.lock_schema()
        db.execute(META)
        current = version(db)
        if current > latest:
            raise BackendError(
                f"{db.location} was written by a newer gpufleet (schema {current}, this one reads {latest})",
                fix="upgrade gpufleet, or point it at another database",
            )
        if current == latest:
            return current
        for migration in migrations[current:]:
            for statement in migration.sql(db.dialect):
                added = _ADD_COLUMN.match(statement)
                if added is not None and _has_column(db, added["table"], added["column"]):
                    continue  # a migration runs again over tables that have it (a file marked older than it is)
                db.execute(statement)
        db.set_meta("schema_version", str(latest))
    return latest


_ADD_COLUMN = re.compile(r"\s*ALTER TABLE (?P<table>\w+) ADD COLUMN (?P<column>\w+)", re.IGNORECASE)


def _has_column(db: Migratable, table: str, column: str) -> bool:
    if db.dialect == "sqlite":
        return any(row[1] == column for row in db.query(f"PRAGMA table_info({table})"))
    found = db.one(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? "
        "AND column_name = ?",
        (table, column),
    )
    return found is not None


__all__ = ["SCHEMA_VERSION", "Migratable", "migrate", "version"]
