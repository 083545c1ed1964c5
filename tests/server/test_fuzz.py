"""The API fuzzed from its own OpenAPI description (bounded examples per operation): no 500, no stack trace, no
change accepted without a token or from a token too small for it, and every answer one the description declares,
an error's body a `Problem`."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from gpufleet.server.app import create_app
from gpufleet.server.schemas import Problem
from gpufleet.server.security import ADMISSION, READING_POSTS
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from gpufleet.state import Database
from tests import apiclient
from tests.twins import door, small_twin

VIEWER = "viewer-secret"


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    twin = small_twin(faults=[InjectedFault(0, FaultType.gpu_off_bus, 30.0, node="n-001", gpu=4)])
    plane, fleet = door(twin, db=Database(tmp_path_factory.mktemp("fuzz") / "state.db"))
    run_headless(twin, fleet, plane.ingest, plane.tick, 90)
    tokens = apiclient.grant(plane, VIEWER, "viewer")
    plane.twin = twin
    return plane, create_app(plane, tokens=tokens)


def _state(plane: Any) -> tuple[Any, ...]:
    twin = plane.twin
    cordoned = tuple(n.name for n in twin.cluster.nodes if n.unschedulable)
    incidents = tuple((i.id, i.state) for i in plane.book.incidents.values())
    return cordoned, incidents


def operations(app: Any) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = [result.ok() for result in schema.get_all_operations()]
    # the stream never ends (tested on a real server in test_api_v1); the ingest door has its own malformed tests
    return [op for op in ops if op.path not in ("/api/v1/stream",)]


def server_error(case: Any, response: Any) -> bool:
    """A 5xx other than /healthz's documented 503 (no control loop turns in this fixture, so after 30 s of fuzzing
    the health check rightly says so)."""
    if case.formatted_path == "/healthz" and response.status_code == 503:
        return response.json().get("status") != "unhealthy"
    return response.status_code >= 500


def documented(app: Any, case: Any, response: Any) -> None:
    """The answer's status is declared for its operation, and an error's body is a Problem (error, and a fix)."""
    where = f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:200]}"
    declared = app.openapi()["paths"][case.operation.path][case.method.lower()]["responses"]
    assert str(response.status_code) in declared, f"undeclared answer: {where}"
    if response.status_code >= 400:
        Problem.model_validate(response.json())  # raises, naming the field, when it is not one
        assert set(response.json()) <= {"error", "fix"}, where


def fuzz(op: Any, check: Any, examples: int = 20) -> None:
    @given(case=op.as_strategy())
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Any) -> None:
        check(case)

    run()


def test_no_500_and_no_change_without_the_right_token(fuzzed: Any) -> None:
    plane, app = fuzzed
    before = _state(plane)

    def check(case: Any) -> None:
        for who, headers in (("nobody", {}), ("viewer", {"Authorization": f"Bearer {VIEWER}"})):
            response = case.call(headers=headers)  # from "testclient": not loopback, reads need a token too
            where = f"{case.method} {case.formatted_path} as {who}"
            assert not server_error(case, response), f"{where}: {response.text[:300]}"
            assert "Traceback" not in response.text
            documented(app, case, response)
            if case.formatted_path == ADMISSION:  # the API server calls the webhook tokenless; it changes nothing
                assert response.status_code in (200, 400, 413), where
            elif case.formatted_path in READING_POSTS:  # a POST that only reads: a viewer may, nobody may not
                assert response.status_code in ((401, 413) if who == "nobody" else (200, 400, 413)), where
            elif case.method.upper() != "GET":
                assert response.status_code in (401, 403, 413), where

    for op in operations(app):
        fuzz(op, check)
    assert _state(plane) == before


def test_no_500_for_an_admin_either(fuzzed: Any) -> None:
    def check(case: Any) -> None:
        response = case.call(headers={"Authorization": f"Bearer {apiclient.TOKEN}"})
        where = f"{case.method} {case.formatted_path}"
        assert not server_error(case, response), f"{where}: {response.status_code} {response.text[:300]}"
        assert "Traceback" not in response.text
        documented(fuzzed[1], case, response)

    for op in operations(fuzzed[1]):
        fuzz(op, check)


def test_a_flood_of_bad_requests_leaves_the_server_answering(fuzzed: Any) -> None:
    client = apiclient.client(fuzzed[0])
    junk = [b"{", b"\xff" * 100, b'{"dryRun": []}', b"[]" * 1000]
    for k in range(300):
        client.post(f"/api/v1/nodes/n-00{k % 3}/drain", content=junk[k % len(junk)])
        client.get("/api/v1/events", params={"limit": "x" * (k % 50)})
    fuzzed[0].tick()  # no control loop runs in this fixture: one turn, as the server's loop takes
    assert client.get("/healthz").status_code == 200
    assert client.get("/api/v1/nodes").status_code == 200
