"""The GPU preflight webhook's decisions on AdmissionReview v1 requests as the API server sends them: which pods get
the init container, with which GPUs, which gang each project's pods belong to, idempotence, opt-out, and the
bodies it refuses. Every patched pod is checked against Kubernetes' own Pod schema (kubernetes-validate, strict)
and read by the official client's V1Pod model."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import pytest

from gpufleet.integrations.kubernetes.admission import (
    CONTAINER,
    AdmissionError,
    Gang,
    Settings,
    gang_of,
    gpu_request,
    review,
)

DATA = Path(__file__).parent / "data" / "admission"
K8S = "1.33.0"
SETTINGS = Settings(
    image="registry.example.com/gpufleet:0.1.0",
    server_url="https://gpufleet-server.gpufleet.svc:8470",
    ca_pem="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    token_secret="gpufleet-preflight-token",
)


def request(name: str = "pod_create.json") -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def with_pod(pod: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    body = request()
    body["request"]["object"] = pod
    body["request"]["namespace"] = namespace
    return body


def pod(
    containers: list[dict[str, Any]] | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml", "labels": labels or {}, "annotations": annotations or {}}
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers or [gpu_container("main", 1)], **spec},
    }


def gpu_container(name: str, count: int, resource: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": {resource: str(count)}}, **extra}


def apply_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` (the only operation the webhook sends): into an object's member or a list's index."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add", op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            assert last not in target, f"add over an existing member {op['path']}"
            target[last] = op["value"]
    return out


def patched(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer and the pod with its patch applied (checked as the API server would)."""
    answer, _ = review(body, SETTINGS)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is True
    if "patch" not in response:
        return answer, body["request"]["object"]
    assert response["patchType"] == "JSONPatch"
    result = apply_patch(body["request"]["object"], json.loads(base64.b64decode(response["patch"])))
    kubernetes_validate.validate(result, K8S, strict=True)
    client = kubernetes.client.ApiClient()
    model = client._ApiClient__deserialize(result, "V1Pod")  # the official model, as the client reads a pod
    assert model.spec.init_containers[0].name == CONTAINER
    return answer, result


def preflight_container(result: dict[str, Any]) -> dict[str, Any]:
    first = result["spec"]["initContainers"][0]
    assert first["name"] == CONTAINER
    return first


def test_the_documentations_pod_create_gets_the_preflight_with_the_pods_gpus() -> None:
    _, result = patched(request())
    container = preflight_container(result)
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},  # small: an init container's requests never add up
        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"},
    }
    assert container["image"] == SETTINGS.image
    assert container["args"][:5] == ["preflight", "--node", "$(NODE_NAME)", "--pod", "$(POD_NAMESPACE)/$(POD_NAME)"]
    assert container["args"][5:] == ["--gang", "JobSet/train"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPUFLEET_SERVER"]["value"] == SETTINGS.server_url
    assert env["GPUFLEET_CA_PEM"]["value"] == SETTINGS.ca_pem
    assert env["GPUFLEET_PREFLIGHT_GPUS"]["value"] == "8"
    assert env["GPUFLEET_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpufleet-preflight-token",
        "key": "token",
        "optional": True,
    }
    assert result["spec"]["containers"] == request()["request"]["object"]["spec"]["containers"]  # untouched


def test_a_request_that_is_not_a_pod_is_allowed_untouched() -> None:
    body = request("docs_scale_update.json")
    answer, decision = review(body, SETTINGS)
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True},
    }
    assert not decision.patched


def test_a_pod_without_gpus_is_untouched() -> None:
    body = with_pod(pod([{"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]))
    answer, decision = review(body, SETTINGS)
    assert "patch" not in answer["response"] and decision.reason == "asks for no GPU"


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"])
def test_every_vendors_gpu_resource_counts(resource: str) -> None:
    _, result = patched(with_pod(pod([gpu_container("main", 4, resource)])))
    assert preflight_container(result)["resources"]["limits"][resource] == "4"


def test_a_request_alone_counts_and_the_sum_of_app_containers_is_asked_for() -> None:
    """The device manager hands an init container's devices to the app containers first: asking for their sum
    gives the preflight exactly the GPUs they will use, however they are split."""
    containers = [
        {
            "name": "a",
            "image": "x",
            "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
        },
        gpu_container("b", 3),
        {"name": "c", "image": "x"},
    ]
    assert gpu_request(pod(containers)) == ({"nvidia.com/gpu": 5}, ())
    _, result = patched(with_pod(pod(containers)))
    assert preflight_container(result)["resources"]["limits"]["nvidia.com/gpu"] == "5"


def test_an_init_container_asking_for_more_sets_the_count_and_sidecars_keep_their_own() -> None:
    spec = {
        "initContainers": [
            gpu_container("warmup", 8),
            gpu_container("monitor", 1, restartPolicy="Always"),  # a sidecar: its GPU is its own for the pod's life
        ]
    }
    assert gpu_request(pod([gpu_container("main", 4)], **spec))[0] == {"nvidia.com/gpu": 8}
    _, result = patched(with_pod(pod([gpu_container("main", 4)], **spec)))
    names = [c["name"] for c in result["spec"]["initContainers"]]
    assert names == [CONTAINER, "warmup", "monitor"]  # first: it runs before everything else


def test_a_dra_claim_is_shared_with_the_preflight() -> None:
    claimed = {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
    spec = {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]}
    _, result = patched(with_pod(pod([claimed], **spec)))
    resources = preflight_container(result)["resources"]
    assert resources["claims"] == [{"name": "gpus"}]
    assert not set(resources["limits"]) - {"cpu", "memory"}  # the claim's devices, no device-plugin GPU


def test_a_pod_that_has_the_preflight_is_not_patched_twice() -> None:
    _, once = patched(request())
    answer, decision = review(with_pod(once), SETTINGS)
    assert "patch" not in answer["response"] and "already has" in decision.reason


@pytest.mark.parametrize("value", ["false", "skip", "False"])
def test_a_pod_that_opts_out_passes_untouched(value: str) -> None:
    answer, decision = review(with_pod(pod(annotations={"gpufleet.io/preflight": value})), SETTINGS)
    assert "patch" not in answer["response"] and decision.reason.startswith("opted out")


def test_namespaces_not_selected_pass_untouched() -> None:
    chosen = Settings(image="gpufleet", namespaces=frozenset({"ml"}))
    assert review(with_pod(pod(), "ml"), chosen)[1].patched
    answer, decision = review(with_pod(pod(), "kube-system"), chosen)
    assert "patch" not in answer["response"] and "not selected" in decision.reason


def test_only_creates_are_patched() -> None:
    body = with_pod(pod())
    body["request"]["operation"] = "UPDATE"
    assert "patch" not in review(body, SETTINGS)[0]["response"]


# Labels, annotations and owners as each project writes them on the pods it creates (see admission.py for sources).
GANGS = [
    pytest.param(
        {"labels": {"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "w"}},
        Gang("JobSet", "train"),
        id="jobset",
    ),
    pytest.param(
        {"owners": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "uid": "u1"}]},
        Gang("PyTorchJob", "bert"),
        id="pytorchjob-owner",
    ),
    pytest.param(
        {
            "labels": {
                "training.kubeflow.org/job-name": "bert",
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": "worker",
            }
        },
        Gang("PyTorchJob", "bert"),
        id="pytorchjob-labels",
    ),
    pytest.param(
        {
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "1",
                "leaderworkerset.sigs.k8s.io/worker-index": "2",
            },
            "annotations": {"leaderworkerset.sigs.k8s.io/size": "4"},
        },
        Gang("LeaderWorkerSet", "vllm-1", 4),
        id="leaderworkerset-group",
    ),
    pytest.param(
        {
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": "sample-group"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"},
        },
        Gang("KueuePodGroup", "sample-group", 2),
        id="kueue-pod-group",
    ),
    pytest.param(
        {"labels": {"kueue.x-k8s.io/podset": "main"}, "annotations": {"kueue.x-k8s.io/workload": "job-train-3f2a1"}},
        Gang("KueueWorkload", "job-train-3f2a1"),
        id="kueue-workload",
    ),
    pytest.param({"labels": {"app": "notebook"}}, None, id="alone"),
    pytest.param(
        {"labels": {"training.kubeflow.org/job-name": "x", "training.kubeflow.org/operator-name": "tfjob-controller"}},
        None,
        id="tfjob-is-not-a-pytorchjob",
    ),
]


@pytest.mark.parametrize(("meta", "gang"), GANGS)
def test_gangs_are_recognised_by_what_their_project_writes(meta: dict[str, Any], gang: Gang | None) -> None:
    subject = pod(**meta)
    assert gang_of(subject) == gang
    _, result = patched(with_pod(subject))
    args = preflight_container(result)["args"]
    if gang is None:
        assert "--gang" not in args
    else:
        assert args[args.index("--gang") + 1] == gang.ref
        assert ("--gang-size" in args) == (gang.size is not None)


MALFORMED = [
    pytest.param([], "not a JSON object", id="a-list"),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "not an AdmissionReview", id="v1beta1"
    ),
    pytest.param({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request", id="no-request"),
    pytest.param(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {"kind": "Pod"}}},
        "no uid",
        id="no-uid",
    ),
    pytest.param(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE"},
        },
        "no Pod object",
        id="no-object",
    ),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED)
def test_malformed_bodies_are_refused_with_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(AdmissionError, match=message) as caught:
        review(body, SETTINGS)
    assert caught.value.fix


def test_a_gpu_count_that_is_not_a_whole_number_is_refused() -> None:
    with pytest.raises(AdmissionError, match=r"spec.containers\[0\].resources.limits\[nvidia.com/gpu\]"):
        review(
            with_pod(pod([gpu_container("main", 1) | {"resources": {"limits": {"nvidia.com/gpu": "half"}}}])), SETTINGS
        )


@pytest.mark.parametrize(
    "odd",
    [
        {"metadata": {"ownerReferences": 5, "labels": "x", "annotations": [1]}},
        {"spec": {"containers": [gpu_container("m", 1) | {"resources": {"claims": 7}}], "resourceClaims": "gpus"}},
        {"spec": {"containers": [gpu_container("m", 1) | {"resources": []}]}},
    ],
)
def test_odd_shapes_inside_a_pod_are_read_as_absent_never_a_crash(odd: dict[str, Any]) -> None:
    subject = pod()
    for part, value in odd.items():
        subject[part] = {**subject[part], **value}
    answer, _ = review(with_pod(subject), SETTINGS)
    assert answer["response"]["allowed"] is True
