"""Several control-plane replicas on one PostgreSQL: each takes agents' batches and answers reads; one leads.

A replica stores the batches it takes (their new records and the node's state) and also writes each to the
`feed`, in the same transaction; every replica reads the others' from it, so each one's view of the fleet is
whole, and the leader correlates every finding whichever replica took it. Feed ids are handed out before their
transactions commit, so a reader that sees id 105 may not yet see 104: a missing id is waited for (a few seconds;
a rolled-back one never appears) before the reader moves past it.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import msgspec

from gpufleet.model.observe import Batch, Record
from gpufleet.model.wire import MSGPACK, WireError, decode_batch, encode
from gpufleet.state.db import Database
from gpufleet.state.leadership import Leadership, SoleLeadership

log = logging.getLogger("gpufleet.control")

GAP_WAIT_S = 10.0  # longer than any ingest transaction takes to commit
FEED_KEEP_S = 600.0
HEARTBEAT_S = 5.0
READ_LIMIT = 5000


def replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Replication:
    """`shared=False`: the one control plane on its state (nothing written to the feed, always the leader)."""

    def __init__(
        self,
        db: Database,
        leadership: Leadership | None = None,
        *,
        shared: bool = False,
        name: str | None = None,
        address: str = "",
    ) -> None:
        self.db = db
        self.leadership = leadership or SoleLeadership()
        self.shared = shared
        self.name = name or replica_name()
        self.address = address
        self.started = time.time()
        self._cursor = 0
        self._seen: set[int] = set()
        self._gaps: dict[int, float] = {}  # missing id -> when first missed (monotonic)
        self._beat = -1e18
        self._trimmed = -1e18
        if shared:
            row = db.one("SELECT MAX(id) FROM feed")
            self._cursor = int(row[0] or 0) if row else 0  # what came before: nodes push again within seconds

    def leads(self) -> bool:
        return self.leadership.leads()

    def publish(self, batch: Batch, new: list[Record]) -> None:
        """Inside the ingest transaction: the batch, with only its new records, for the other replicas."""
        if self.shared:
            body = encode(msgspec.structs.replace(batch, records=new), MSGPACK)
            self.db.execute(
                "INSERT INTO feed (replica, received, body) VALUES (?, ?, ?)", (self.name, time.time(), body)
            )

    def others(self) -> list[Batch]:
        """Batches the other replicas took since the last call, in feed order."""
        if not self.shared:
            return []
        rows = self.db.query(
            "SELECT id, replica, body FROM feed WHERE id > ? ORDER BY id LIMIT ?", (self._cursor, READ_LIMIT)
        )
        out = []
        for ident, replica, body in rows:
            ident = int(ident)
            if ident in self._seen:
                continue
            self._seen.add(ident)
            self._gaps.pop(ident, None)
            if replica == self.name:
                continue
            try:
                out.append(decode_batch(bytes(body), MSGPACK))
            except WireError as exc:  # written by a newer replica during an upgrade: said, then skipped
                log.warning("feed entry %d from %s cannot be read: %s", ident, replica, exc.message)
        self._advance()
        return out

    def _advance(self) -> None:
        if not self._seen:
            return
        now = time.monotonic()
        for ident in range(self._cursor + 1, max(self._seen)):
            if ident not in self._seen:
                self._gaps.setdefault(ident, now)
        while True:
            nxt = self._cursor + 1
            if nxt in self._seen:
                self._seen.discard(nxt)
            elif nxt in self._gaps and now - self._gaps[nxt] > GAP_WAIT_S:
                del self._gaps[nxt]  # rolled back: it will never appear
            else:
                break
            self._cursor = nxt

    def heartbeat(self, leading: bool) -> None:
        """Say who this replica is and whether it leads (for /healthz and people); the leader trims the feed."""
        if not self.shared:
            return
        now = time.monotonic()
        if now - self._beat >= HEARTBEAT_S:
            self._beat = now
            wall = time.time()
            self.db.execute(
                "INSERT INTO replicas (name, started, seen, leader, address) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET seen = excluded.seen, leader = excluded.leader",
                (self.name, self.started, wall, int(leading), self.address),
            )
        if leading and now - self._trimmed >= 60.0:
            self._trimmed = now
            wall = time.time()
            self.db.execute("DELETE FROM feed WHERE received < ?", (wall - FEED_KEEP_S,))
            self.db.execute("DELETE FROM replicas WHERE seen < ?", (wall - 3600.0,))

    def replicas(self) -> list[dict[str, object]]:
        if not self.shared:
            return [{"name": self.name, "leader": True, "seen": time.time(), "address": self.address}]
        rows = self.db.query("SELECT name, started, seen, leader, address FROM replicas ORDER BY name")
        return [
            {"name": r[0], "started": float(r[1]), "seen": float(r[2]), "leader": bool(r[3]), "address": r[4]}
            for r in rows
        ]

    def close(self) -> None:
        self.leadership.close()
