"""Node actions through the API: an operator asks a node's agent to act (checked, queued, audited), the incident and
`GET /api/v1/actions` show what the agent did and its output; where the backend cannot reset a GPU, the reset goes
to the node's agent."""

from __future__ import annotations

from typing import Any

from gpufleet.model.actions import ActionResult, NodeActionKind, Outcome
from gpufleet.state import Database
from tests import apiclient
from tests.control.helpers import Clock, batch, inventory, plane_at

ALL = list(NodeActionKind)


def heard(plane: Any, node: str = "n1", **kw: Any) -> Any:
    return plane.ingest(batch(node, [], inventory=inventory(node), **kw))


def test_an_operator_queues_a_reboot_for_the_nodes_agent(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    client = apiclient.client(plane)
    heard(plane, can=ALL)
    resp = client.post("/api/v1/nodes/n1/actions", json={"kind": "reboot-node", "reason": "kernel update"},
                       headers=apiclient.AUTH)  # fmt: skip
    assert resp.status_code == 200, resp.text
    queued = resp.json()
    assert queued["state"] == "queued" and queued["result"] == f"queued reboot on n1 as {queued['id']}"
    [handed] = heard(plane, can=ALL).actions
    assert handed.id == queued["id"] and handed.reason == "kernel update"
    heard(plane, can=ALL, results=[ActionResult(handed.id, Outcome.done, "n1 rebooted", output="bye")])
    [row] = client.get("/api/v1/actions", params={"node": "n1"}).json()
    assert row["state"] == "done" and row["output"] == "bye" and row["requested_by"] == "admin"


def test_a_dry_run_checks_and_queues_nothing(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    client = apiclient.client(plane)
    heard(plane, can=ALL)
    body = {"kind": "power-cap", "gpu": 2, "fraction": 0.8, "dryRun": True}
    resp = client.post("/api/v1/nodes/n1/actions", json=body, headers=apiclient.AUTH)
    assert resp.json()["state"] == "would" and client.get("/api/v1/actions").json() == []


def test_a_node_whose_agent_cannot_is_a_clear_error(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    client = apiclient.client(plane)
    heard(plane, can=[NodeActionKind.diag])
    resp = client.post("/api/v1/nodes/n1/actions", json={"kind": "reset-gpu", "gpu": 1}, headers=apiclient.AUTH)
    assert resp.status_code == 400 and "does not carry out reset-gpu" in resp.json()["error"]
    bad = client.post("/api/v1/nodes/n1/actions", json={"kind": "reset-gpu", "gpu": 12}, headers=apiclient.AUTH)
    assert bad.status_code == 404 and "no GPU 12" in bad.json()["error"]
    wrong = client.post("/api/v1/nodes/n1/actions", json={"kind": "format-disk"}, headers=apiclient.AUTH)
    assert wrong.status_code == 422 and "kind" in wrong.json()["error"]


def test_a_reset_the_backend_cannot_do_goes_to_the_agent(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())  # its backend only observes: it has no GPU reset
    client = apiclient.client(plane)
    heard(plane, can=ALL)
    resp = client.post("/api/v1/nodes/n1/gpus/3/reset", json={"reason": "stuck"}, headers=apiclient.AUTH)
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"].startswith("queued reset GPU 3 on n1 as manual-")
    [handed] = heard(plane, can=ALL).actions
    assert (handed.kind, handed.gpu) == (NodeActionKind.reset_gpu, 3)


def test_changes_need_an_operator(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    apiclient.grant(plane, "viewer-secret", role="viewer")
    client = apiclient.client(plane, remote="10.1.1.1")
    heard(plane, can=ALL)
    resp = client.post("/api/v1/nodes/n1/actions", json={"kind": "reboot-node"},
                       headers={"Authorization": "Bearer viewer-secret"})  # fmt: skip
    assert resp.status_code == 403
