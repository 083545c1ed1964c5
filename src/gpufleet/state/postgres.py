"""The state database on PostgreSQL (psycopg 3), for control planes that outgrow one machine's SQLite file.

The same interface and semantics as SQLite: one connection and one lock per process, explicit transactions that
nested blocks join (autocommit outside them), `?` placeholders. A lost connection is reconnected on the next
statement outside a transaction; inside one, the transaction fails as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from gpufleet.errors import BackendError, DependencyMissingError
from gpufleet.state.db import Database
from gpufleet.state.migrations import migrate

SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT_S = 10
# the pg_advisory_xact_lock key that serialises migrations of a database: any fixed 64-bit number will do; this one
# is the first 8 bytes of sha256("gpufleet.state.migrate")
MIGRATION_LOCK = 0x7E05_0729_A3D3_5128

# a quoted string or identifier, a comment, a dollar-quoted body, or one of the characters to translate
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|\$\$.*?\$\$|[?%]", re.S)


@lru_cache(maxsize=1024)
def to_pyformat(sql: str) -> str:
    """`?` placeholders as psycopg's `%s`, and every literal `%` (in LIKE patterns too) doubled so psycopg keeps
    it. A `?` inside quotes or a comment stays as it is."""

    def swap(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "?":
            return "%s"
        return token.replace("%", "%%")

    return _TOKENS.sub(swap, sql)


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme in SCHEMES


def redact(url: str) -> str:
    """The URL without its password (in the user part or as a `password=` parameter)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = parts.query
        if query:
            pairs = [(k, "***" if k.lower() == "password" else v) for k, v in parse_qsl(query, keep_blank_values=True)]
            query = urlencode(pairs, safe="/:")
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return "(an unreadable URL)"


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, url: str, directory: Path | None = None) -> None:
        super().__init__()
        self.url = url
        self.location = redact(url)
        self.directory = directory
        self._conn = self._connect()
        try:
            migrate(self)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError:
            raise DependencyMissingError(
                "PostgreSQL state needs psycopg", fix="install gpufleet[postgres] (pip install 'psycopg[binary]')"
            ) from None
        try:
            return psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="gpufleet"
            )
        except psycopg.Error as exc:
            raise BackendError(
                f"cannot connect to the state database {self.location}: {_first_line(exc)}",
                fix="check that PostgreSQL is running and that the URL's host, port, user, password and database "
                "are right (the database must exist; gpufleet creates its tables)",
            ) from None

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """The connection (a new one if the last was lost, unless a transaction was open on it); a statement that
        fails because the connection broke is a BackendError."""
        import psycopg

        if self._conn.broken and not self._depth:
            self._conn = self._connect()
        try:
            yield self._conn
        except psycopg.OperationalError as exc:
            if not self._conn.broken:
                raise
            raise BackendError(
                f"lost the connection to the state database {self.location}: {_first_line(exc)}",
                fix="check that PostgreSQL is up; gpufleet reconnects on its next statement",
            ) from None

    def _run(self, sql: str, args: Sequence[Any]) -> Any:
        with self._connection() as conn:
            return conn.execute(to_pyformat(sql), args)  # a sequence even when empty: then `%%` is `%`

    def _begin(self) -> None:
        self._run("BEGIN", ())

    def _commit(self) -> None:
        self._run("COMMIT", ())

    def _rollback(self) -> None:
        if self._conn.broken:
            return  # the server ended the transaction with the connection
        self._run("ROLLBACK", ())

    def lock_schema(self) -> None:
        self._run("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._lock:
            cur = self._run(sql, args)
            if cur.description is None:
                return 0
            row = cur.fetchone()
            return row[0] if row and isinstance(row[0], int) else 0

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self._lock, self._connection() as conn, conn.cursor() as cur:
            cur.executemany(to_pyformat(sql), rows)  # one pipeline, not a round trip per row

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            rows: list[tuple[Any, ...]] = self._run(sql, args).fetchall()
            return rows

    def one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._lock:
            row: tuple[Any, ...] | None = self._run(sql, args).fetchone()
            return row


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
