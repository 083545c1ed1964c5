"""GET /api/v1/cost: the control plane's cost report over HTTP, typed in /openapi.json, with the twin's workloads
priced; a period the API does not take is answered 422 with what to write instead."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.server import schemas
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from tests import apiclient
from tests.twins import door, small_twin


@pytest.fixture(scope="module")
def client() -> Any:
    twin = small_twin(nodes=3, job_nodes=2, service_node="n-002",
                      faults=[InjectedFault(0, FaultType.idle_gpu, 0.0, node="n-002", gpu=7)])  # fmt: skip
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)  # type: ignore[attr-defined]
    return apiclient.client(plane)


def test_the_report_over_http(client: Any) -> None:
    resp = client.get("/api/v1/cost", params={"since": "1h"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    report = schemas.CostReport.model_validate(body)  # the answer is the typed report, field for field
    # the twin ran 15 minutes of the hour asked: the report is of those, and says what was asked
    assert report.hours == pytest.approx(0.25, abs=0.02) and report.asked_hours == 1.0 and report.currency == "USD"
    kinds = {(w.namespace, w.workload): w.kind for w in report.by_workload}
    assert kinds[("training", "job")] == "job" and kinds[("inference", "chat")] == "service"
    assert any(ns == "default" and kind == "pod" for (ns, _), kind in kinds.items())
    assert report.totals.cost_usd == pytest.approx(sum(w.cost_usd for w in report.by_workload), abs=0.05)
    assert report.totals.held_gpu_hours > 0 and report.totals.unallocated_gpu_hours > 0
    assert {p.provider for p in report.prices} == {"aws"}
    assert body["usage"]["timeline"]["held"]


def test_the_idle_threshold_is_a_parameter(client: Any) -> None:
    low = client.get("/api/v1/cost", params={"since": "1h", "idle_below": 0}).json()
    assert low["idle_below_pct"] == 0 and low["totals"]["idle_gpu_hours"] == 0
    high = client.get("/api/v1/cost", params={"since": "1h", "idle_below": 100}).json()
    assert high["totals"]["idle_gpu_hours"] == pytest.approx(high["totals"]["held_gpu_hours"], abs=0.01)


@pytest.mark.parametrize(("params", "says"), [({"since": "7x"}, "not a duration"), ({"since": "5s"}, "one minute"),
                                              ({"since": "1h", "idle_below": 150}, "idle_below")])  # fmt: skip
def test_bad_parameters_are_422_with_a_fix(client: Any, params: dict[str, Any], says: str) -> None:
    resp = client.get("/api/v1/cost", params=params)
    assert resp.status_code == 422
    assert says in resp.json()["error"] and resp.json()["fix"]


def test_openapi_describes_the_report(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/v1/cost"]["get"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/CostReport")
    fields = spec["components"]["schemas"]["CostReport"]["properties"]
    assert {"totals", "by_workload", "by_team", "by_model", "waste", "recommendations", "usage"} <= set(fields)
    totals = spec["components"]["schemas"]["Totals"]["properties"]
    assert "description" in totals["idle_cost_usd"]
