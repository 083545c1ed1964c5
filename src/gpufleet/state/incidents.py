"""Incidents as the database keeps them: one row per incident, its whole body as JSON, ids never reused."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gpufleet.state.db import Database, where

ID_PREFIX = "INC-"

# An incident's state only moves forward; with several writers (control-plane replicas, a person acknowledging
# through one while the leader updates the count through another) the furthest state stands.
_RANK = "CASE {} WHEN 'open' THEN 0 WHEN 'acknowledged' THEN 1 WHEN 'mitigated' THEN 2 ELSE 3 END"
_FORWARD_STATE = (
    f"CASE WHEN {_RANK.format('incidents.state')} > {_RANK.format('excluded.state')} "
    "THEN incidents.state ELSE excluded.state END"
)


class IncidentTable:
    def __init__(self, db: Database) -> None:
        self.db = db

    def next_number(self) -> int:
        """The number after every incident id this database has ever given out."""
        stored = self.db.get_meta("incident_counter")  # kept as the next number to give
        # only ids that are INC- and digits (a file's incident may be named anything); 18 digits fit in 64 bits
        row = self.db.one(
            "SELECT MAX(CAST(SUBSTR(id, 5) AS BIGINT)) FROM incidents WHERE id LIKE 'INC-%' "
            "AND LENGTH(id) BETWEEN 5 AND 22 AND TRIM(SUBSTR(id, 5), '0123456789') = ''"
        )
        highest = int(row[0] or 0) if row else 0
        return max(int(stored or 1), highest + 1)

    def save(self, bodies: Iterable[dict[str, Any]], counter: int | None = None) -> None:
        """Write incidents (as `incident_to_dict` makes them), and the next id number, in one transaction."""
        rows = [
            (
                b["id"],
                b["cause"],
                _entity_text(b["entity"]),
                b["entity"].get("node", ""),
                b["severity"],
                b["state"],
                b["first_seen"],
                b["last_seen"],
                b["count"],
                json.dumps(b, default=str),
            )
            for b in bodies
        ]
        with self.db.transaction():
            self.db.executemany(
                "INSERT INTO incidents VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
                "cause = excluded.cause, entity = excluded.entity, node = excluded.node, severity = excluded.severity, "
                f"state = {_FORWARD_STATE}, first_seen = excluded.first_seen, last_seen = excluded.last_seen, "
                "count = excluded.count, body = excluded.body",
                rows,
            )
            if counter is not None:
                self.db.set_meta("incident_counter", str(counter))

    def states(self, ids: list[str]) -> dict[str, str]:
        """The stored state of each of these incidents (another replica may have changed it)."""
        out: dict[str, str] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = self.db.query(f"SELECT id, state FROM incidents WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
            out.update({str(r[0]): str(r[1]) for r in rows})
        return out

    def get(self, incident_id: str) -> dict[str, Any] | None:
        row = self.db.one("SELECT body, state FROM incidents WHERE id = ?", (incident_id,))
        return None if row is None else _body(row)

    def list(
        self, state: str | None = None, node: str | None = None, limit: int = 500, active_only: bool = False
    ) -> list[dict[str, Any]]:
        clause, args = where({"state": state, "node": node}, *(["state != 'resolved'"] if active_only else []))
        sql = f"SELECT body, state FROM incidents{clause} ORDER BY first_seen DESC, id DESC LIMIT ?"
        rows = self.db.query(sql, [*args, limit])
        return [_body(r) for r in rows]


def _body(row: tuple[Any, ...]) -> dict[str, Any]:
    """The stored body, with the state column (which may be further on than the body's last writer knew)."""
    body = dict(json.loads(row[0]))
    body["state"] = row[1]
    return body


def _entity_text(entity: dict[str, Any]) -> str:
    parts = [entity.get("kind", ""), entity.get("node") or entity.get("name", "")]
    if entity.get("index") is not None:
        parts.append(str(entity["index"]))
    if entity.get("name") and entity.get("node"):
        parts.append(entity["name"])
    return "/".join(str(p) for p in parts if p != "")
