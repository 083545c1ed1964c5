"""Durable control-plane state: one database for incidents, events, agent streams, inventory, audit and
remediation, shared by every part of the control plane. SQLite in the data directory by default; PostgreSQL
when `open_state` is given its URL."""

from __future__ import annotations

import contextlib
from pathlib import Path

from gpufleet.errors import UserError
from gpufleet.private_files import write_private
from gpufleet.state.audit import AuditEntry, AuditLog
from gpufleet.state.db import DB_NAME, Database, SQLiteDatabase
from gpufleet.state.incidents import IncidentTable

LOCATION = "state-location"
"""A file in the data directory naming (without its password) the PostgreSQL database the control plane on this host
keeps its state in, written each time one is opened and removed when the SQLite file is opened instead: a tool run
on the host without `--state` then knows not to reach for a local file no control plane reads."""

STATE_FIX = (
    "give the control plane's state database: --state postgresql://USER@HOST/DB (or $GPUFLEET_STATE) as "
    "`gpufleet server` was started with; or start the control plane first (`gpufleet up` or `gpufleet server`), "
    "which makes the database in $GPUFLEET_HOME"
)


def open_state(directory: Path, url: str | None = None, *, create: bool = True) -> Database:
    """The state database: with no `url`, the SQLite file `state.db` in the data directory ($GPUFLEET_HOME);
    with a `postgresql://` (or `postgres://`) URL, that PostgreSQL database, whose tables are created or upgraded
    on the way in (the directory still holds the server's other files).

    `create=False` is for tools that work on the control plane's existing state (tokens): with no `url` they refuse
    to make a new SQLite file, or to use the local one when the control plane here keeps its state in PostgreSQL,
    rather than write where no control plane reads."""
    directory = Path(directory)
    if not url:
        if not create:
            _existing_local(directory)
        db: Database = SQLiteDatabase(directory / DB_NAME)
        if create:
            with contextlib.suppress(FileNotFoundError):
                (directory / LOCATION).unlink()
        return db
    from gpufleet.state.postgres import PostgresDatabase, is_postgres_url, redact

    if not is_postgres_url(url):
        raise UserError(
            f"unsupported state database URL {redact(url)!r}",
            fix="give a PostgreSQL URL (postgresql://USER@HOST:5432/DBNAME), or none for the embedded SQLite "
            "file in the data directory",
        )
    db = PostgresDatabase(url, directory=directory)
    if create:
        write_private(directory / LOCATION, db.location + "\n")
    return db


def recorded_location(directory: Path) -> str | None:
    """The PostgreSQL database (password left out) the control plane on this host last opened, if it keeps its
    state there."""
    try:
        text = (Path(directory) / LOCATION).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return text or None


def _existing_local(directory: Path) -> None:
    recorded = recorded_location(directory)
    if recorded is not None:
        raise UserError(
            f"the control plane on this host keeps its state in {recorded}, not in {directory}; without --state "
            "this would use a local database no replica reads",
            fix=f"give --state {recorded} (with its password, or PGPASSWORD / ~/.pgpass), or set $GPUFLEET_STATE",
        )
    if not (directory / DB_NAME).is_file():
        raise UserError(
            f"no state database in {directory}: a new one made now would be read by no control plane",
            fix=STATE_FIX,
        )


__all__ = [
    "DB_NAME",
    "LOCATION",
    "AuditEntry",
    "AuditLog",
    "Database",
    "IncidentTable",
    "SQLiteDatabase",
    "open_state",
    "recorded_location",
]
