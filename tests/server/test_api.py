"""The control plane's HTTP API: reads from what agents reported, authenticated pushes and changes, the audit log,
and clear errors for bad requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.model.wire import MSGPACK, encode
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests.apiclient import AUTH
from tests.apiclient import client as api_client
from tests.twins import door, small_twin


@pytest.fixture
def plane(tmp_path: Path) -> Any:
    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 30.0, node="n-001", gpu=4)])
    plane, fleet = door(twin, db=Database(tmp_path / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 90)
    plane.twin = twin
    return plane


def test_reads_show_only_what_agents_reported(plane: Any) -> None:
    client = api_client(plane)
    assert client.get("/healthz").json()["status"] == "ok"
    nodes = client.get("/api/v1/nodes").json()
    assert [n["name"] for n in nodes] == ["n-000", "n-001", "n-002"]
    assert nodes[1]["gpus_allocatable"] == 7 and nodes[1]["status"] == "Ready"
    lost = [g for g in client.get("/api/v1/gpus", params={"node": "n-001"}).json() if g["health"] == "lost"]
    assert [g["gpu"] for g in lost] == [4]
    summary = client.get("/api/v1/summary").json()
    assert summary["gpus"] == 24 and summary["gpus_lost"] == 1 and summary["jobs"]["Stalled"] == 1
    events = client.get("/api/v1/events", params={"kind": "kmsg"}).json()
    assert any("fallen off the bus" in e["message"] or "Xid" in e["message"] for e in events)
    detail = client.get("/api/v1/nodes/n-001").json()
    assert detail["incidents"][0]["cause"] == "gpu-lost"
    assert any("fallen off the bus" in line for line in detail["kernel_log"])
    affinity = detail["affinity"]  # as the node's agent reported it: the twin's DGX H100 layout
    assert affinity["source"] == "twin" and [g["numa_node"] for g in affinity["gpus"]] == [0] * 4 + [1] * 4
    first = affinity["nics"][0]["name"]
    assert affinity["gpus"][0]["nearest_nics"] == [first] and affinity["gpus"][0]["nic_links"][first] == "PIX"
    assert client.get("/api/v1/nodes/nope").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and "gpufleet" in page.text
    agents = client.get("/api/v1/agents").json()
    assert {a["node"] for a in agents} == {"n-000", "n-001", "n-002"}


def test_mutations_need_the_token_and_are_audited_with_their_result(plane: Any) -> None:
    client = api_client(plane)
    assert client.post("/api/v1/nodes/n-002/cordon").status_code == 401
    bad = client.post("/api/v1/nodes/n-002/cordon", headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401 and "not valid" in bad.json()["error"]
    assert client.post("/api/v1/nodes/n-002/cordon", headers=AUTH).status_code == 200
    assert plane.twin.cluster.node("n-002").unschedulable
    drained = client.post("/api/v1/nodes/n-001/drain", headers=AUTH).json()
    assert "stopped jobs: job" in drained["result"]
    assert "SchedulingDisabled" in client.get("/api/v1/nodes").json()[2]["status"]
    audit = client.get("/api/v1/audit").json()
    assert [(a["action"], a["actor"]) for a in audit[-2:]] == [("cordon", "admin"), ("drain", "admin")]
    assert client.post("/api/v1/nodes/nope/cordon", headers=AUTH).status_code == 404


def test_incidents_change_only_with_the_token_and_stay_across_a_restart(plane: Any, tmp_path: Path) -> None:
    client = api_client(plane)
    rows = client.get("/api/v1/incidents").json()
    assert [r["cause"] for r in rows] == ["gpu-lost"]
    row = rows[0]
    assert row["node"] == "n-001" and row["entity"]["index"] == 4 and 0 < row["age_s"] < 120
    assert any("job job hung" in e for e in row["effects"])
    assert client.post(f"/api/v1/incidents/{row['id']}/acknowledge").status_code == 401
    ok = client.post(f"/api/v1/incidents/{row['id']}/acknowledge", headers=AUTH)
    assert ok.json()["state"] == "acknowledged"
    bogus = client.get("/api/v1/incidents", params={"state": "bogus"})
    assert bogus.status_code == 422 and "query.state" in bogus.json()["error"]
    assert client.get(f"/api/v1/incidents/{row['id']}").json()["state"] == "acknowledged"
    assert client.get("/api/v1/incidents/INC-999999").status_code == 404


def test_the_ingest_door_takes_json_and_msgpack_and_refuses_bad_batches(plane: Any) -> None:
    from gpufleet.model.observe import SCHEMA_VERSION, Batch

    client = api_client(plane)
    batch = Batch(v=SCHEMA_VERSION, agent="edge-1", incarnation="abc", node="edge-1", sent=1.8e9)
    assert client.post("/api/v1/ingest", content=encode(batch)).status_code == 401
    ok = client.post("/api/v1/ingest", content=encode(batch), headers={**AUTH, "Content-Type": "application/json"})
    assert ok.status_code == 200 and ok.json() == {"acked": 0, "stored": 0, "duplicates": 0}
    packed = client.post("/api/v1/ingest", content=encode(batch, MSGPACK), headers={**AUTH, "Content-Type": MSGPACK})
    assert packed.status_code == 200
    garbage = client.post("/api/v1/ingest", content=b"{not json", headers=AUTH)
    assert garbage.status_code == 400 and "not valid JSON" in garbage.json()["error"]
    assert "docs/wire.md" in client.post("/api/v1/ingest", content=b'{"v": 1}', headers=AUTH).json()["fix"]


@pytest.mark.parametrize("limit", ["0", "-1", "5e22", "10001", "ten"])
def test_a_bad_query_parameter_is_a_422_naming_it(plane: Any, limit: str) -> None:
    res = api_client(plane).get("/api/v1/events", params={"limit": limit})
    assert res.status_code == 422 and "query.limit" in res.json()["error"]


def test_healthz_says_unhealthy_when_a_loop_has_died(plane: Any) -> None:
    client = api_client(plane, [lambda: "the twin is not running"])
    res = client.get("/healthz")
    assert res.status_code == 503 and res.json()["problems"] == ["the twin is not running"]
    plane.loop_error = "RuntimeError: boom"
    assert "control loop: RuntimeError: boom" in api_client(plane).get("/healthz").json()["problems"]


def test_nccl_compare_findings_open_a_collective_slow_incident(plane: Any) -> None:
    client = api_client(plane)
    body = {
        "source": "all_reduce_perf-2node.txt",
        "findings": [
            {"kind": "nccl_rail_missing", "severity": "critical", "message": "about half the busbw", "ratio": 0.5}
        ],
    }
    assert client.post("/api/v1/nccl-findings", json=body).status_code == 401
    res = client.post("/api/v1/nccl-findings", json=body, headers=AUTH)
    assert res.status_code == 200 and len(res.json()["incidents"]) == 1
    row = client.get(f"/api/v1/incidents/{res.json()['incidents'][0]}").json()
    assert row["cause"] == "collective-slow" and row["entity"]["name"] == "all_reduce_perf-2node.txt"
    bad = client.post(
        "/api/v1/nccl-findings",
        json={"source": "x", "findings": [{"kind": "k", "severity": "huge", "message": "m"}]},
        headers=AUTH,
    )
    assert bad.status_code == 422 and "severity" in bad.json()["error"]


def test_a_person_may_uncordon_a_node_an_incident_holds_and_it_is_audited(plane: Any) -> None:
    client = api_client(plane)
    plane.backend.cordon("n-002", "inc-9: uncorrectable ECC error", "inc-9")
    result = client.post("/api/v1/nodes/n-002/uncordon", headers=AUTH).json()["result"]
    assert result == "node n-002 uncordoned by a person; cleared gpufleet's cordon for inc-9"
    assert not plane.twin.cluster.node("n-002").unschedulable and plane.twin.cordon_holders("n-002") == ()
    last = client.get("/api/v1/audit").json()[-1]
    assert (last["action"], last["actor"], last["target"]) == ("uncordon", "admin", "node/n-002")
    assert "cleared gpufleet's cordon for inc-9" in last["decision"]
