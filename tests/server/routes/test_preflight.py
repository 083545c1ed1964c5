"""The GPU preflight through a real `gpufleet server` serving HTTPS (a CA and a certificate made with openssl, as
cert-manager or the chart's genCA would): the API server's AdmissionReview v1 answered with a patch that makes a
valid Pod, malformed bodies refused with 400 and what is wrong, the failure report refused without an agent token
and opening an incident on the node with one, and `gpufleet preflight` in the init container failing fast on a
failed dcgmi diag, naming the node and the check, after reporting it."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest

from tests.apiclient import free_port
from tests.conftest import REPO_ROOT, require_tool
from tests.integrations.kubernetes.test_admission import apply_patch
from tests.server_process import Proc, running, sh, shell_env, wait_for

DATA = REPO_ROOT / "tests" / "integrations" / "kubernetes" / "data" / "admission"
FAILING_DIAG = REPO_ROOT / "tests" / "captures" / "dcgmi_diag_2x_r2_pcie_fail.txt"
PASSING_DIAG = REPO_ROOT / "tests" / "captures" / "dcgmi_diag_3x_r3_pass.txt"
NODE = "gpu-node-7"
START_WITHIN_S = 90.0


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for 127.0.0.1 (the name the clients dial)."""
    require_tool("openssl")
    folder.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=gpufleet test CA", cwd=folder)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj",
             "/CN=gpufleet-server", cwd=folder)  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
             "tls.crt", "-days", "2", "-extfile", "san.ext", cwd=folder)  # fmt: skip
    return folder / "ca.crt", folder / "tls.crt", folder / "tls.key"


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


class Plane:
    def __init__(self, url: str, ca: Path, token: str, home: Path, cwd: Path) -> None:
        self.url, self.ca, self.token, self.home, self.cwd = url, ca, token, home, cwd
        self.http = httpx.Client(base_url=url, verify=trusting(ca), timeout=15, trust_env=False)

    def incidents(self) -> list[dict[str, Any]]:
        answer = self.http.get("/api/v1/incidents", params={"node": NODE})
        assert answer.status_code == 200, answer.text
        return list(answer.json())


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    root = tmp_path_factory.mktemp("preflight")
    ca, cert, key = certificates(root / "tls")
    home, cwd = root / "home", root / "cwd"
    cwd.mkdir()
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    env = shell_env(
        home,
        {
            "GPUFLEET_PREFLIGHT_IMAGE": "registry.example.com/gpufleet:0.1.0",
            "GPUFLEET_PREFLIGHT_SERVER": "https://gpufleet-server.gpufleet.svc:8470",
            "GPUFLEET_PREFLIGHT_CA_FILE": str(ca),
            "GPUFLEET_PREFLIGHT_TOKEN_SECRET": "gpufleet-preflight-token",
        },
    )
    line = f"gpufleet server --host 127.0.0.1 --port {port} --backend none --tls-cert {cert} --tls-key {key}"
    procs: list[Proc] = []
    with running(procs):
        procs.append(Proc("server", line, env, cwd))

        def healthy() -> bool:
            answer = httpx.get(f"{url}/healthz", verify=trusting(ca), timeout=5, trust_env=False)
            return answer.status_code in (200, 503)

        wait_for(healthy, "the control plane's /healthz over HTTPS", START_WITHIN_S, procs)
        made = sh("gpufleet token create --role agent --name preflight --out preflight.token", env, cwd)
        assert made.returncode == 0, made.stderr
        token = (cwd / "preflight.token").read_text().strip()
        yield Plane(url, ca, token, home, cwd)


def test_the_api_servers_review_is_answered_with_a_patch_that_makes_a_valid_pod(plane: Plane) -> None:
    body = json.loads((DATA / "pod_create.json").read_text())
    answer = plane.http.post("/admission/v1/preflight", json=body)  # no token: the API server sends none
    assert answer.status_code == 200, answer.text
    review = answer.json()
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    pod = apply_patch(body["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    kubernetes_validate.validate(pod, "1.33.0", strict=True)
    container = pod["spec"]["initContainers"][0]
    assert container["name"] == "gpufleet-preflight" and container["image"] == "registry.example.com/gpufleet:0.1.0"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "JobSet/train" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUFLEET_CA_PEM"]["value"] == plane.ca.read_text().strip()  # the init container trusts the server
    assert env["GPUFLEET_SERVER"]["value"] == "https://gpufleet-server.gpufleet.svc:8470"

    again = plane.http.post("/admission/v1/preflight", json={**body, "request": {**body["request"], "object": pod}})
    assert again.status_code == 200 and "patch" not in again.json()["response"]  # never patched twice


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "the body is not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "not an AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "has no request"),
    ],
)
def test_malformed_reviews_are_refused_with_400_and_what_is_wrong(plane: Plane, content: bytes, message: str) -> None:
    answer = plane.http.post("/admission/v1/preflight", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"] and answer.json()["fix"]


def test_a_failure_report_needs_an_agent_token(plane: Plane) -> None:
    body = {"node": NODE, "check": "dcgm-diag", "output": "PCIe: Fail"}
    assert plane.http.post("/api/v1/preflight/failures", json=body).status_code == 401
    wrong = plane.http.post(
        "/api/v1/preflight/failures",
        json={**body, "check": "memtest"},
        headers={"Authorization": f"Bearer {plane.token}"},
    )
    assert wrong.status_code == 422 and "check" in wrong.json()["error"]


def test_the_preflight_fails_fast_names_the_node_and_opens_an_incident(plane: Plane) -> None:
    env = shell_env(
        plane.home / "pod",
        {
            "GPUFLEET_SERVER": plane.url,
            "GPUFLEET_TOKEN": plane.token,
            "GPUFLEET_CA_PEM": plane.ca.read_text(),
            "NODE_NAME": NODE,
        },
    )
    done = sh(
        f"gpufleet preflight --pod ml/train-workers-0-0-x7k2p --gang JobSet/train --dcgmi-output {FAILING_DIAG}"
        f" --allreduce-output {REPO_ROOT / 'tests/triage/readers/data/nccl_tests_a100_allreduce_8gpu.txt'}",
        env,
        plane.cwd,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert f"GPU preflight failed on node {NODE}: dcgm-diag:" in said
    assert "PCIe" in said and "reported: INC-" in said.replace("\n", " ")
    incidents = plane.incidents()
    assert [i["cause"] for i in incidents] == ["diag-failure"]
    (incident,) = incidents
    assert incident["state"] == "open" and incident["severity"] == "critical"
    detail = plane.http.get(f"/api/v1/incidents/{incident['id']}").json()
    assert "GPU preflight dcgm-diag failed" in detail["summary"] and "ml/train-workers-0-0-x7k2p" in detail["summary"]
    assert any("PCIe" in e["text"] for e in detail["evidence"])


def test_a_passing_preflight_lets_the_pod_start(plane: Plane) -> None:
    env = shell_env(plane.home / "pod", {"NODE_NAME": "gpu-node-8"})
    done = sh(f"gpufleet preflight --dcgmi-output {PASSING_DIAG}", env, plane.cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GPU preflight passed on node gpu-node-8" in done.stdout
