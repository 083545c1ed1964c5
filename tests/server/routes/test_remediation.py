"""POST /api/v1/remediation/replay: a candidate policy rehearsed over what the control plane recorded, answered to a
viewer, changing nothing; a policy that does not validate or a window that does not parse is a 400 with the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.state import open_state
from tests import apiclient
from tests.control.helpers import Clock, plane_at
from tests.remediate.recorded_day import record_day

REPLAY = "/api/v1/remediation/replay"
STRICT = """apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: strict-breaker}
spec:
  breaker: {threshold: 2, minFailures: 2, window: 10m}
"""
VIEWER = {"Authorization": "Bearer v-secret"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A control plane started again on the state of seven recorded hours (remediation off: it only reads)."""
    home: Path = record_day(tmp_path_factory.mktemp("home"), hours=7.0)
    plane = plane_at(open_state(home, create=False), Clock())
    apiclient.grant(plane, "v-secret", "viewer")
    yield plane
    plane.close()
    plane.db.close()


@pytest.fixture(scope="module")
def remote(plane: Any) -> Any:
    """A client on another host, where reads need a token."""
    return apiclient.client(plane, remote="10.1.2.3")


def test_a_viewer_rehearses_a_stricter_breaker(plane: Any, remote: Any) -> None:
    audit_before = len(plane.store.audit_log.entries())
    resp = remote.post(REPLAY, json={"policy": STRICT, "since": "1d"}, headers=VIEWER)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["baseline"] == "recorded" and body["incidents"] == 5
    assert body["totals"]["breaker_trips"] == {"current": 0, "candidate": 1, "difference": 1}
    assert body["totals"]["gpu_hours"]["difference"] < 0
    assert [d["incident"] for d in body["differences"]] == ["INC-000003", "INC-000004", "INC-000005"]
    assert body["differences"][0]["candidate"]["steps"] == {"cordon": "refused"}
    assert len(plane.store.audit_log.entries()) == audit_before  # a rehearsal writes nothing


def test_json_text_is_a_manifest_too(remote: Any) -> None:
    policy = '{"apiVersion": "gpufleet.io/v1", "kind": "RemediationPolicy", "metadata": {"name": "as-run"}}'
    resp = remote.post(REPLAY, json={"policy": policy}, headers=VIEWER)
    assert resp.status_code == 200, resp.text
    assert resp.json()["differences"] == []


def test_without_a_token_from_another_host_it_is_refused(remote: Any) -> None:
    assert remote.post(REPLAY, json={"policy": STRICT}).status_code == 401


@pytest.mark.parametrize(
    ("body", "said", "fix"),
    [
        ({"policy": STRICT.replace("threshold", "treshold")}, "treshold", "threshold"),
        ({"policy": "kind: Runbook\napiVersion: gpufleet.io/v1\n"}, "expected kind: RemediationPolicy", "kind"),
        ({"policy": STRICT, "since": "a month"}, "since 'a month' is not a duration", "30d"),
        ({"policy": STRICT, "since": "1s"}, "no incidents were recorded", "widen"),
        ({"policy": STRICT, "rebootTime": "soon"}, "rebootTime 'soon' is not a duration", "5m"),
    ],
)
def test_bad_input_is_400_with_the_fix(remote: Any, body: dict[str, str], said: str, fix: str) -> None:
    resp = remote.post(REPLAY, json=body, headers=VIEWER)
    assert resp.status_code == 400, resp.text
    assert said in resp.json()["error"] and fix in (resp.json()["fix"] or "")


def test_openapi_describes_it(remote: Any) -> None:
    spec = remote.get("/openapi.json").json()
    op = spec["paths"][REPLAY]["post"]
    assert "400" in op["responses"] and op["tags"] == ["remediation"]
