"""Who may call what: 401 without a valid token, 403 with too small a role, reads open only on loopback, bodies
bounded before anything is read, and every refused change in the audit log: a row per kind of request written at
once, identical repeats as counts that are never lost, and a flood of different ones capped with what was dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.control.service import ControlPlane
from gpufleet.model.wire import MAX_BODY
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.server.app import create_app
from gpufleet.server.security import (
    REFUSAL_COUNT_ROWS_CAP,
    REFUSAL_FLUSH_S,
    REFUSAL_NEW_KINDS_CAP,
    Need,
    RefusalAudit,
    needs,
)
from gpufleet.state import Database
from tests import apiclient

SECRETS = {"viewer": "v-secret", "operator": "o-secret", "admin": "a-secret", "agent": "g-secret"}


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[role]}"}


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(Database(tmp_path / "state.db"), ObserveOnlyBackend(lambda: []))
    for role, secret in SECRETS.items():
        apiclient.grant(plane, secret, role, name=f"{role}-bot")
    yield plane
    plane.db.close()


def refusals(plane: ControlPlane) -> list[Any]:
    return [e for e in plane.store.audit_log.entries() if e.decision.startswith("refused")]


@pytest.mark.parametrize(
    ("method", "path", "local", "need"),
    [
        ("GET", "/api/v1/nodes", True, Need.nothing),
        ("GET", "/api/v1/nodes", False, Need.read),
        ("GET", "/healthz", False, Need.nothing),
        ("GET", "/", False, Need.nothing),
        ("GET", "/openapi.json", False, Need.nothing),
        ("POST", "/api/v1/ingest", True, Need.push),
        ("POST", "/api/v1/nodes/n1/cordon", True, Need.change),
        ("DELETE", "/api/v1/anything", True, Need.change),
        ("GET", "/api/v1/tokens", True, Need.admin),
        ("POST", "/api/v1/tokens", True, Need.admin),
    ],
)
def test_what_each_request_needs(method: str, path: str, local: bool, need: Need) -> None:
    assert needs(method, path, local) is need


def test_without_a_token_a_change_is_401_and_audited(plane: ControlPlane) -> None:
    client = apiclient.client(plane, secret=SECRETS["admin"])
    res = client.post("/api/v1/incidents/INC-000001/acknowledge")
    assert res.status_code == 401 and res.headers["www-authenticate"].startswith("Bearer")
    assert res.json() == {"error": "this call needs a token", "fix": "send Authorization: Bearer <token>"}
    (entry,) = refusals(plane)
    assert (entry.actor, entry.action, entry.target) == (
        "anonymous",
        "POST /api/v1/incidents/INC-000001/acknowledge",
        "/api/v1/incidents/INC-000001/acknowledge",
    )
    assert '"client": "127.0.0.1"' in entry.request


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer töken-ü", "Basic YWRtaW46YWRtaW4=", "Bearer ", "Bearer"])
def test_a_bad_or_foreign_token_is_401_never_500(plane: ControlPlane, header: str) -> None:
    res = apiclient.client(plane).post("/api/v1/nodes/n1/cordon", headers={"Authorization": header.encode()})
    assert res.status_code == 401 and "Traceback" not in res.text


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("agent", 403), ("operator", 404), ("admin", 404)])
def test_changes_need_operator_or_admin(plane: ControlPlane, role: str, status: int) -> None:
    # a node never heard of: 404 once authorised, so the role check is all that differs
    res = apiclient.client(plane).post("/api/v1/nodes/ghost/cordon", headers=bearer(role))
    assert res.status_code == status
    if status == 403:
        assert f"the {role} token '{role}-bot' may not do this" in res.json()["error"]
        (entry,) = refusals(plane)
        assert entry.actor == f"{role}-bot" and entry.decision.startswith("refused 403")


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("operator", 403), ("agent", 400), ("admin", 400)])
def test_only_agents_and_admins_push(plane: ControlPlane, role: str, status: int) -> None:
    res = apiclient.client(plane).post("/api/v1/ingest", content=b"{}", headers=bearer(role))
    assert res.status_code == status  # 400: let in, and the empty batch refused for what it is


def test_reads_need_a_reading_token_off_loopback(plane: ControlPlane) -> None:
    remote = apiclient.client(plane, remote="10.1.2.3")
    assert remote.get("/api/v1/nodes").status_code == 401
    assert remote.get("/api/v1/nodes", headers=bearer("agent")).status_code == 403
    assert remote.get("/api/v1/nodes", headers=bearer("viewer")).status_code == 200
    assert remote.get("/healthz").status_code == 200
    assert apiclient.client(plane).get("/api/v1/nodes").status_code == 200
    assert refusals(plane) == []  # refused reads are answered, not audited


def test_a_revoked_token_stops_working(plane: ControlPlane) -> None:
    tokens = apiclient.grant(plane, SECRETS["operator"], "operator")
    client = TestClient(create_app(plane, tokens=tokens), client=apiclient.LOOPBACK)
    assert client.post("/api/v1/nodes/ghost/cordon", headers=bearer("operator")).status_code == 404
    tokens.revoke("operator-bot")
    assert client.post("/api/v1/nodes/ghost/cordon", headers=bearer("operator")).status_code == 401


def test_an_oversized_body_is_refused_before_it_is_read_or_authenticated(plane: ControlPlane) -> None:
    client = apiclient.client(plane)
    res = client.post("/api/v1/ingest", headers={"Content-Length": str(50 * 1024 * 1024)}, content=b"x")
    assert res.status_code == 413 and str(MAX_BODY) in res.json()["error"]
    res = client.post("/api/v1/nodes/n1/cordon", content=b"x" * (2 * 1024 * 1024))
    assert res.status_code == 413
    assert client.post("/api/v1/ingest", headers={"Content-Length": "12abc"}, content=b"x").status_code == 413


def test_a_chunked_body_is_cut_at_the_limit(plane: ControlPlane) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"x" * 64 * 1024

    res = apiclient.client(plane).post("/api/v1/nodes/n1/cordon", headers=bearer("operator"), content=chunks())
    assert res.status_code == 413


def repeats(entry: Any) -> int:
    """How many identical refusals an audit row stands for beyond the first of its kind (0 for a first row)."""
    return int(json.loads(entry.request).get("repeats", 0))


def test_a_refused_token_call_is_not_hidden_behind_a_harmless_one(plane: ControlPlane) -> None:
    with TestClient(apiclient.app(plane, secret=SECRETS["admin"]), client=apiclient.LOOPBACK) as client:
        assert client.post("/api/v1/incidents/INC-000001/acknowledge").status_code == 401
        (first,) = refusals(plane)  # written at once, before any later refusal
        assert first.target == "/api/v1/incidents/INC-000001/acknowledge"
        for k in range(20):
            assert client.post("/api/v1/tokens", json={"name": "x", "role": "admin"}).status_code == 401
            if k == 0:  # the first of its kind is its own row at once, naming the path
                assert [e.target for e in refusals(plane)] == [first.target, "/api/v1/tokens"]
    # the server stopped: the repeats still held are written, whether a timer wrote some before or not
    tokens = [e for e in refusals(plane) if e.target == "/api/v1/tokens"]
    assert tokens[0].action == "POST /api/v1/tokens" and repeats(tokens[0]) == 0
    assert 1 + sum(repeats(e) for e in tokens) == 20
    assert tokens[-1].decision.endswith("identical requests from 127.0.0.1; 20 in all)")
    assert [e.target for e in refusals(plane)].count(first.target) == 1


def test_a_flood_of_identical_refusals_is_audited_as_counts(plane: ControlPlane) -> None:
    with TestClient(apiclient.app(plane), client=apiclient.LOOPBACK) as client:
        for _ in range(200):
            assert client.post("/api/v1/nodes/n1/drain").status_code == 401
        assert client.get("/healthz").status_code == 200  # still answering
    entries = refusals(plane)
    assert len(entries) < 200
    assert {e.target for e in entries} == {"/api/v1/nodes/n1/drain"}
    assert sum(repeats(e) or 1 for e in entries) == 200  # a first row stands for one, a count row for its count


class Rows:
    """An audit sink and a clock for the refusal audit alone."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.now = 1000.0

    def __call__(self, *row: str) -> None:
        self.rows.append(row)  # type: ignore[arg-type]

    def clock(self) -> float:
        return self.now


def test_repeats_are_written_within_the_interval_without_a_later_refusal() -> None:
    sink = Rows()
    audit = RefusalAudit(sink, sink.clock, timer_s=None)
    for _ in range(3):
        audit.refused(401, "this call needs a token", "POST", "/api/v1/tokens", "10.0.0.9", "")
    assert len(sink.rows) == 1 and sink.rows[0][2] == "/api/v1/tokens"
    audit.flush()  # what the timer does: nothing is due yet
    assert len(sink.rows) == 1
    sink.now += REFUSAL_FLUSH_S
    audit.flush()
    assert len(sink.rows) == 2
    assert sink.rows[1][3].endswith("(and 2 more identical requests from 10.0.0.9; 3 in all)")
    audit.close()
    assert len(sink.rows) == 2  # nothing more was held


def test_only_identical_requests_are_merged() -> None:
    sink = Rows()
    audit = RefusalAudit(sink, sink.clock, timer_s=None)
    why = "this call needs a token"
    audit.refused(401, why, "POST", "/api/v1/nodes/a/cordon", "10.0.0.9", "")
    audit.refused(401, why, "POST", "/api/v1/nodes/b/cordon", "10.0.0.9", "")  # another path
    audit.refused(401, why, "DELETE", "/api/v1/nodes/a/cordon", "10.0.0.9", "")  # another method
    audit.refused(401, why, "POST", "/api/v1/nodes/a/cordon", "10.0.0.8", "")  # another client
    audit.refused(401, "the token is not valid", "POST", "/api/v1/nodes/a/cordon", "10.0.0.9", "")  # another reason
    assert len(sink.rows) == 5
    audit.refused(401, why, "POST", "/api/v1/nodes/a/cordon", "10.0.0.9", "")
    assert len(sink.rows) == 5
    audit.close()
    assert len(sink.rows) == 6 and sink.rows[5][1] == "POST /api/v1/nodes/a/cordon"


def test_a_flood_of_different_refusals_is_capped_and_says_what_it_dropped() -> None:
    sink = Rows()
    audit = RefusalAudit(sink, sink.clock, timer_s=None)
    extra = 57
    for k in range(REFUSAL_NEW_KINDS_CAP + extra):
        audit.refused(401, "this call needs a token", "POST", f"/api/v1/nodes/n{k}/drain", "10.0.0.9", "")
    assert len(sink.rows) == REFUSAL_NEW_KINDS_CAP
    written = len(sink.rows)
    for _ in range(2):  # every kind repeats, twice over: its counts are capped too, held rather than lost
        for k in range(REFUSAL_NEW_KINDS_CAP):
            audit.refused(401, "this call needs a token", "POST", f"/api/v1/nodes/n{k}/drain", "10.0.0.9", "")
        sink.now += REFUSAL_FLUSH_S
        audit.flush()
        assert len(sink.rows) - written <= REFUSAL_COUNT_ROWS_CAP
    audit.close()  # the server stops: what was held is written whole
    dropped = [row for row in sink.rows if row[2] == "api"]
    assert len(dropped) == 1 and f"refused {extra} more requests not audited one by one" in dropped[0][3]
    assert "10.0.0.9 (57)" in dropped[0][3]
    counted = sum(json.loads(row[4]).get("repeats", 0) for row in sink.rows)
    assert counted == 2 * REFUSAL_NEW_KINDS_CAP


def test_tokens_are_kept_hashed(plane: ControlPlane, tmp_path: Path) -> None:
    plane.db.close()
    raw = (tmp_path / "state.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("state.db-*") if p.is_file()
    )
    assert all(secret.encode() not in raw for secret in SECRETS.values())
