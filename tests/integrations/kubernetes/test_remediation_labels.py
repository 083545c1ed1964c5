"""The Kubernetes backend's topology labels through the official client over real HTTP: a small API server holds a
node as kubectl prints it (data/gpu_drain/nodes.json) and applies each PATCH as the API server applies a merge patch
to metadata.labels (a key given null is removed, a key not given is left alone), so what is checked is what the
client puts on the wire and what a node would carry after it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.remediation import KubernetesBackend
from gpufleet.integrations.kubernetes.topology import LEAF_LABEL, MANAGED_LABELS, NVLINK_DOMAIN_LABEL, SPINE_LABEL
from gpufleet.remediate.backends.base import LabelsNodes
from tests.integrations.kubernetes.k8s_api import DATA

kube = pytest.importorskip("kubernetes.client")

NODE = "dgx-004"
PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch (for labels, a strategic merge patch does the same)."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = _merge(out.get(key) or {}, value)
        else:
            out[key] = value
    return out


class Api:
    """The node and event endpoints of the API server that the label write uses, and what reached them."""

    def __init__(self) -> None:
        nodes = json.loads((DATA / "gpu_drain" / "nodes.json").read_text())["items"]
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.requests: list[tuple[str, str, str, Any]] = []  # method, path, content type, body
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, kind: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, kind, body))
            parts = path.split("?")[0].strip("/").split("/")
            if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                node = self.nodes.get(parts[3])
                if node is None:
                    return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
                if method == "PATCH":
                    assert kind in PATCH_TYPES, kind
                    self.nodes[parts[3]] = node = _merge(node, body)
                    version = int(node["metadata"].get("resourceVersion", "1")) + 1
                    node["metadata"]["resourceVersion"] = str(version)
                return 200, node
            if method == "POST" and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
                return 201, body
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}


@pytest.fixture
def api() -> Iterator[tuple[Api, Any]]:
    state = Api()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, out = state.handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
            raw = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = kube.Configuration()
    config.host = f"http://127.0.0.1:{httpd.server_port}"
    try:
        yield state, kube.CoreV1Api(kube.ApiClient(config))
    finally:
        httpd.shutdown()
        thread.join(timeout=10)


def _patches(state: Api) -> list[Any]:
    return [body for method, _, _, body in state.requests if method == "PATCH"]


def test_topology_labels_are_written_and_every_other_label_is_left_alone(api: tuple[Api, Any]) -> None:
    state, core = api
    backend = KubernetesBackend(core, clock=lambda: 1000.0)
    assert isinstance(backend, LabelsNodes)
    before = dict(state.nodes[NODE]["metadata"]["labels"])
    result = backend.label_node(NODE, {LEAF_LABEL: "leaf-su1-r0", SPINE_LABEL: "spine-1"})
    assert result == f"labelled {NODE}: {LEAF_LABEL}=leaf-su1-r0, {SPINE_LABEL}=spine-1"
    assert _patches(state) == [{"metadata": {"labels": {LEAF_LABEL: "leaf-su1-r0", SPINE_LABEL: "spine-1"}}}]
    after = state.nodes[NODE]["metadata"]["labels"]
    assert after == {**before, LEAF_LABEL: "leaf-su1-r0", SPINE_LABEL: "spine-1"}
    events = [body for method, path, _, body in state.requests if method == "POST"]
    assert [e["reason"] for e in events] == ["GpufleetTopologyLabels"]
    assert (events[0]["involvedObject"]["kind"], events[0]["involvedObject"]["name"]) == ("Node", NODE)


def test_a_moved_host_changes_only_what_moved_and_a_gone_key_is_removed(api: tuple[Api, Any]) -> None:
    state, core = api
    backend = KubernetesBackend(core, clock=lambda: 1000.0)
    backend.label_node(NODE, {LEAF_LABEL: "leaf-su1-r0", SPINE_LABEL: "spine-1", NVLINK_DOMAIN_LABEL: "nvl-a"})
    others = {k: v for k, v in state.nodes[NODE]["metadata"]["labels"].items() if k not in MANAGED_LABELS}
    state.requests.clear()
    backend.label_node(NODE, {LEAF_LABEL: "leaf-su1-r1", SPINE_LABEL: "spine-1", NVLINK_DOMAIN_LABEL: None})
    assert _patches(state) == [{"metadata": {"labels": {LEAF_LABEL: "leaf-su1-r1", NVLINK_DOMAIN_LABEL: None}}}]
    labels = state.nodes[NODE]["metadata"]["labels"]
    assert labels == {**others, LEAF_LABEL: "leaf-su1-r1", SPINE_LABEL: "spine-1"}


def test_labels_already_there_are_not_written_again(api: tuple[Api, Any]) -> None:
    state, core = api
    backend = KubernetesBackend(core, clock=lambda: 1000.0)
    backend.label_node(NODE, {LEAF_LABEL: "leaf-su1-r0"})
    state.requests.clear()
    assert backend.label_node(NODE, {LEAF_LABEL: "leaf-su1-r0", NVLINK_DOMAIN_LABEL: None}) == ""
    assert [method for method, *_ in state.requests] == ["GET"]  # read, nothing to write, no event


def test_a_label_gpufleet_does_not_own_is_refused_before_any_request(api: tuple[Api, Any]) -> None:
    state, core = api
    backend = KubernetesBackend(core, clock=lambda: 1000.0)
    with pytest.raises(BackendError, match=r"nvidia\.com/gpu\.product"):
        backend.label_node(NODE, {LEAF_LABEL: "leaf-1", "nvidia.com/gpu.product": "x"})
    assert state.requests == []


def test_a_node_the_api_does_not_have_is_a_backend_error(api: tuple[Api, Any]) -> None:
    _, core = api
    with pytest.raises(BackendError, match="404"):
        KubernetesBackend(core, clock=lambda: 1000.0).label_node("no-such-node", {LEAF_LABEL: "leaf-1"})
