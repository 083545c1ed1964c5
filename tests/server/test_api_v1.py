"""The v1 API's resources: typed schemas in /openapi.json, docs from bundled assets, incident filters and detail,
actions with dryRun, event kinds, the metric query API, the control plane's own metrics, and the live stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.apiclient import AUTH
from tests.twins import door, small_twin


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("v1")
    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 30.0, node="n-001", gpu=4)])
    plane, fleet = door(twin, db=Database(tmp / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 150)
    plane.twin = twin
    return plane


@pytest.fixture(scope="module")
def client(plane: Any) -> Any:
    return apiclient.client(plane)


def test_every_api_response_has_a_typed_schema(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    untyped = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            ok = op["responses"].get("200", {}).get("content", {})
            schema = ok.get("application/json", {}).get("schema")
            if path.startswith("/api/v1/") and path not in ("/api/v1/ingest", "/api/v1/stream") and not schema:
                untyped.append(f"{method.upper()} {path}")
    assert untyped == []
    gpu = spec["components"]["schemas"]["GpuRow"]["properties"]
    assert {"health", "temp_c", "power_w", "clock_events", "held_by"} <= set(gpu)
    assert "description" in gpu["clock_events"]


def test_docs_load_from_bundled_assets(client: Any) -> None:
    page = client.get("/docs").text
    assert "/docs/assets/swagger-ui-bundle.js" in page and "cdn" not in page.lower()
    asset = client.get("/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200 and len(asset.content) > 100_000


def test_incident_filters_and_cursor(client: Any) -> None:
    rows = client.get("/api/v1/incidents").json()
    lost = [r for r in rows if r["cause"] == "gpu-lost"]
    assert lost
    assert client.get("/api/v1/incidents", params={"cause": "gpu-lost"}).json() == lost
    critical = client.get("/api/v1/incidents", params={"severity": "critical"}).json()
    assert all(r["severity"] == "critical" for r in critical) and lost[0]["id"] in {r["id"] for r in critical}
    newest = max(r["last_seen"] for r in rows)
    assert client.get("/api/v1/incidents", params={"since": newest}).json() == []
    assert len(client.get("/api/v1/incidents", params={"since": newest - 1e9}).json()) == len(rows)
    assert client.get("/api/v1/incidents", params={"severity": "bad"}).status_code == 422


def test_an_incident_s_action_is_given_in_words_with_its_catalog_reference(client: Any) -> None:
    lost = client.get("/api/v1/incidents", params={"cause": "gpu-lost"}).json()[0]
    assert lost["action"] == "RESTART_BM" and lost["xid"] == 79  # the bare term stays, for scripts that key on it
    assert lost["action_reference"] == "NVIDIA RESTART_BM, Xid 79"
    assert "reboot" in lost["action_title"].lower()
    assert len(lost["action_steps"]) >= 3 and any("power-cycle" in step for step in lost["action_steps"])
    detail = client.get(f"/api/v1/incidents/{lost['id']}").json()
    assert detail["action_steps"] == lost["action_steps"] and detail["action_title"] == lost["action_title"]
    node = client.get("/api/v1/nodes/n-001").json()
    assert any(i["action_reference"] == "NVIDIA RESTART_BM, Xid 79" for i in node["incidents"])
    row = client.get("/openapi.json").json()["components"]["schemas"]["IncidentRow"]["properties"]
    assert {"action", "action_title", "action_steps", "action_reference"} <= set(row)


def test_incident_detail_shows_who_did_what(plane: Any) -> None:
    client = apiclient.client(plane)
    inc = client.get("/api/v1/incidents", params={"cause": "gpu-lost"}).json()[0]
    res = client.post(f"/api/v1/incidents/{inc['id']}/acknowledge", headers=AUTH, json={"note": "on it"})
    assert res.status_code == 200, res.text
    detail = client.get(f"/api/v1/incidents/{inc['id']}").json()
    ack = [a for a in detail["actions"] if a["action"] == "acknowledged"]
    assert ack and ack[-1]["actor"] == "admin" and '"note": "on it"' in ack[-1]["request"]
    assert detail["evidence"] and detail["effects"]
    unknown = client.post(f"/api/v1/incidents/{inc['id']}/acknowledge", headers=AUTH, json={"nope": 1})
    assert unknown.status_code == 422 and "nope" in unknown.json()["error"]
    assert client.post(f"/api/v1/incidents/{inc['id']}/explode", headers=AUTH).status_code == 422


def test_actions_with_dry_run_change_nothing_and_are_audited(plane: Any) -> None:
    client = apiclient.client(plane)
    dry = client.post("/api/v1/nodes/n-002/drain", headers=AUTH, json={"dryRun": True, "reason": "test"})
    assert dry.status_code == 200 and dry.json() == {
        "target": "node/n-002",
        "action": "drain",
        "result": "would drain node/n-002",
        "dry_run": True,
    }
    assert not plane.twin.cluster.node("n-002").unschedulable
    entry = plane.store.audit_log.entries()[-1]
    assert (entry.action, entry.dry_run, entry.actor) == ("drain", True, "admin")
    reset = client.post("/api/v1/nodes/n-000/gpus/3/reset", headers=AUTH, json={"dryRun": True})
    assert reset.status_code == 200 and reset.json()["result"] == "would reset gpu/n-000/3"
    assert client.post("/api/v1/nodes/n-000/gpus/42/reset", headers=AUTH).status_code == 404
    job = client.get("/api/v1/jobs").json()[0]["name"]
    requeue = client.post(f"/api/v1/jobs/{job}/requeue", headers=AUTH, json={"dryRun": True, "exclude": ["n-001"]})
    assert requeue.status_code == 200 and requeue.json()["result"] == f"would requeue job/{job}"
    assert client.post("/api/v1/jobs/nope/requeue", headers=AUTH).status_code == 404
    bad = client.post("/api/v1/nodes/n-002/drain", headers=AUTH, json={"dryRun": "perhaps"})
    assert bad.status_code == 422 and "dryRun" in bad.json()["error"]
    assert client.post("/api/v1/nodes/n-002/drain", headers=AUTH, content=b"{oops").status_code == 422


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"\xff\xfe{not text", 400), (b'{"dryRun": "\xc3\x28"}', 400), (b"{oops", 422), (b"[]", 422)],
    ids=["not-utf8", "broken-utf8-in-json", "not-json", "not-an-object"],
)
def test_a_body_that_cannot_be_read_is_answered_as_a_problem(client: Any, body: bytes, status: int) -> None:
    from gpufleet.server.schemas import Problem

    headers = {**AUTH, "Content-Type": "application/json"}
    res = client.post("/api/v1/nodes/n-002/cordon", headers=headers, content=body)
    assert res.status_code == status
    problem = Problem.model_validate(res.json())
    assert set(res.json()) == {"error", "fix"} and problem.fix
    declared = client.get("/openapi.json").json()["paths"]["/api/v1/nodes/{name}/cordon"]["post"]["responses"]
    assert declared[str(status)]["content"]["application/json"]["schema"]["$ref"].endswith("/Problem")


def test_the_framework_s_own_answers_are_problems_too(client: Any) -> None:
    missing = client.get("/api/v1/no-such-thing")
    assert missing.status_code == 404 and missing.json() == {
        "error": "no /api/v1/no-such-thing in this API",
        "fix": "see the API schema at /docs",
    }
    wrong = client.delete("/api/v1/nodes", headers=AUTH)
    assert wrong.status_code == 405 and set(wrong.json()) == {"error", "fix"}


def test_every_guarded_operation_declares_the_guard_s_answers(client: Any) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            answers = set(operation["responses"])
            if path not in ("/healthz", "/admission/v1/preflight"):  # the API server calls the webhook tokenless
                assert {"401", "403"} <= answers, f"{method} {path}"
            if method == "post":
                assert {"400", "413"} <= answers, f"{method} {path}"
    assert "HTTPValidationError" not in client.get("/openapi.json").text  # a 422 is a Problem like the rest


def test_a_real_reset_goes_through_the_backend(plane: Any) -> None:
    client = apiclient.client(plane)
    res = client.post("/api/v1/nodes/n-002/gpus/1/reset", headers=AUTH)  # no job holds n-002's GPUs
    assert res.status_code == 200 and res.json()["result"] == "GPU 1 on n-002 reset", res.text
    entry = plane.store.audit_log.entries()[-1]
    assert entry.action == "reset" and entry.target == "gpu/n-002/1" and not entry.dry_run


def test_event_kinds_are_checked_and_listed(client: Any) -> None:
    bad = client.get("/api/v1/events", params={"kind": "kmsg,bogus"})
    assert bad.status_code == 422 and "'bogus'" in bad.json()["error"] and "kmsg" in bad.json()["fix"]
    assert all(e["kind"] == "kmsg" for e in client.get("/api/v1/events", params={"kind": "kmsg"}).json())


def test_metric_queries(plane: Any, client: Any) -> None:
    now = plane.clock()
    fleet = client.get("/api/v1/metrics/query", params={"series": "gpufleet_fleet_gpu_utilization_avg"}).json()
    assert len(fleet) == 1 and fleet[0]["value"] is not None
    temps = client.get(
        "/api/v1/metrics/range",
        params={"series": 'gpufleet_gpu_temp_c{node="n-000"}', "start": now - 600, "end": now, "step": 30},
    ).json()
    assert {s["labels"]["gpu"] for s in temps} == {str(g) for g in range(8)}
    assert all(len(s["points"]) >= 3 for s in temps)
    by_node = client.get(
        "/api/v1/metrics/query", params={"series": "gpufleet_gpu_power_w", "op": "sum", "by": "node"}
    ).json()
    assert {s["labels"]["node"] for s in by_node} == {"n-000", "n-001", "n-002"}
    assert client.get("/api/v1/metrics/query", params={"series": "x", "op": "median"}).status_code == 422
    assert client.get("/api/v1/metrics/query", params={"series": "{{{"}).status_code in (400, 422)
    huge = client.get("/api/v1/metrics/range", params={"series": "x", "start": 0, "end": 1e9, "step": 1})
    assert huge.status_code == 422


def test_the_control_plane_exposes_its_own_metrics(client: Any) -> None:
    client.get("/api/v1/nodes")
    client.get("/api/v1/nodes/n-000")
    client.get("/api/v1/no/such/path")
    text = client.get("/metrics").text
    assert "gpufleet_control_batches_total " in text and 'gpufleet_control_incidents_open{severity="critical"}' in text
    assert 'route="/api/v1/nodes/{name}"' in text and 'route="unmatched"' in text
    assert "n-000" not in text  # routes by template: a path never becomes a label


@pytest.fixture
def served(plane: Any) -> Iterator[str]:
    with apiclient.serving(apiclient.app(plane)) as url:
        yield url


def test_the_stream_sends_summary_and_replays_events(served: str, plane: Any) -> None:
    frames: list[tuple[str, str]] = []
    with httpx.stream("GET", f"{served}/api/v1/stream", params={"after": 0}, timeout=20) as res:
        assert res.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in res.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                frames.append((kind, line[6:]))
            if {k for k, _ in frames} >= {"summary", "event"}:
                break
    kinds = [k for k, _ in frames]
    assert kinds[0] == "summary" and '"gpus":24' in frames[0][1]
    assert "event" in kinds


def test_the_fabric_names_each_link_its_switch_and_its_incident(tmp_path: Path) -> None:
    twin = small_twin(faults=[InjectedFault(0, FaultType.link_down, 30.0, node="n-001", rail=2)])
    plane, fleet = door(twin, db=Database(tmp_path / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 120)
    client = apiclient.client(plane)
    fabric = client.get("/api/v1/fabric").json()
    assert len(fabric["links"]) == 24 and len(fabric["switches"]) == 8
    (down,) = [link for link in fabric["links"] if link["state"] == "Down"]
    assert (down["node"], down["hca"], down["switch"], down["severity"]) == (
        "n-001",
        "mlx5_2",
        "leaf-su1-r2",
        "critical",
    )
    assert down["incident"] and down["link_downed"] == 1
    leaf = next(s for s in fabric["switches"] if s["name"] == "leaf-su1-r2")
    assert (leaf["links"], leaf["down"]) == (3, 1)
    now = plane.clock()
    counters = client.get(
        "/api/v1/metrics/range",
        params={
            "series": 'gpufleet_port_link_downed{node="n-001",port="mlx5_2/1"}',
            "start": now - 120,
            "end": now,
            "step": 30,
        },
    ).json()
    assert counters and max(v for _, v in counters[0]["points"]) == 1


def test_shared_views_keep_their_shapes(client: Any) -> None:
    from pydantic import TypeAdapter

    from gpufleet.server import schemas

    for path, shape in (
        ("/api/v1/summary", schemas.Summary),
        ("/api/v1/nodes", list[schemas.NodeRow]),
        ("/api/v1/gpus", list[schemas.GpuRow]),
        ("/api/v1/jobs", list[schemas.JobRow]),
        ("/api/v1/fabric", schemas.Fabric),
    ):
        body = client.get(path).json()
        TypeAdapter(shape).validate_python(body)  # encoded once and shared, so checked here rather than per call
        assert client.get(path).json() == body  # the second read within the moment is the same answer
