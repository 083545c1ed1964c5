"""Node actions through the one door, over the real API: queued per node, handed only to that node's own agent (a
token bound to it) that lists the kind, each result taken once and acknowledged, refusals audited with why."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.model.actions import ActionResult, NodeAction, NodeActionKind, Outcome
from gpufleet.model.wire import JSON, decode_ack, encode
from gpufleet.state import Database
from gpufleet.state.node_actions import NodeActionTable
from gpufleet.state.tokens import TokenStore
from tests import apiclient
from tests.control.helpers import T0, Clock, batch, plane_at

ALL = list(NodeActionKind)


@pytest.fixture
def door(state_db: Database) -> tuple[Any, TestClient, dict[str, str]]:
    plane = plane_at(state_db, Clock())
    client = apiclient.client(plane, remote="10.0.0.9")
    tokens = TokenStore(state_db)
    secrets = {
        "n1": tokens.create("agent-n1", "agent", "test", node="n1")[1],
        "fleet": tokens.create("daemonset", "agent", "test")[1],
    }
    return plane, client, secrets


def push(client: TestClient, secret: str, node: str, **kw: Any) -> Any:
    body = encode(batch(node, [], **kw))
    resp = client.post(
        "/api/v1/ingest", content=body, headers={"Content-Type": JSON, "Authorization": f"Bearer {secret}"}
    )
    assert resp.status_code == 200, resp.text
    return decode_ack(resp.content)


def reset(node: str = "n1", action_id: str = "INC-7.reset", deadline: float = T0 + 900) -> NodeAction:
    return NodeAction(action_id, NodeActionKind.reset_gpu, node, deadline, incident="INC-7", gpu=3)


def test_an_action_goes_to_its_nodes_agent_until_its_result_comes(door: Any) -> None:
    plane, client, secrets = door
    plane.node_actions.request(reset(), "night-shift")  # a person's request is audited as queued
    first = push(client, secrets["n1"], "n1", can=ALL)
    assert [a.id for a in first.actions] == ["INC-7.reset"] and first.actions[0].gpu == 3
    again = push(client, secrets["n1"], "n1", can=ALL)  # no result yet: handed again (the agent knows it by id)
    assert [a.id for a in again.actions] == ["INC-7.reset"]
    done = ActionResult("INC-7.reset", Outcome.done, "nvidia-smi -r -i 3 exited 0", T0, T0 + 5, "GPU reset.")
    ack = push(client, secrets["n1"], "n1", can=ALL, results=[done])
    assert ack.results == ["INC-7.reset"] and ack.actions == []
    row = plane.node_actions.status("INC-7.reset")
    assert row.state == "done" and row.result.output == "GPU reset."
    # the same result sent again (its ack was lost) is acknowledged and changes nothing
    assert push(client, secrets["n1"], "n1", can=ALL, results=[done]).results == ["INC-7.reset"]
    audit = [(e.action, e.decision) for e in plane.store.audit_log.entries(incident="INC-7")]
    assert audit == [("agent-reset-gpu", "queued"), ("agent-reset-gpu", "done")]


def test_another_nodes_push_never_gets_the_action(door: Any) -> None:
    plane, client, secrets = door
    plane.node_actions.request(reset(), "remediation")
    assert push(client, secrets["fleet"], "n2", can=ALL).actions == []
    assert plane.node_actions.status("INC-7.reset").open


def test_a_shared_agent_token_is_refused_node_actions(door: Any, state_db: Database) -> None:
    plane, client, secrets = door
    plane.node_actions.request(reset(node="n3", action_id="INC-8.reset"), "remediation")
    ack = push(client, secrets["fleet"], "n3", can=ALL)
    assert ack.actions == []
    row = plane.node_actions.status("INC-8.reset")
    assert row.state == "refused"
    assert "not bound to a node" in row.result.detail and "--node n3" in row.result.detail


def test_an_agent_older_than_node_actions_or_without_the_kind_is_refused(door: Any) -> None:
    plane, client, secrets = door
    plane.node_actions.request(reset(), "remediation")
    assert push(client, secrets["n1"], "n1").actions == []  # lists no kinds: it predates node actions
    row = plane.node_actions.status("INC-7.reset")
    assert row.state == "unsupported" and "predates node actions" in row.result.detail
    plane.node_actions.request(reset(action_id="INC-7.reset#2"), "remediation")
    assert push(client, secrets["n1"], "n1", can=[NodeActionKind.diag]).actions == []
    row = plane.node_actions.status("INC-7.reset#2")
    assert row.state == "unsupported" and "does not carry out reset-gpu (it carries out: diag)" in row.result.detail


def test_an_action_past_its_deadline_expires_unbegun(door: Any) -> None:
    plane, client, secrets = door
    plane.node_actions.request(reset(deadline=T0 - 1), "remediation")
    assert push(client, secrets["n1"], "n1", can=ALL).actions == []
    assert plane.node_actions.status("INC-7.reset").state == "expired"


def test_the_queue_outlives_the_control_plane(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    plane.node_actions.request(reset(), "remediation")
    plane.ingest(batch("n1", [], can=ALL))  # dispatched once, then the control plane stops
    again = plane_at(state_db, clock)
    ack = again.ingest(batch("n1", [], can=ALL))
    assert [a.id for a in ack.actions] == ["INC-7.reset"]
    assert NodeActionTable(state_db).get("INC-7.reset").dispatched is not None


def test_queueing_an_id_again_finds_the_first(state_db: Database) -> None:
    table = NodeActionTable(state_db)
    first = table.add(reset(), "remediation", T0)
    second = table.add(reset(deadline=T0 + 5), "someone", T0 + 1)
    assert second == first
    result = ActionResult("INC-7.reset", Outcome.done, "ok")
    assert table.finish(result, T0 + 2) and not table.finish(result, T0 + 3)
    assert table.open_for("n1") == [] and table.has_open() == set()


def test_an_action_another_replica_queued_is_found_by_reading_back_in_lock_order(
    door: Any, state_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # queued straight into the shared table (as another replica would): this plane learns of it only when it reads
    # the waiting nodes back. An ingest tells the queue what the agent carries out while it holds the database's
    # transaction, so the read-back must not hold the queue's lock while it waits for the database (the suite's
    # lock-order check fails the test if it does)
    from gpufleet.control import node_actions

    _, client, secrets = door
    NodeActionTable(state_db).add(reset(), "other-replica", T0)
    assert push(client, secrets["n1"], "n1", can=ALL).actions == []  # read back at most every REFRESH_S
    monkeypatch.setattr(node_actions, "REFRESH_S", 0.0)
    assert [a.id for a in push(client, secrets["n1"], "n1", can=ALL).actions] == ["INC-7.reset"]
