"""The control plane's API: reads, authenticated writes, durable events and audit."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.control.runner import TwinRunner
from gpufleet.control.store import StateStore
from gpufleet.server.app import create_app
from gpufleet.sim.faults import InjectedFault
from gpufleet.spec.scenario_spec import FaultType
from tests.twins import TwinFactory

TOKEN = "s3cret-token"


@pytest.fixture
def runner(make_twin: TwinFactory, tmp_path: Path) -> TwinRunner:
    twin = make_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 30.0, node="n-001", gpu=4)])
    store = StateStore(tmp_path / "state.db")
    runner = TwinRunner(twin, store)
    for _ in range(60):  # step by hand: no background thread, deterministic
        runner.act(lambda t: t.step())
    return runner


def test_reads(runner: TwinRunner) -> None:
    client = TestClient(create_app(runner, TOKEN))
    assert client.get("/healthz").json()["status"] == "ok"
    nodes = client.get("/api/v1/nodes").json()
    assert [n["name"] for n in nodes] == ["n-000", "n-001", "n-002"]
    assert nodes[1]["gpus_allocatable"] == 7
    summary = client.get("/api/v1/summary").json()
    assert summary["gpus"] == 24 and summary["gpus_lost"] == 1 and summary["jobs"]["Hung"] == 1
    events = client.get("/api/v1/events", params={"kind": "kmsg"}).json()
    assert any("fallen off the bus" in e["message"] for e in events)
    assert client.get("/api/v1/nodes/nope").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and "gpufleet" in page.text


def test_mutations_need_the_token_and_are_audited(runner: TwinRunner) -> None:
    client = TestClient(create_app(runner, TOKEN))
    assert client.post("/api/v1/nodes/n-002/cordon").status_code == 401
    bad = client.post("/api/v1/nodes/n-002/cordon", headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401 and "not valid" in bad.json()["error"]
    ok = client.post("/api/v1/nodes/n-002/cordon", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    assert runner.twin.cluster.node("n-002").unschedulable
    drained = client.post("/api/v1/nodes/n-001/drain", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert drained["result"] == {"stopped_jobs": ["job"]}
    audit = client.get("/api/v1/audit").json()
    assert [a["action"] for a in audit] == ["drain", "cordon"]


def test_events_survive_a_restart(runner: TwinRunner, tmp_path: Path) -> None:
    count = runner.store.count_events()
    assert count > 0
    runner.store.close()
    again = StateStore(tmp_path / "state.db")
    assert again.count_events() == count
    assert again.events("kmsg")[0]["kind"] == "kmsg"


def test_bad_query_is_a_clear_400(runner: TwinRunner) -> None:
    client = TestClient(create_app(runner, TOKEN))
    res = client.get("/api/v1/events", params={"limit": 0})
    assert res.status_code == 400 and "limit" in res.json()["error"]


def test_incidents_are_listed_durable_and_need_the_token_to_change(make_twin: TwinFactory, tmp_path: Path) -> None:
    from gpufleet.control.loop import HealthLoop

    twin = make_twin(faults=[InjectedFault(0, FaultType.xid, 10.0, node="n-000", gpu=2, code=79)])
    store = StateStore(tmp_path / "s.db")
    health = HealthLoop(twin, store, "dry-run", tmp_path)
    runner = TwinRunner(twin, store, on_tick=health.tick)
    for _ in range(90):
        runner.act(lambda t: (t.step(), health.tick()))
    client = TestClient(create_app(runner, TOKEN, health))
    rows = client.get("/api/v1/incidents").json()
    assert [r["cause"] for r in rows] == ["gpu-lost"]
    assert any("job job hung" in e for e in rows[0]["effects"])
    incident_id = rows[0]["id"]
    assert client.post(f"/api/v1/incidents/{incident_id}/acknowledge").status_code == 401
    ok = client.post(f"/api/v1/incidents/{incident_id}/acknowledge", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.json()["state"] == "acknowledged"
    assert client.get("/api/v1/incidents", params={"state": "bogus"}).status_code == 400
    store.close()
    again = StateStore(tmp_path / "s.db")
    assert again.incidents()[0]["state"] == "acknowledged"  # kept across a restart
    summary = client.get("/api/v1/summary").json()
    assert summary["incidents"][0]["cause"] == "gpu-lost"


def test_nccl_compare_findings_open_a_collective_slow_incident(make_twin: TwinFactory, tmp_path: Path) -> None:
    from gpufleet.control.loop import HealthLoop

    twin = make_twin()
    store = StateStore(tmp_path / "s.db")
    health = HealthLoop(twin, store, "off", tmp_path)
    client = TestClient(create_app(TwinRunner(twin, store, on_tick=health.tick), TOKEN, health))
    body = {
        "source": "all_reduce_perf-2node.txt",
        "findings": [
            {
                "kind": "nccl_rail_missing",
                "severity": "critical",
                "message": "about half the expected busbw",
                "ratio": 0.5,
            }
        ],
    }
    assert client.post("/api/v1/nccl-findings", json=body).status_code == 401
    res = client.post("/api/v1/nccl-findings", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert res.status_code == 200 and len(res.json()["incidents"]) == 1
    (row,) = client.get("/api/v1/incidents").json()
    assert row["cause"] == "collective-slow" and row["entity"] == "job/all_reduce_perf-2node.txt"
    bad = client.post(
        "/api/v1/nccl-findings",
        json={"source": "x", "findings": [{"kind": "k", "severity": "huge", "message": "m"}]},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert bad.status_code == 422 and "severity" in bad.json()["error"]
