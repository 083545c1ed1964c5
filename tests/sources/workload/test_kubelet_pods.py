"""The node's pod list: a real `kubectl get all -o json` and a constructed kubelet /pods answer indexed by container
ID and pod UID, owners read back to their workloads, terminated pods told apart, and the kubelet reader's errors,
each with its fix, over httpx's mock transport."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.errors import BackendError, ParseError
from gpufleet.model.attribution import Attribution
from gpufleet.parsers.cgroups import CgroupRef
from gpufleet.sources.workload.kubelet_pods import KubeletPodList, PodIndex, container_id_of, workload_of
from tests.conftest import CAPTURES

DATA = CAPTURES / "kubelet_pods"


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((DATA / name).read_text())
    return obj


@pytest.fixture(scope="module")
def node() -> PodIndex:
    return PodIndex.from_pod_list(load("podlist_gpu_node.constructed.json"))


def by_id(index: PodIndex, cid: str) -> Attribution | None:
    return index.owner(CgroupRef(container_id=cid))


def test_a_real_kubectl_list_indexes_its_pods_and_passes_over_the_rest() -> None:
    index = PodIndex.from_pod_list(load("kubectl_get_all_kubeadm_docker.json"))
    assert [p.name for p in index.pods] == [
        "nginx-deployment-9456bbbf9-476ff",
        "nginx-deployment-9456bbbf9-ln28l",
        "nginx-deployment-9456bbbf9-tqlmd",
    ]  # the Service, Deployment and ReplicaSet of the same List are not pods
    want = Attribution("nginx-deployment-9456bbbf9-476ff", "default", "nginx", "nginx-deployment")
    assert by_id(index, "6bb0ce4231a7dd4d87b0f533e7b371174956155b100c65b5a0891c21db059395") == want
    ln28l = CgroupRef(pod_uid="dc365fc1-d596-459d-afb5-769f2f7b3f01", container_id="1" * 64)
    assert index.owner(ln28l) == Attribution("nginx-deployment-9456bbbf9-ln28l", "default", "nginx", "nginx-deployment")
    assert index.running("default", "nginx-deployment-9456bbbf9-tqlmd")
    assert not index.running("default", "no-such-pod")


def test_every_kind_of_container_is_found_by_its_id(node: PodIndex) -> None:
    api = ("trainer-api-7d9f8c6b5d-x2x9q", "ml")
    assert by_id(node, "a" * 64) == Attribution(*api, "server", "trainer-api")
    assert by_id(node, "b" * 64) == Attribution(*api, "metrics-sidecar", "trainer-api")
    assert by_id(node, "c" * 64) == Attribution(*api, "fetch-weights", "trainer-api")  # init
    assert by_id(node, "d" * 64) == Attribution(*api, "debugger-abcde", "trainer-api")  # ephemeral
    assert by_id(node, "e" * 64) == Attribution("inference-0", "serving", "vllm", "inference")  # cri-o://
    assert by_id(node, "E" * 64) == by_id(node, "e" * 64)
    assert by_id(node, "0" * 64) is None
    assert node.has_container("a" * 64) and not node.has_container("0" * 64)


@pytest.mark.parametrize(
    ("cid", "workload"),
    [
        ("a" * 64, "trainer-api"),  # ReplicaSet trainer-api-7d9f8c6b5d, pod-template-hash 7d9f8c6b5d
        ("e" * 64, "inference"),  # StatefulSet
        ("f" * 64, "llm-pretrain"),  # a Job of a JobSet: the JobSet label names it
        ("1" * 64, "bert-finetune"),  # a PyTorchJob
        ("2" * 64, "nightly-eval-28421337"),  # a Job
        ("3" * 64, "crashy"),
        ("4" * 64, ""),  # a bare pod
        ("5" * 64, "dcgm-exporter"),  # a DaemonSet
        ("6" * 64, ""),  # a static pod, "owned" by its node
        ("7" * 64, ""),  # an owner that is no controller
    ],
)
def test_the_workload_is_the_pods_owner(node: PodIndex, cid: str, workload: str) -> None:
    found = by_id(node, cid)
    assert found is not None and found.workload == workload


def test_by_pod_uid_only_a_pod_of_one_container_answers(node: PodIndex) -> None:
    unknown = "9" * 64
    one = CgroupRef(pod_uid="5f0c2e8a-1b3d-4c5e-8f7a-9b0c1d2e3f4a", container_id=unknown)
    assert node.owner(one) == Attribution("inference-0", "serving", "vllm", "inference")
    several = CgroupRef(pod_uid="0b6e4d2a-5c1f-4a8e-9d3b-7f2e1c0a9b81", container_id=unknown)
    assert node.owner(several) is None  # server, metrics-sidecar, fetch-weights, debugger: which one is unknown
    conmon = CgroupRef(pod_uid="0B6E4D2A-5C1F-4A8E-9D3B-7F2E1C0A9B81")  # no container (CRI-O's conmon)
    assert node.owner(conmon) is None
    assert node.owner(CgroupRef(pod_uid="deadbeef-0000-4000-8000-000000000000")) is None
    assert node.owner(CgroupRef(slurm_job="5")) is None


def test_a_static_pod_is_found_by_its_config_hash_in_either_view(node: PodIndex) -> None:
    static = CgroupRef(pod_uid="8daa50c3a64c9ff60bb9eab7b44b56fd", container_id="0" * 64)
    assert node.owner(static) == Attribution("kube-proxy-gpu-node-7", "kube-system", "kube-proxy", "")
    mirror = {  # the API server's view: the mirror pod has a UID of its own and the hash in an annotation
        "items": [{
            "metadata": {"name": "etcd-cp", "namespace": "kube-system", "uid": "7c1e0b9a-0000-4000-8000-000000000001",
                         "annotations": {"kubernetes.io/config.mirror": "1864dd0546310be9937c37cf88024cb8"}},
            "spec": {"containers": [{"name": "etcd"}]}, "status": {"phase": "Running"},
        }]
    }  # fmt: skip
    index = PodIndex.from_pod_list(mirror)
    found = index.owner(CgroupRef(pod_uid="1864dd0546310be9937c37cf88024cb8"))
    assert found == Attribution("etcd-cp", "kube-system", "etcd", "")


@pytest.mark.parametrize(
    ("namespace", "pod", "running"),
    [
        ("ml", "trainer-api-7d9f8c6b5d-x2x9q", True),
        ("users", "scratch", True),  # Pending: its devices are allotted already
        ("ml", "nightly-eval-28421337-7xk2p", False),  # Succeeded
        ("ml", "crashy-6f5d4c3b2a-qwert", False),  # Failed
        ("users", "old-notebook", False),  # deleted, its containers stopped, phase not yet updated
        ("ml", "scratch", False),  # another namespace's name
    ],
)
def test_only_running_and_pending_pods_hold_devices(node: PodIndex, namespace: str, pod: str, running: bool) -> None:
    assert node.running(namespace, pod) is running


def test_malformed_items_are_passed_over(node: PodIndex) -> None:
    names = {p.name for p in node.pods}
    assert "trainer-api" not in names  # the Service
    weird = next(p for p in node.pods if p.name == "weird-statuses")
    assert (weird.phase, weird.containers) == ("", ())
    assert len(node) == 12


@pytest.mark.parametrize("obj", [[], "x", {"items": "nope"}, {"items": {"a": 1}}])
def test_a_list_that_is_no_pod_list_is_a_parse_error(obj: Any) -> None:
    with pytest.raises(ParseError) as caught:
        PodIndex.from_pod_list(obj)
    assert caught.value.fix


def test_an_empty_or_itemless_list_is_an_empty_index() -> None:
    assert len(PodIndex.from_pod_list({"kind": "PodList", "items": None})) == 0
    assert len(PodIndex.from_pod_list({})) == 0


def test_container_ids_lose_their_runtime_scheme() -> None:
    assert container_id_of("containerd://" + "A" * 64) == "a" * 64
    assert container_id_of("cri-o://abc") == "abc"
    assert container_id_of("docker://abc") == "abc"
    assert [container_id_of(v) for v in ("", None, 12, ["x"])] == ["", "", "", ""]


def test_workload_of_odd_metadata() -> None:
    rs = {"kind": "ReplicaSet", "name": "web-abc", "controller": True}
    assert workload_of({"ownerReferences": [rs], "labels": {"pod-template-hash": "xyz"}}) == "web-abc"
    assert workload_of({"ownerReferences": "nope", "labels": ["x"]}) == ""
    assert workload_of({"labels": {"job-name": "pi"}}) == "pi"
    assert workload_of({"ownerReferences": [{"kind": "Job", "controller": True}], "labels": {}}) == ""


# ---------------------------------------------------------------- the reader


def reader(tmp_path: Path, handler: Any, url: str = "https://127.0.0.1:10250/pods") -> KubeletPodList:
    token = tmp_path / "token"
    token.write_text("sekrit-token\n")
    return KubeletPodList(url=url, token_path=token, transport=httpx.MockTransport(handler))


def test_the_reader_sends_the_token_and_indexes_the_answer(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    body = (DATA / "podlist_gpu_node.constructed.json").read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=body)

    got = reader(tmp_path, handler)()
    assert seen[0].headers["Authorization"] == "Bearer sekrit-token" and seen[0].url.path == "/pods"
    assert by_id(got, "a" * 64) is not None


@pytest.mark.parametrize(
    ("status", "url", "fix_says"),
    [
        (403, "https://127.0.0.1:10250/pods", "nodes/proxy"),
        (401, "https://127.0.0.1:10250/pods", "nodes/pods"),
        (403, "https://10.96.0.1/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-7", "list on pods"),
        (500, "https://127.0.0.1:10250/pods", "10250"),
    ],
)
def test_refusals_say_what_to_grant(tmp_path: Path, status: int, url: str, fix_says: str) -> None:
    with pytest.raises(BackendError) as caught:
        reader(tmp_path, lambda r: httpx.Response(status, text="Forbidden"), url).read()
    assert str(status) in caught.value.message and fix_says in (caught.value.fix or "")


def test_an_unreachable_kubelet_says_hostnetwork(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(BackendError) as caught:
        reader(tmp_path, refuse).read()
    assert "hostNetwork" in (caught.value.fix or "")


@pytest.mark.parametrize("body", [b"<html>not json</html>", b"[1, 2]"])
def test_an_answer_that_is_no_json_object_is_a_parse_error(tmp_path: Path, body: bytes) -> None:
    with pytest.raises(ParseError):
        reader(tmp_path, lambda r: httpx.Response(200, content=body)).read()


def test_a_missing_token_says_how_to_mount_it(tmp_path: Path) -> None:
    pods = KubeletPodList(token_path=tmp_path / "absent", transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    with pytest.raises(BackendError) as caught:
        pods.read()
    assert "automountServiceAccountToken" in (caught.value.fix or "")


def test_without_a_token_no_authorization_is_sent(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "PodList", "items": []})

    assert len(KubeletPodList(token_path=None, transport=httpx.MockTransport(handler)).index()) == 0
    assert "Authorization" not in seen[0].headers


def test_an_unchanged_answer_is_the_same_index_over_one_kept_connection(tmp_path: Path) -> None:
    """The kubelet's /pods over a real HTTP server: an answer equal to the last is not decoded again (the agent keeps
    what it derived from the index while the same one comes back), a changed one is, and one connection serves."""
    body = {"current": (DATA / "podlist_gpu_node.constructed.json").read_bytes()}
    connections: set[tuple[str, int]] = set()

    class Pods(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            connections.add(self.client_address)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body["current"])))
            self.end_headers()
            self.wfile.write(body["current"])

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pods)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        pods = KubeletPodList(url=f"http://127.0.0.1:{server.server_address[1]}/pods", token_path=None)
        first = pods.index()
        assert pods.index() is first and pods.index() is first
        changed = json.loads(body["current"])
        changed["items"] = changed["items"][:1]
        body["current"] = json.dumps(changed).encode()
        second = pods.index()
        assert second is not first and len(second) == 1
        assert len(connections) == 1
        pods.close()
    finally:
        server.shutdown()
        server.server_close()
