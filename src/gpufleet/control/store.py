"""The control plane's records in the state database: agent streams, the observations they delivered, node
inventories, incidents and the audit log.

A batch is stored in one transaction: its new records, its stream's position and its inventory together, so a
batch either counts whole or not at all and is never half-stored (a re-sent batch after a crash is recognised).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

import msgspec

from gpufleet.model.observe import (
    Batch,
    BmcEvent,
    Finding,
    KernelReport,
    LinkEvent,
    NodeInventory,
    Observation,
    Record,
)
from gpufleet.state import AuditLog, Database, IncidentTable
from gpufleet.state.db import where

_inventory = msgspec.json.Decoder(NodeInventory)
_observation: msgspec.json.Decoder[Observation] = msgspec.json.Decoder(Observation)
_json = msgspec.json.Encoder()
CONTROL_AGENT = "control"


def _describe(record: Record) -> tuple[str, str, str, str]:
    """(node, kind, entity, message) of a record, for the event list."""
    body = record.body
    if isinstance(body, KernelReport):
        entity = f"gpu/{body.node}/{body.gpu}" if body.gpu is not None else f"node/{body.node}"
        return body.node, "kmsg", entity, body.raw.split("\n", 1)[0]
    if isinstance(body, LinkEvent):
        return body.node, "link", f"port/{body.node}/{body.port}/{body.hca}", body.detail
    if isinstance(body, BmcEvent):
        direction = "asserted" if body.asserted else "deasserted"
        text = f"SEL {body.record:x}: {body.sensor_type} {body.sensor}: {body.event} ({direction})"
        return body.node, "bmc", f"node/{body.node}", text
    assert isinstance(body, Finding)
    return body.entity.node, "finding", str(body.entity), body.summary


class StateStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.incidents = IncidentTable(db)
        self.audit_log = AuditLog(db)

    # --- streams and ingest -------------------------------------------------------------------------------------

    def streams(self) -> dict[tuple[str, str], tuple[int, float, str]]:
        """(agent, incarnation) -> (last seq, last time, node)."""
        rows = self.db.query("SELECT agent, incarnation, last_seq, last_time, node FROM streams")
        return {(r[0], r[1]): (int(r[2]), float(r[3]), r[4]) for r in rows}

    def stream_owners(self) -> dict[tuple[str, str], str]:
        """(agent, incarnation) -> the id of the token that opened the stream, for the streams a token opened."""
        rows = self.db.query("SELECT agent, incarnation, token FROM streams WHERE token IS NOT NULL")
        return {(r[0], r[1]): str(r[2]) for r in rows}

    def stream_position(self, agent: str, incarnation: str) -> tuple[int, str | None]:
        """The stream's last stored sequence number and the token that opened it, its row locked until the
        transaction ends where the engine can (PostgreSQL), so two replicas taking the same re-sent batch cannot
        both store it."""
        lock = " FOR UPDATE" if self.db.dialect == "postgresql" else ""
        row = self.db.one(
            f"SELECT last_seq, token FROM streams WHERE agent = ? AND incarnation = ?{lock}", (agent, incarnation)
        )
        return (int(row[0]), None if row[1] is None else str(row[1])) if row else (0, None)

    def kernel_seen(self, node: str, idents: Collection[str]) -> set[str]:
        """Which of these kernel-log lines of `node` were taken before, from any stream."""
        if not idents:
            return set()
        marks = ",".join("?" * len(idents))
        rows = self.db.query(f"SELECT ident FROM kernel_seen WHERE node = ? AND ident IN ({marks})", (node, *idents))
        return {str(r[0]) for r in rows}

    def remember_kernel(self, node: str, idents: Collection[str], when: float) -> None:
        self.db.executemany(
            "INSERT INTO kernel_seen(node, ident, seen) VALUES (?,?,?) ON CONFLICT (node, ident) DO NOTHING",
            [(node, ident, when) for ident in idents],
        )

    def prune_kernel_seen(self, keep_per_node: int) -> None:
        """Keep about the `keep_per_node` newest kernel-log identities of each node."""
        nodes = self.db.query("SELECT node FROM kernel_seen GROUP BY node HAVING COUNT(*) > ?", (keep_per_node,))
        for (node,) in nodes:
            row = self.db.one(
                "SELECT seen FROM kernel_seen WHERE node = ? ORDER BY seen DESC LIMIT 1 OFFSET ?", (node, keep_per_node)
            )
            if row is not None:
                self.db.execute("DELETE FROM kernel_seen WHERE node = ? AND seen <= ?", (node, row[0]))

    def store_batch(
        self, batch: Batch, new: list[Record], last_seq: int, received: float, token: str | None = None
    ) -> None:
        """The new records of a batch, its stream's position and its inventory, in one transaction; a stream no
        token opened yet becomes `token`'s."""
        rows = []
        for record in new:
            node, kind, entity, message = _describe(record)
            rows.append(
                (
                    batch.agent,
                    batch.incarnation,
                    record.seq,
                    record.body.time,
                    received,
                    node or batch.node,
                    kind,
                    entity,
                    message[:2000],
                    _json.encode(record.body).decode(),
                )
            )
        with self.db.transaction():
            self.db.executemany(
                "INSERT INTO events(agent, incarnation, seq, time, received, node, kind, entity, message, body) "
                "VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            self.db.execute(
                "INSERT INTO streams(agent, incarnation, node, last_seq, last_time, token) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT (agent, incarnation) DO UPDATE SET last_seq = excluded.last_seq, "
                "last_time = excluded.last_time, node = excluded.node, token = COALESCE(streams.token, excluded.token)",
                (batch.agent, batch.incarnation, batch.node, last_seq, batch.sent, token),
            )
            if batch.inventory is not None:
                self.db.execute(
                    "INSERT INTO inventory VALUES (?,?,?,?) ON CONFLICT (node) "
                    "DO UPDATE SET agent = excluded.agent, updated = excluded.updated, body = excluded.body",
                    (batch.node, batch.agent, received, _json.encode(batch.inventory).decode()),
                )

    def recent_kernel_reports(self, limit: int) -> list[KernelReport]:
        """The newest `limit` kernel reports of every node, oldest first (a restarted control plane shows them)."""
        rows = self.db.query("SELECT body FROM events WHERE kind = 'kmsg' ORDER BY id DESC LIMIT ?", (limit,))
        reports = []
        for (body,) in reversed(rows):
            try:
                decoded = _observation.decode(body)
            except msgspec.ValidationError:
                continue  # written by an older or newer gpufleet in a form this one does not read
            if isinstance(decoded, KernelReport):
                reports.append(decoded)
        return reports

    def inventories(self) -> list[tuple[str, str, NodeInventory]]:
        rows = self.db.query("SELECT node, agent, body FROM inventory ORDER BY node")
        return [(r[0], r[1], _inventory.decode(r[2])) for r in rows]

    # --- the fabric --------------------------------------------------------------------------------------------

    def save_fabric(self, subnet: str, updated: float, report: bytes, baseline: bytes) -> None:
        self.db.execute(
            "INSERT INTO fabric_subnets VALUES (?,?,?,?) ON CONFLICT (subnet) "
            "DO UPDATE SET updated = excluded.updated, report = excluded.report, baseline = excluded.baseline",
            (subnet, updated, report, baseline),
        )

    def fabric_subnets(self) -> list[tuple[str, bytes, bytes]]:
        rows = self.db.query("SELECT subnet, report, baseline FROM fabric_subnets ORDER BY subnet")
        return [(r[0], bytes(r[1]), bytes(r[2])) for r in rows]

    def set_isolated(self, port: str, since: float | None) -> None:
        if since is None:
            self.db.execute("DELETE FROM fabric_isolated WHERE port = ?", (port,))
        else:
            self.db.execute(
                "INSERT INTO fabric_isolated VALUES (?,?) ON CONFLICT (port) DO UPDATE SET since = excluded.since",
                (port, since),
            )

    def isolated_ports(self) -> list[tuple[str, float]]:
        return [(r[0], float(r[1])) for r in self.db.query("SELECT port, since FROM fabric_isolated ORDER BY port")]

    # --- events --------------------------------------------------------------------------------------------------

    def add_event(self, when: float, kind: str, entity: str, message: str, node: str = "", **attrs: Any) -> None:
        """An event of the control plane's own (an incident opened, an action taken)."""
        self.db.execute(
            "INSERT INTO events(agent, incarnation, seq, time, received, node, kind, entity, message, body) "
            "VALUES (?,?,?,?,?,?,?,?,?,?)",
            (CONTROL_AGENT, "-", 0, when, time.time(), node, kind, entity, message, json.dumps(attrs, default=str)),
        )

    def events(
        self, kind: str | None = None, node: str | None = None, limit: int = 100, agent: str | None = None
    ) -> list[dict[str, Any]]:
        """Newest first. `kind`, `node` and `agent` may each list several values, comma-separated."""
        either = {c: v.split(",") if v else None for c, v in (("kind", kind), ("node", node), ("agent", agent))}
        clause, args = where(either)  # kind=kmsg,link: either
        sql = f"SELECT id, agent, seq, time, received, node, kind, entity, message, body FROM events{clause}"
        sql += " ORDER BY id DESC LIMIT ?"
        keys = ("id", "agent", "seq", "time", "received", "node", "kind", "entity", "message", "attrs")
        rows = self.db.query(sql, [*args, limit])
        return [{**dict(zip(keys, r, strict=True)), "attrs": json.loads(r[9])} for r in rows]

    def count_events(self, agent: str | None = None) -> int:
        if agent:
            row = self.db.one("SELECT COUNT(*) FROM events WHERE agent = ?", (agent,))
        else:
            row = self.db.one("SELECT COUNT(*) FROM events")
        return int(row[0]) if row else 0
