"""Reads yield to the control loop: while it is behind, reads are 503 with Retry-After; health, metrics, agents'
pushes and people's changes still go through; once it turns again, reads are answered."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from gpufleet.model.observe import Record
from gpufleet.model.wire import JSON, encode
from gpufleet.server.app import create_app
from gpufleet.state import Database
from tests import apiclient
from tests.control.helpers import T0, Clock, batch, lost_gpu, plane_at


def test_reads_wait_while_the_loop_is_behind(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    client = TestClient(create_app(plane, tokens=apiclient.grant(plane), shed_reads=True), client=apiclient.LOOPBACK)
    plane.last_tick = time.monotonic() - 25  # the loop has not turned for 25 s
    shed = client.get("/api/v1/nodes")
    assert shed.status_code == 503 and shed.headers["retry-after"] == "2"
    assert "control loop is 25 s behind" in shed.json()["error"] and shed.json()["fix"]
    assert client.get("/healthz").json()["status"] == "ok"  # 25 s is not yet a stall; /healthz is never shed
    assert client.get("/metrics").status_code == 200
    push = encode(batch("n1", [Record(1, lost_gpu("n1", T0))]))
    headers = {"Content-Type": JSON, **apiclient.AUTH}
    assert client.post("/api/v1/ingest", content=push, headers=headers).status_code == 200
    plane.tick()
    assert client.get("/api/v1/nodes").status_code == 200


def test_every_read_that_may_wait_says_so_in_the_api_description(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    spec = TestClient(create_app(plane, tokens=apiclient.grant(plane))).get("/openapi.json").json()
    assert "503" in spec["paths"]["/api/v1/nodes"]["get"]["responses"]
    assert "503" not in spec["paths"]["/api/v1/ingest"]["post"]["responses"]
