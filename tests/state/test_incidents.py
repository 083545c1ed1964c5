"""Incidents as stored, on both engines: save replaces a row, get and list (filters, order, limit), and numbers
that are never given out twice, across restarts."""

from __future__ import annotations

from typing import Any

from gpufleet.state import Database, IncidentTable
from tests.pg import StateTarget


def body(number: int, *, node: str = "n1", state: str = "open", first_seen: float = 0.0, **kw: Any) -> dict[str, Any]:
    return {
        "id": f"INC-{number:06d}",
        "cause": "gpu-lost",
        "entity": {"kind": "gpu", "node": node, "index": 3},
        "severity": "critical",
        "state": state,
        "first_seen": first_seen or 1_800_000_000.0 + number,
        "last_seen": 1_800_000_100.5,
        "count": 1,
        **kw,
    }


def test_save_get_and_list(state_db: Database) -> None:
    table = IncidentTable(state_db)
    table.save([body(1), body(2, node="n2"), body(3, state="resolved")])
    assert table.get("INC-000002") == body(2, node="n2")
    assert table.get("INC-999999") is None
    assert [b["id"] for b in table.list()] == ["INC-000003", "INC-000002", "INC-000001"]  # newest first
    assert [b["id"] for b in table.list(node="n2")] == ["INC-000002"]
    assert [b["id"] for b in table.list(state="resolved")] == ["INC-000003"]
    assert [b["id"] for b in table.list(active_only=True)] == ["INC-000002", "INC-000001"]
    assert [b["id"] for b in table.list(limit=1)] == ["INC-000003"]


def test_saving_again_replaces_the_row(state_db: Database) -> None:
    table = IncidentTable(state_db)
    table.save([body(1)])
    table.save([body(1, state="resolved", count=4)])
    (stored,) = table.list()
    assert stored["state"] == "resolved" and stored["count"] == 4
    assert table.list(state="open") == []  # the indexed column changed with the body


def test_numbers_are_never_reused(state: StateTarget) -> None:
    db = state.open()
    table = IncidentTable(db)
    assert table.next_number() == 1
    table.save([body(1), body(7)], counter=8)
    assert table.next_number() == 8
    table.save([body(12)])  # the highest id wins over a stale counter
    assert table.next_number() == 13
    table.save([{**body(0), "id": "INC-x99"}, {**body(0), "id": "gpu-xid:n-000:0:"}])  # ids from files
    assert table.next_number() == 13
    db.close()
    assert IncidentTable(state.open()).next_number() == 13
