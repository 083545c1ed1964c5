"""Durable control-plane state: one database for incidents, events, agent streams, inventory, audit and
remediation, shared by every part of the control plane. SQLite in the data directory by default; PostgreSQL
when `open_state` is given its URL."""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import UserError
from gpufleet.state.audit import AuditEntry, AuditLog
from gpufleet.state.db import DB_NAME, Database, SQLiteDatabase
from gpufleet.state.incidents import IncidentTable


def open_state(directory: Path, url: str | None = None) -> Database:
    """The state database: with no `url`, the SQLite file `state.db` in the data directory ($GPUFLEET_HOME);
    with a `postgresql://` (or `postgres://`) URL, that PostgreSQL database, whose tables are created or upgraded
    on the way in (the directory still holds the server's other files)."""
    if not url:
        return SQLiteDatabase(Path(directory) / DB_NAME)
    from gpufleet.state.postgres import PostgresDatabase, is_postgres_url, redact

    if not is_postgres_url(url):
        raise UserError(
            f"unsupported state database URL {redact(url)!r}",
            fix="give a PostgreSQL URL (postgresql://USER@HOST:5432/DBNAME), or none for the embedded SQLite "
            "file in the data directory",
        )
    return PostgresDatabase(url, directory=Path(directory))


__all__ = ["DB_NAME", "AuditEntry", "AuditLog", "Database", "IncidentTable", "SQLiteDatabase", "open_state"]
