"""kubectl-like verbs against a running control plane: every resource, selectors, describe, incident changes,
actions with --dry-run, where the server and token come from, `top`, and what a follower of the stream prints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli import fleet
from gpufleet.cli.client import Api
from gpufleet.cli.output import OutputFormat
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.sim.scenario import carve_mig
from gpufleet.spec.scenario_spec import FaultType, MigSpec
from gpufleet.state import Database
from tests import apiclient
from tests.clirun import gpufleet
from tests.twins import door, small_twin


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    tmp = tmp_path_factory.mktemp("fleet-cli")
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.gpu_off_bus, 30.0, node="n-001", gpu=4),
            InjectedFault(1, FaultType.link_down, 40.0, node="n-002", rail=3),
        ],
        service_node="n-002",
    )
    mig = MigSpec(nodes=["n-002"], gpus=[7], devices={"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    carve_mig(twin.cluster, [mig], "test")
    plane, sim = door(twin, db=Database(tmp / "state.db"))
    run_headless(twin, sim, plane.ingest, plane.tick, 120)
    plane.twin = twin
    with apiclient.serving(apiclient.app(plane)) as url:
        yield url, plane


@pytest.fixture
def env(served: tuple[str, Any], tmp_path: Path) -> dict[str, str]:
    return {"GPUFLEET_SERVER": served[0], "GPUFLEET_TOKEN": apiclient.TOKEN, "GPUFLEET_HOME": str(tmp_path)}


def run(env: dict[str, str], *args: str) -> Any:
    res = gpufleet(*args, env=env)
    assert res.returncode == 0, res.stderr
    return res


def test_every_resource_lists(env: dict[str, str]) -> None:
    run(env, "uncordon", "n-000", "--dry-run")  # something in the audit log
    for resource, key in (
        ("nodes", "name"),
        ("gpus", "gpu"),
        ("jobs", "name"),
        ("services", "p99_s"),
        ("incidents", "id"),
        ("events", "kind"),
        ("audit", "actor"),
        ("agents", "agent"),
        ("links", "hca"),
        ("switches", "links"),
    ):
        rows = json.loads(run(env, "get", resource, "-o", "json").stdout)
        assert rows and key in rows[0], resource
        assert run(env, "get", resource).stdout.strip(), resource  # and a table
    assert yaml.safe_load(run(env, "get", "switches", "-o", "yaml").stdout)[0]["name"].startswith("leaf-")


def test_services_show_their_latency_against_the_objective(env: dict[str, str]) -> None:
    (chat,) = json.loads(run(env, "get", "services", "-o", "json").stdout)
    assert chat["name"] == "chat" and chat["gpus"] == ["n-002/0", "n-002/1"] and chat["slo_p99_s"] == 0.5
    assert chat["state"] == "Serving" and 0 < chat["p50_s"] <= chat["p99_s"] < 0.5
    table = run(env, "get", "services", "-o", "wide").stdout
    assert "chat" in table and "500ms" in table and "n-002/0,n-002/1" in table


def test_selectors(env: dict[str, str]) -> None:
    critical = json.loads(run(env, "get", "incidents", "-l", "severity=critical", "-o", "json").stdout)
    assert critical and all(i["severity"] == "critical" for i in critical)
    down = json.loads(run(env, "get", "links", "-l", "state=Down", "-o", "json").stdout)
    assert [(x["node"], x["hca"]) for x in down] == [("n-002", "mlx5_3")]
    lost = json.loads(run(env, "get", "gpus", "-l", "health=lost,node=n-001", "-o", "json").stdout)
    assert [g["gpu"] for g in lost] == [4]
    others = json.loads(run(env, "get", "nodes", "-l", "name!=n-000", "-o", "json").stdout)
    assert [n["name"] for n in others] == ["n-001", "n-002"]
    bad = gpufleet("get", "nodes", "-l", "oops", env=env)
    assert bad.returncode == 2 and "bad selector 'oops'" in bad.stderr


def test_describe_node_gpu_and_incident(env: dict[str, str]) -> None:
    node = run(env, "describe", "node", "n-001").stdout
    assert "Capacity: 8 GPUs   Allocatable: 7 GPUs" in node
    wide = run(env, "get", "gpus", "--node", "n-001", "-o", "wide").stdout
    for g in json.loads(run(env, "get", "gpus", "--node", "n-001", "-o", "json").stdout):
        assert g["pci_bus_id"] in wide  # a PCI id stays text: ":ab:" must not turn into an emoji
    gpu = run(env, "describe", "gpu", "n-001/4").stdout
    assert "n-001/4" in gpu and "lost" in gpu
    inc = json.loads(run(env, "get", "incidents", "-l", "cause=gpu-lost", "-o", "json").stdout)[0]
    detail = run(env, "describe", "incident", inc["id"]).stdout
    assert inc["id"] in detail and "evidence" in detail and "gpu-lost" in detail
    # the action in words, every step, with NVIDIA's bucket and the Xid it came from
    assert "Recommended: Drain and reboot the node (NVIDIA RESTART_BM, Xid 79)" in detail
    assert all(f"{n}. {step[:40]}" in " ".join(detail.split()) for n, step in enumerate(inc["action_steps"], 1))
    table = run(env, "get", "incidents", "-l", "cause=gpu-lost", "-o", "wide").stdout
    assert "Drain and reboot the node" in table and "NVIDIA RESTART_BM, Xid 79" in table
    assert gpufleet("describe", "gpu", "n-001", env=env).returncode == 2


def test_a_mig_gpu_shows_its_instances_and_power_limit(env: dict[str, str]) -> None:
    header, *lines = run(env, "get", "gpus", "--node", "n-002", "-o", "wide").stdout.splitlines()
    assert header.rstrip().endswith("MIG")
    by_gpu = {line.split()[1]: line.rstrip() for line in lines}
    assert by_gpu["7"].endswith(" 3g.40gb,2g.20gb,1g.10gb x2")  # largest first, repeats counted
    assert all(by_gpu[str(i)].endswith(" off") for i in range(7))
    gpu = run(env, "describe", "gpu", "n-002/7").stdout
    assert "Power limit: 700 W" in gpu and "MIG: on, 4 instances on 8 memory slices, none free" in gpu
    rows = [line.split() for line in gpu.splitlines() if line[:1].isdigit()]  # PROFILE GI PLACEMENT CI UUID
    assert [r[:4] for r in rows] == [
        ["1g.10gb", "1", "0:1", "0"],
        ["1g.10gb", "2", "1:1", "0"],
        ["2g.20gb", "3", "2:2", "0"],
        ["3g.40gb", "4", "4:4", "0"],
    ]
    assert all(r[4].startswith("MIG-") for r in rows)
    assert "MIG: off" in run(env, "describe", "gpu", "n-002/0").stdout


def test_incident_changes_and_actions(env: dict[str, str], served: tuple[str, Any]) -> None:
    plane = served[1]
    inc = json.loads(run(env, "get", "incidents", "-l", "cause=ib-link-down", "-o", "json").stdout)[0]
    assert run(env, "ack", inc["id"], "--note", "looking").stdout.strip() == f"{inc['id']} acknowledged"
    entry = [e for e in plane.store.audit_log.entries() if e.target == f"incident/{inc['id']}"][-1]
    assert entry.actor == "admin" and "looking" in entry.request
    dry = run(env, "drain", "n-002", "--dry-run").stdout.strip()
    assert dry == "(dry run) node/n-002: would drain node/n-002"  # a sentence, not a Python dict
    assert not plane.twin.cluster.node("n-002").unschedulable
    done = run(env, "cordon", "n-002", "--reason", "cable check").stdout.strip()
    assert done.startswith("node/n-002: ") and plane.twin.cluster.node("n-002").unschedulable
    run(env, "uncordon", "n-002")
    assert run(env, "reset", "n-000/2", "--dry-run").stdout.strip() == "(dry run) gpu/n-000/2: would reset gpu/n-000/2"
    assert "would requeue job/job" in run(env, "requeue", "job", "--exclude", "n-001", "--dry-run").stdout


def test_where_the_server_and_token_come_from(env: dict[str, str], tmp_path: Path) -> None:
    no_token = {**env, "GPUFLEET_TOKEN": ""}
    refused = gpufleet("cordon", "n-000", env=no_token)
    assert refused.returncode == 2 and "needs a token" in refused.stderr and "--token-file" in refused.stderr
    token_file = tmp_path / "t"
    token_file.write_text(apiclient.TOKEN + "\n")
    ok = gpufleet("cordon", "n-000", "--dry-run", "--token-file", str(token_file), env=no_token)
    assert ok.returncode == 0, ok.stderr
    nowhere = gpufleet("get", "nodes", "--server", "http://127.0.0.1:9", env=env)
    assert nowhere.returncode == 1
    assert "no control plane answers at http://127.0.0.1:9 (from --server)" in nowhere.stderr
    assert "GPUFLEET_SERVER" in nowhere.stderr and "gpufleet config set server" in nowhere.stderr
    remembered = {"GPUFLEET_HOME": env["GPUFLEET_HOME"], "GPUFLEET_TOKEN": apiclient.TOKEN}
    assert run(remembered, "config", "set", "server", env["GPUFLEET_SERVER"]).stdout
    assert json.loads(run(remembered, "get", "nodes", "-o", "json").stdout)  # the remembered server answers
    assert env["GPUFLEET_SERVER"] in run(remembered, "config", "view").stdout
    assert gpufleet("config", "set", "server", "not-a-url", env=remembered).returncode == 2


def test_top_once(env: dict[str, str]) -> None:
    ran = run(env, "top", "--once")
    out = ran.stdout
    assert "3 nodes  24 GPUs" in out and "n-001" in out and "open incidents:" in out and "gpu-lost" in out
    assert ran.stderr == ""


def test_top_without_a_terminal_prints_one_frame_and_says_why(env: dict[str, str]) -> None:
    """A pipe gets one frame of every node (not nothing, not a redraw that never ends) and a note on stderr."""
    ran = run(env, "top")  # the test's stdout is not a terminal
    assert "3 nodes  24 GPUs" in ran.stdout and "open incidents:" in ran.stdout
    assert all(f"n-00{i}" in ran.stdout for i in range(3)) and "more nodes" not in ran.stdout
    assert "not a terminal" in ran.stderr and "--once" in ran.stderr and "get nodes -w" in ran.stderr
    assert "... and 2 more nodes" in run(env, "top", "--rows", "1").stdout  # --rows still limits


def test_watch_prints_what_changes(served: tuple[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    api = Api(served[0])
    incident = api.get("/api/v1/incidents")[0]
    changed = {**incident, "state": "mitigated"}

    def frames(self: Api) -> Iterator[tuple[str, Any]]:
        yield "summary", {}
        yield "incident", changed
        yield "event", {"id": 1, "node": "n-000"}

    monkeypatch.setattr(Api, "stream", frames)
    fleet._watch(api, fleet.Resource.incidents, OutputFormat.json, [], None, 100)
    printed = json.loads(capsys.readouterr().out)
    assert printed == [changed]


def test_pending_work_and_queues(env: dict[str, str], served: tuple[str, Any]) -> None:
    from gpufleet.model.observe import SCHEMA_VERSION, Batch, PendingWork, QueueUse, SchedulerReport

    plane = served[1]
    now = plane.clock()
    waits = PendingWork(
        name="41 pretrain-70b",
        queue="gpu",
        namespace="research",
        gpus=16,
        since=now - 5400,
        reason="QOSMaxGRESPerUser",
        message="its QOS's limit on GRES (GPUs) per user is reached",
    )
    report = SchedulerReport(
        manager="slurm",
        time=now,
        pending=[PendingWork(name="42 eval", queue="gpu", gpus=1, since=now - 60, reason="Priority"), waits],
        queues=[QueueUse(name="gpu", gpus_used=24, gpus_pending=17, quota=32, pending=2, running=3)],
    )
    plane.ingest(Batch(v=SCHEMA_VERSION, agent="login-1", incarnation="q", node="login-1", sent=now, scheduler=report))
    rows = json.loads(run(env, "get", "pending", "-o", "json").stdout)
    assert [r["name"] for r in rows[:2]] == ["41 pretrain-70b", "42 eval"]  # longest-waiting first
    assert rows[0]["manager"] == "slurm" and rows[0]["waiting_s"] == 5400.0 and rows[0]["gpus"] == 16
    table = run(env, "get", "pending").stdout
    assert "QOSMaxGRESPerUser" in table and "1h30m" in table and "MANAGER" not in table
    wide = run(env, "get", "pending", "-o", "wide", "-l", "reason=Priority").stdout
    assert "MANAGER" in wide and "42 eval" in wide and "41 pretrain-70b" not in wide
    queues = yaml.safe_load(run(env, "get", "queues", "-o", "yaml").stdout)
    gpu = next(q for q in queues if q["manager"] == "slurm")
    assert (gpu["name"], gpu["use_pct"], gpu["gpus_pending"]) == ("gpu", 75.0, 17)
    assert "75%" in run(env, "get", "queues", "-l", "manager=slurm").stdout


def test_watch_prints_the_header_once_and_then_only_changed_rows(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get nodes -w`: the list with its header, then each change as one row under it, aligned to its columns."""
    real_rows = fleet._rows
    calls = {"n": 0}

    def rows(resource: fleet.Resource, api: Api, node: str | None, limit: int) -> list[dict[str, Any]]:
        calls["n"] += 1
        listed = real_rows(resource, api, node, limit)
        if calls["n"] >= 4:  # the list, the watch's baseline, one unchanged summary, then n-001 changes
            listed = [{**r, "status": "Lost"} if r["name"] == "n-001" else r for r in listed]
        return listed

    def frames(self: Api) -> Iterator[tuple[str, Any]]:
        for _ in range(3):
            yield "summary", {}

    monkeypatch.setattr(fleet, "_rows", rows)
    monkeypatch.setattr(Api, "stream", frames)
    out = run(env, "get", "nodes", "-w").stdout.splitlines()
    assert [line.split()[0] for line in out] == ["NAME", "n-000", "n-001", "n-002", "n-001"]
    header, changed = out[0], out[-1]
    assert changed.split()[1] == "Lost"
    assert changed.index("Lost") == header.index("STATUS")  # under the header's column
    assert changed.index(changed.split()[2]) == header.index("GPUS")


def test_watch_keeps_json_output_one_list_per_change(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def frames(self: Api) -> Iterator[tuple[str, Any]]:
        yield "event", {"id": 99, "node": "n-002", "kind": "XidEvent", "entity": "gpu/n-002/1", "message": "x"}
        yield "event", {"id": 100, "node": "n-000", "kind": "XidEvent", "entity": "gpu/n-000/1", "message": "y"}

    monkeypatch.setattr(Api, "stream", frames)
    out = run(env, "get", "events", "--node", "n-002", "-w", "-o", "json").stdout
    assert out.rstrip().endswith('"message": "x"\n  }\n]') and '"message": "y"' not in out


def test_an_empty_list_says_no_resources_found(env: dict[str, str]) -> None:
    empty = gpufleet("get", "incidents", "-l", "severity=nonexistent", env=env)
    assert empty.returncode == 0 and empty.stdout == ""  # a pipe reads nothing, as from kubectl
    assert empty.stderr.strip() == "No incidents found matching -l severity=nonexistent."
    events = gpufleet("get", "events", "--node", "n-000", "-l", "kind=NoSuchKind", env=env)
    assert events.stdout == "" and events.stderr.strip() == "No events found on node n-000 matching -l kind=NoSuchKind."
    for fmt, loads in (("json", json.loads), ("yaml", yaml.safe_load)):
        listed = gpufleet("get", "incidents", "-l", "severity=nonexistent", "-o", fmt, env=env)
        assert loads(listed.stdout) == [] and listed.stderr == "", fmt


def test_clocks_list_each_nodes_clock(env: dict[str, str]) -> None:
    every = json.loads(run(env, "get", "clocks", "-o", "json").stdout)
    # another test's scheduler report from login-1 (no clock reading, only its push's send time) may be listed too
    rows = [r for r in every if r["node"].startswith("n-")]
    assert [r["node"] for r in rows] == ["n-000", "n-001", "n-002"]
    assert all(not r["source"] for r in every if r not in rows), every
    assert {(r["source"], r["synchronised"]) for r in rows} == {("chrony", True)}
    assert all(abs(r["offset_s"]) < 0.001 and r["sent_minus_received_s"] is not None for r in rows)
    table = run(env, "get", "clocks").stdout
    assert "SENT-RECEIVED" in table and "chrony" in table
