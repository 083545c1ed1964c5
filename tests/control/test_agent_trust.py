"""What an agent token may push, over the real API: a token bound to a node pushes for that node only, a node with a
token of its own takes no other agent token's pushes, a stream takes pushes only from the token that opened it, and
a stream's numbers never jump far ahead. The probe's hijack (a push at seq 2^53-1 under a victim's incarnation that
made every later record of the real agent a duplicate) is refused, and the real agent goes on being heard."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.errors import ForbiddenError, UserError
from gpufleet.model.observe import Record
from gpufleet.model.wire import JSON, decode_ack, encode
from gpufleet.state import Database
from gpufleet.state.tokens import TokenStore
from tests import apiclient
from tests.control.helpers import T0, Clock, batch, lost_gpu, plane_at


def _secrets(tokens: TokenStore) -> dict[str, str]:
    made = {
        "n1": tokens.create("agent-n1", "agent", "test", node="n1")[1],
        "n2": tokens.create("agent-n2", "agent", "test", node="n2")[1],
        "fleet": tokens.create("daemonset", "agent", "test")[1],  # one token shared by every node's agent
        "viewer": tokens.create("dash", "viewer", "test")[1],
    }
    return made


@pytest.fixture
def door(state_db: Database) -> tuple[Any, TestClient, dict[str, str]]:
    plane = plane_at(state_db, Clock())
    client = apiclient.client(plane, remote="10.0.0.9")
    return plane, client, _secrets(TokenStore(state_db))


def push(client: TestClient, secret: str, node: str, seqs: list[int], incarnation: str = "i1") -> Any:
    records = [Record(s, lost_gpu(node, T0 + s % 1000)) for s in seqs]
    body = encode(batch(node, records, incarnation=incarnation))
    return client.post(
        "/api/v1/ingest", content=body, headers={"Content-Type": JSON, "Authorization": f"Bearer {secret}"}
    )


def test_a_bound_token_pushes_for_its_own_node_only(door: tuple[Any, TestClient, dict[str, str]]) -> None:
    plane, client, secrets = door
    assert push(client, secrets["n1"], "n1", [1]).status_code == 200
    refused = push(client, secrets["n1"], "n2", [1])
    assert refused.status_code == 403
    assert "bound to node n1; it may not push for n2" in refused.json()["error"]
    assert "n2" not in plane.fleet.nodes


def test_a_node_with_its_own_token_takes_no_other_agent_token(door: tuple[Any, TestClient, dict[str, str]]) -> None:
    _, client, secrets = door
    assert push(client, secrets["fleet"], "n3", [1]).status_code == 200  # a node without a token of its own
    refused = push(client, secrets["fleet"], "n1", [1])
    assert refused.status_code == 403 and "node n1 has an agent token of its own" in refused.json()["error"]


def test_the_hijack_is_refused_and_the_real_agent_is_still_heard(door: tuple[Any, TestClient, dict[str, str]]) -> None:
    plane, client, secrets = door
    assert decode_ack(push(client, secrets["fleet"], "n3", [1, 2]).content).acked == 2
    # another holder of an agent token, who read the stream's incarnation, pushes far ahead under it
    hijack = push(client, secrets["n2"], "n3", [2**53 - 1])
    assert hijack.status_code == 403
    # the same from the stream's own token is a jump no agent makes
    jump = push(client, secrets["fleet"], "n3", [2**53 - 1])
    assert jump.status_code == 400 and "starts at 9007199254740991" in jump.json()["error"]
    ack = decode_ack(push(client, secrets["fleet"], "n3", [3]).content)
    assert (ack.acked, ack.stored, ack.duplicates) == (3, 1, 0)  # the real agent's next record is taken, not dropped
    assert plane.store.stream_position("n3", "i1") == (3, plane.store.stream_owners()[("n3", "i1")])


def test_a_stream_takes_pushes_only_from_the_token_that_opened_it(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    tokens = TokenStore(state_db)
    first, _ = tokens.create("one", "agent", "test")
    second, _ = tokens.create("two", "agent", "test")
    plane.ingest(batch("n5", [Record(1, lost_gpu("n5", T0))]), first)
    with pytest.raises(ForbiddenError, match="opened with another token"):
        plane.ingest(batch("n5", [Record(2, lost_gpu("n5", T0))]), second)
    restarted = plane_at(state_db, Clock())  # the owner is kept in the state database
    with pytest.raises(ForbiddenError):
        restarted.ingest(batch("n5", [Record(2, lost_gpu("n5", T0))]), second)
    assert restarted.ingest(batch("n5", [Record(2, lost_gpu("n5", T0))]), first).stored == 1


def test_a_jump_is_refused_for_every_pusher_and_leaves_the_stream_where_it_was(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    plane.ingest(batch("n6", [Record(1, lost_gpu("n6", T0))]))
    with pytest.raises(UserError, match="records later"):
        plane.ingest(batch("n6", [Record(5_000_000, lost_gpu("n6", T0))]))
    assert plane.store.stream_position("n6", "inc-1")[0] == 1


def test_stream_incarnations_are_shown_to_admins_only(door: tuple[Any, TestClient, dict[str, str]]) -> None:
    _, client, secrets = door
    push(client, secrets["n1"], "n1", [1], incarnation="victim-incarnation")
    as_viewer = client.get("/api/v1/agents", headers={"Authorization": f"Bearer {secrets['viewer']}"}).json()
    as_admin = client.get("/api/v1/agents", headers=apiclient.AUTH).json()
    assert [a["incarnation"] for a in as_viewer] == [None]
    assert [a["incarnation"] for a in as_admin] == ["victim-incarnation"]


def test_only_an_agent_token_is_bound_to_a_node(state_db: Database) -> None:
    tokens = TokenStore(state_db)
    with pytest.raises(UserError, match="binds an agent token"):
        tokens.create("ops", "operator", "test", node="n1")
    with pytest.raises(UserError, match="bad node name"):
        tokens.create("bad", "agent", "test", node="../n1")
    made, _ = tokens.create("ok", "agent", "test", node="dgx-001")
    assert tokens.get("ok") == made and made.node == "dgx-001" and tokens.node_has_own_token("dgx-001")
    tokens.revoke("ok")
    assert not tokens.node_has_own_token("dgx-001")
