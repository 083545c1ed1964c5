"""Which control-plane replica leads: correlation and remediation run on exactly one.

On PostgreSQL the leader holds a session-level advisory lock on a connection of its own. The server releases it
the moment that session ends (the process died, the network split, the connection was killed), so another replica's
next attempt, a second later, takes over; a leader that cannot reach the database steps down at once rather than act
on a lock it may have lost. With the embedded SQLite state there is one process, and it leads.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Protocol

log = logging.getLogger("gpufleet.control")

LEADER_LOCK = 0x67706C65  # "gple": the advisory lock that makes a replica the leader
CHECK_EVERY_S = 1.0


class Leadership(Protocol):
    def leads(self) -> bool:
        """Whether this replica leads now (taking the lead when it is free)."""
        ...

    def close(self) -> None: ...


class SoleLeadership:
    """One control plane on its own state: it always leads."""

    def leads(self) -> bool:
        return True

    def close(self) -> None:
        pass


class PostgresLeadership:
    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self._conn: Any = None
        self._leading = False
        self._checked = -1e18

    def leads(self) -> bool:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY_S:
            return self._leading
        self._checked = now
        import psycopg

        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._leading = False
                self._conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=5, application_name=f"gpufleet-leader {self.name}"
                )
            if self._leading:
                self._conn.execute("SELECT 1")  # the session, and with it the lock, is still ours
            else:
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,)).fetchone()
                if row and row[0]:
                    self._leading = True
                    log.info("replica %s leads: correlation and remediation run here", self.name)
        except psycopg.Error as exc:
            if self._leading:
                log.warning("replica %s steps down: the state database does not answer (%s)", self.name, exc)
            self._leading = False
            self._drop()
        return self._leading

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        self._leading = False
        self._drop()
