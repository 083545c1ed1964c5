"""The scheduler view through the one door: an agent that watches the workload manager pushes a SchedulerReport in
its batch (/api/v1/ingest, agent token), and /api/v1/scheduler answers per manager with its pending work
longest-waiting first and its queues' use of quota; the latest report per manager wins, an old one is stale. A large
report is served a page at a time (`limit`, `continue`), and the CLI follows the pages."""

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
    empty = {"time": T0, "managers": [], "metadata": {"continue": None, "remainingItemCount": 0}}
    assert client.get("/api/v1/scheduler").json() == empty
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


def large(manager: str, n: int, seed: int) -> SchedulerReport:
    """A report of `n` pending jobs (some with no known start, some with the same start and name) in a seeded
    order."""
    import random

    rng = random.Random(seed)
    pending = [
        PendingWork(
            name=f"{k} job-{k % 97}",
            queue=f"q{k % 7}",
            gpus=1 + k % 8,
            since=None if k % 50 == 0 else T0 - float(rng.randrange(1, 40_000)),
            reason="Resources",
        )
        for k in range(n)
    ]
    pending += [PendingWork(name="twin", queue="q0", gpus=1, since=T0 - 7.0, reason="Priority")] * 3  # identical
    rng.shuffle(pending)
    return SchedulerReport(manager=manager, time=T0, pending=pending, queues=[QueueUse(name="q0", gpus_used=8)])


def pages(client: Any, limit: int | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {} if limit is None else {"limit": limit}
    out = [client.get("/api/v1/scheduler", params=params).json()]
    while out[-1]["metadata"]["continue"] is not None:
        token = out[-1]["metadata"]["continue"]
        out.append(client.get("/api/v1/scheduler", params={**params, "continue": token}).json())
        assert len(out) < 1000
    return out


def test_a_large_report_is_served_a_page_at_a_time(plane: ControlPlane) -> None:
    from gpufleet.control.paging import DEFAULT_LIMIT, MAX_LIMIT

    client = apiclient.client(plane)
    assert push(client, large("slurm", 9_000, seed=1)).status_code == 200
    assert push(client, large("kubernetes", 3_000, seed=2), node="cp-0").status_code == 200
    total = 9_003 + 3_003
    first = client.get("/api/v1/scheduler")
    assert len(first.content) < 400_000  # the default page, not the whole report
    view = first.json()
    assert sum(len(m["pending"]) for m in view["managers"]) == DEFAULT_LIMIT
    assert [m["pending_count"] for m in view["managers"]] == [3_003, 9_003]  # counts on every page
    assert view["metadata"]["remainingItemCount"] == total - DEFAULT_LIMIT

    every = pages(client, limit=1_000)
    assert len(every) == -(-total // 1_000) and every[-1]["metadata"] == {"continue": None, "remainingItemCount": 0}
    rows = [row for page in every for m in page["managers"] for row in m["pending"]]
    assert len(rows) == total
    assert len({(r["manager"], r["name"]) for r in rows}) == total - 4  # each once; the three identical ones thrice
    waits = [(r["since"] is None, r["since"] or 0.0) for page in every for r in _page_rows(page)]
    assert waits == sorted(waits)  # longest-waiting first across managers and pages

    too_many = client.get("/api/v1/scheduler", params={"limit": MAX_LIMIT + 1})
    assert too_many.status_code == 422 and "limit" in too_many.json()["error"]
    forged = client.get("/api/v1/scheduler", params={"continue": "bm90IGEgdG9rZW4"})
    assert forged.status_code == 400 and set(forged.json()) == {"error", "fix"}
    assert "continue" in forged.json()["error"]
    spec = client.get("/openapi.json").json()["paths"]["/api/v1/scheduler"]["get"]
    assert {p["name"] for p in spec["parameters"]} == {"limit", "continue"} and "400" in spec["responses"]


def _page_rows(page: dict[str, Any]) -> list[dict[str, Any]]:
    """A page's rows in the order the list gives them (the managers split it; their order interleaves)."""
    rows = [row for m in page["managers"] for row in m["pending"]]
    return sorted(rows, key=lambda r: (r["since"] is None, r["since"] or 0.0, r["manager"], r["name"]))


def test_a_report_that_changes_between_pages_gives_each_remaining_row_once(plane: ControlPlane, clock: Clock) -> None:
    client = apiclient.client(plane)
    push(client, large("slurm", 2_000, seed=3))
    head = client.get("/api/v1/scheduler", params={"limit": 700}).json()
    seen = {r["name"] for m in head["managers"] for r in m["pending"]}
    changed = large("slurm", 2_000, seed=3)
    changed.pending = [p for p in changed.pending if p.name not in seen][100:]  # started: gone from the list
    changed.time = T0 + 1
    clock.now = T0 + 1
    push(client, changed)
    rest: list[dict[str, Any]] = []
    token = head["metadata"]["continue"]
    while token:
        page = apiclient.client(plane).get("/api/v1/scheduler", params={"limit": 700, "continue": token}).json()
        rest += [r for m in page["managers"] for r in m["pending"]]
        token = page["metadata"]["continue"]
    names = [r["name"] for r in rest]
    assert not set(names) & seen  # nothing given twice
    assert sorted(names) == sorted(p.name for p in changed.pending)  # and everything still waiting, once


def test_the_cli_reads_every_page(plane: ControlPlane, tmp_path: Path) -> None:
    import json

    from tests.clirun import gpufleet

    client = apiclient.client(plane)
    push(client, large("slurm", 6_000, seed=4))
    with apiclient.serving(apiclient.app(plane)) as url:
        env = {"GPUFLEET_HOME": str(tmp_path), "GPUFLEET_TOKEN": apiclient.TOKEN}
        listed = gpufleet("get", "pending", "-o", "json", "--server", url, env=env)
        queues = gpufleet("get", "queues", "-o", "json", "--server", url, env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == 6_003 and rows[0]["waiting_s"] == max(r["waiting_s"] or 0.0 for r in rows)
    assert [q["name"] for q in json.loads(queues.stdout)] == ["q0"]
