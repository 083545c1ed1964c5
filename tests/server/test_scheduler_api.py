"""The scheduler view through the one door: an agent that watches the workload manager pushes a SchedulerReport in
its batch (/api/v1/ingest, agent token), and /api/v1/scheduler answers per manager with its pending work
longest-waiting first and its queues' use of quota; the latest report per manager wins, an old one is stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.control.service import ControlPlane
from gpufleet.model.observe import SCHEMA_VERSION, Batch, PendingWork, QueueUse, SchedulerReport
from gpufleet.model.wire import encode
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from tests import apiclient

T0 = 1_795_161_600.0
AGENT = "agent-push-secret"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def plane(tmp_path: Path, clock: Clock) -> ControlPlane:
    plane = ControlPlane(Database(tmp_path / "state.db"), ObserveOnlyBackend(lambda: []), clock=clock)
    apiclient.grant(plane, AGENT, role="agent", name="login-agent")
    return plane


def report(time: float, manager: str = "slurm") -> SchedulerReport:
    return SchedulerReport(
        manager=manager,
        time=time,
        pending=[
            PendingWork(name="2 wrap", queue="gpu", gpus=1, since=T0 - 60, reason="Priority", message="behind"),
            PendingWork(name="9 unknown-start", queue="gpu", gpus=2, reason="None"),
            PendingWork(
                name="1 pretrain",
                queue="gpu",
                namespace="research",
                gpus=8,
                since=T0 - 3600,
                reason="Resources",
                message="waiting for resources",
                priority=4294901755,
            ),
        ],
        queues=[
            QueueUse(name="gpu", gpus_used=24, gpus_pending=11, quota=32, pending=3, running=3),
            QueueUse(name="debug", gpus_used=0, quota=None),
        ],
    )


def push(client: Any, rep: SchedulerReport, node: str = "login-1") -> Any:
    batch = Batch(v=SCHEMA_VERSION, agent=node, incarnation="i1", node=node, sent=rep.time, scheduler=rep)
    headers = {"Authorization": f"Bearer {AGENT}", "Content-Type": "application/json"}
    return client.post("/api/v1/ingest", content=encode(batch), headers=headers)


def test_a_pushed_report_reads_back_longest_waiting_first(plane: ControlPlane, clock: Clock) -> None:
    client = apiclient.client(plane)
    assert client.get("/api/v1/scheduler").json() == {"time": T0, "managers": []}
    assert push(client, report(T0 - 5)).status_code == 200
    clock.now = T0 + 10
    view = apiclient.client(plane).get("/api/v1/scheduler").json()  # a new app: nothing cached
    assert view["time"] == T0 + 10
    (slurm,) = view["managers"]
    assert (slurm["manager"], slurm["node"], slurm["age_s"], slurm["stale"]) == ("slurm", "login-1", 15.0, False)
    assert (slurm["pending_count"], slurm["gpus_pending"]) == (3, 11)
    assert [p["name"] for p in slurm["pending"]] == ["1 pretrain", "2 wrap", "9 unknown-start"]
    first = slurm["pending"][0]
    assert first == {
        "manager": "slurm",
        "name": "1 pretrain",
        "queue": "gpu",
        "namespace": "research",
        "gpus": 8,
        "since": T0 - 3600,
        "waiting_s": 3610.0,
        "reason": "Resources",
        "message": "waiting for resources",
        "priority": 4294901755,
    }
    assert slurm["pending"][2]["waiting_s"] is None and slurm["pending"][2]["since"] is None
    debug, gpu = slurm["queues"]
    assert (gpu["name"], gpu["use_pct"], gpu["quota"], gpu["gpus_pending"]) == ("gpu", 75.0, 32, 11)
    assert (debug["name"], debug["quota"], debug["use_pct"]) == ("debug", None, None)


def test_the_latest_report_per_manager_wins_and_an_old_one_is_stale(plane: ControlPlane, clock: Clock) -> None:
    client = apiclient.client(plane)
    push(client, report(T0 - 5))
    push(client, report(T0 - 1, manager="kubernetes"), node="cp-0")
    later = SchedulerReport(manager="slurm", time=T0, queues=[QueueUse(name="gpu", gpus_used=32, quota=32)])
    assert push(client, later, node="login-2").status_code == 200
    clock.now = T0 + 300
    view = apiclient.client(plane).get("/api/v1/scheduler").json()
    kube, slurm = view["managers"]
    assert (kube["manager"], kube["node"], kube["stale"]) == ("kubernetes", "cp-0", True)
    assert (slurm["node"], slurm["pending"], slurm["age_s"], slurm["stale"]) == ("login-2", [], 300.0, True)
    assert slurm["queues"][0]["use_pct"] == 100.0


def test_a_report_outside_the_contract_is_refused_whole(plane: ControlPlane) -> None:
    client = apiclient.client(plane)
    bad = report(T0)
    bad.pending[0].gpus = -1
    res = push(client, bad)
    assert res.status_code == 400 and "scheduler.pending[0].gpus" in res.json()["error"]
    assert client.get("/api/v1/scheduler").json()["managers"] == []


def test_the_view_has_a_typed_schema(plane: ControlPlane) -> None:
    spec = apiclient.client(plane).get("/openapi.json").json()
    op = spec["paths"]["/api/v1/scheduler"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/SchedulerView")
    pending = spec["components"]["schemas"]["PendingRow"]["properties"]
    assert {"name", "queue", "gpus", "waiting_s", "reason", "message"} <= set(pending)
    assert "description" in spec["components"]["schemas"]["QueueRow"]["properties"]["use_pct"]
