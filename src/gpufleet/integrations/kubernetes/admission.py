"""The GPU preflight as a mutating admission webhook: an AdmissionReview v1 (admission.k8s.io/v1) in, its answer out.

A Pod that asks for accelerators (nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi in a container's limits or
requests, or a DRA resource claim) gets an init container, `gpufleet-preflight`, prepended: it runs `gpufleet
preflight`, which runs `gpufleet diag -r 1`'s checks on the GPUs the pod was given and, on a failure, reports the
node to the control plane and exits non-zero, so the pod fails before the job starts on a bad GPU. A pod of a gang
(JobSet, PyTorchJob, LeaderWorkerSet group, Kueue pod group or workload) is told its gang, and also runs the
collective check. The answer is always `allowed: true`: the webhook changes a pod, never refuses one.

Which GPUs the init container gets. The kubelet's device manager allocates a pod's init containers first and keeps
the devices a (non-restartable) init container got as the pod's reusable set; each app container then takes its
devices from that set before any other (kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go: `Allocate`
adds an init container's devices to `devicesToReuse`; `devicesToAllocate` "Allocates from reusableDevices list
first"; an app container's devices are then removed from the set). So an init container that asks for the sum of the
app containers' GPUs of each resource is given exactly the devices the app containers will run on. Asking for the
largest container's count instead covers only one container when several hold GPUs. The sum never raises what
the pod needs of the node: a pod's effective request is the larger of its largest init container and the sum of
its app containers (and sidecars, which keep their own devices and are left out here). A DRA claim is shared by
every container that names it (resources.claims), so the init container names the same claims.

Pure: no I/O, no client. The server's route calls `review` and answers what it returns.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import UserError

API_VERSION = "admission.k8s.io/v1"
CONTAINER = "gpufleet-preflight"
# A pod with this annotation set to "false" (or "skip") is left alone; the chart's objectSelector can also leave out
# pods with the label of the same name.
OPT_OUT = "gpufleet.io/preflight"
OPT_OUT_VALUES = frozenset({"false", "skip", "off", "disabled"})
# Every vendor's whole-device resource (catalog/vendors.yaml): NVIDIA's, AMD's and Intel Gaudi's device plugins.
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi")
INIT_CPU, INIT_CPU_LIMIT = "100m", "1"
INIT_MEMORY, INIT_MEMORY_LIMIT = "256Mi", "1Gi"
FIX = (
    "send an AdmissionReview (apiVersion admission.k8s.io/v1) with a request holding uid and object, as the API "
    "server does"
)


class AdmissionError(UserError):
    """A body that is not an AdmissionReview v1 the webhook can answer (the route answers 400)."""


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods that start together and talk over NCCL: which project made them, its name, and how many pods (when the
    pod says)."""

    kind: str  # JobSet, PyTorchJob, LeaderWorkerSet, KueuePodGroup, KueueWorkload
    name: str
    size: int | None = None

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Settings:
    """What the init container runs and how it reaches the control plane."""

    image: str
    server_url: str = ""  # the control plane the init container reports a failure to; empty: it only fails
    ca_pem: str = ""  # the CA that signed the control plane's certificate (the init container trusts it)
    token_secret: str = ""  # a Secret in the pod's namespace holding a preflight token (key `token`); optional there
    token_key: str = "token"
    image_pull_policy: str = "IfNotPresent"
    namespaces: frozenset[str] = field(default_factory=frozenset)  # empty: every namespace the webhook is sent


@dataclass(frozen=True, slots=True)
class Decision:
    """What the webhook did with one pod, and why (for the log and the tests)."""

    patched: bool
    reason: str
    gang: Gang | None = None
    gpus: Mapping[str, int] = field(default_factory=dict)
    claims: tuple[str, ...] = ()


# --- gangs: the labels and annotations each project sets on its pods -------------------------------------------------
# JobSet: kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go, JobSetNameKey "jobset.sigs.k8s.io/jobset-name"
# (a label and an annotation on every pod of the JobSet; the pods are owned by the JobSet's Jobs, not by it).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
# Kubeflow training-operator (PyTorchJob): pkg/apis/kubeflow.org/v1 common_types.go, JobNameLabel
# "training.kubeflow.org/job-name" and OperatorNameLabel "training.kubeflow.org/operator-name"
# ("pytorchjob-controller"); the pods are owned by the PyTorchJob (kubeflow.org/v1). Trainer v2 TrainJobs run as
# JobSets.
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
PYTORCH_OPERATOR = "pytorchjob-controller"
# LeaderWorkerSet: kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go: SetNameLabelKey,
# GroupIndexLabelKey, SizeAnnotationKey. A group (one leader and its workers) is the gang, not the whole set.
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
# Kueue: plain pods admitted together (site/content/en/docs/tasks/run/plain_pods.md): the label
# "kueue.x-k8s.io/pod-group-name" and the annotation "kueue.x-k8s.io/pod-group-total-count"; a started job's pods
# carry its Workload's name, pkg/controller/constants/constants.go WorkloadAnnotation "kueue.x-k8s.io/workload".
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"


def _count(text: Any) -> int | None:
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value > 0 else None


def gang_of(pod: Mapping[str, Any]) -> Gang | None:
    """The gang this pod belongs to, by what the project that made it wrote on it; None for a pod on its own."""
    meta = _mapping(pod.get("metadata"))
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()}
    notes = {str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()}
    owners = [_mapping(o) for o in _items(meta.get("ownerReferences")) if isinstance(o, Mapping)]
    if LWS_NAME in labels:
        group = labels.get(LWS_GROUP_INDEX)
        name = f"{labels[LWS_NAME]}-{group}" if group is not None else labels[LWS_NAME]
        return Gang("LeaderWorkerSet", name, _count(notes.get(LWS_SIZE)))
    jobset = labels.get(JOBSET_NAME) or notes.get(JOBSET_NAME)
    if jobset:
        return Gang("JobSet", jobset)
    owner = next((o for o in owners if o.get("kind") == "PyTorchJob"), None)
    if owner is not None and owner.get("name"):
        return Gang("PyTorchJob", str(owner["name"]))
    if labels.get(KUBEFLOW_JOB_NAME) and labels.get(KUBEFLOW_OPERATOR) == PYTORCH_OPERATOR:
        return Gang("PyTorchJob", labels[KUBEFLOW_JOB_NAME])
    if labels.get(KUEUE_POD_GROUP):
        return Gang("KueuePodGroup", labels[KUEUE_POD_GROUP], _count(notes.get(KUEUE_POD_GROUP_COUNT)))
    if notes.get(KUEUE_WORKLOAD):
        return Gang("KueueWorkload", notes[KUEUE_WORKLOAD])
    return None


# --- what the pod asks for -------------------------------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _quantity(value: Any, where: str) -> int:
    """An extended resource's count: Kubernetes takes only whole numbers for them."""
    try:
        count = int(str(value).strip())
    except ValueError:
        raise AdmissionError(f"{where}: {value!r} is not a whole number of devices", fix=FIX) from None
    return max(count, 0)


def _container_gpus(container: Mapping[str, Any], where: str) -> dict[str, int]:
    resources = _mapping(container.get("resources"))
    out: dict[str, int] = {}
    for part in ("limits", "requests"):  # a limit alone implies the request; both must then be equal
        for name, value in _mapping(resources.get(part)).items():
            if name in GPU_RESOURCES:
                out[name] = max(out.get(name, 0), _quantity(value, f"{where}.resources.{part}[{name}]"))
    return {k: v for k, v in out.items() if v > 0}


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(c, Mapping) for c in value):
        raise AdmissionError(f"request.object.spec.{key} is not a list of containers", fix=FIX)
    return list(value)


def gpu_request(pod: Mapping[str, Any]) -> tuple[dict[str, int], tuple[str, ...]]:
    """The GPUs the init container asks for (per resource, the sum over the app containers; see the module's note)
    and the DRA claims the pod's containers use. Init containers that ask for GPUs themselves (not sidecars) count
    when they ask for more than the app containers: the pod was then scheduled for that many."""
    spec = _mapping(pod.get("spec"))
    total: dict[str, int] = {}
    for i, container in enumerate(_containers(spec, "containers")):
        for name, count in _container_gpus(container, f"spec.containers[{i}]").items():
            total[name] = total.get(name, 0) + count
    for i, container in enumerate(_containers(spec, "initContainers")):
        if container.get("restartPolicy") == "Always":  # a sidecar keeps its devices for the pod's life
            continue
        for name, count in _container_gpus(container, f"spec.initContainers[{i}]").items():
            total[name] = max(total.get(name, 0), count)
    claims: list[str] = []
    for container in _containers(spec, "containers") + _containers(spec, "initContainers"):
        for claim in _items(_mapping(container.get("resources")).get("claims")):
            claim_name = str(_mapping(claim).get("name") or "")
            if claim_name and claim_name not in claims:
                claims.append(claim_name)
    if not claims:  # a claim declared on the pod but named by no container is still the pod's
        claims = [str(_mapping(c).get("name")) for c in _items(spec.get("resourceClaims")) if _mapping(c).get("name")]
    return total, tuple(claims)


# --- the patch -------------------------------------------------------------------------------------------------------


def init_container(settings: Settings, gpus: Mapping[str, int], claims: tuple[str, ...], gang: Gang | None) -> dict:
    """The `gpufleet-preflight` init container: the pod's GPUs, `gpufleet preflight`, and how to report."""
    args = ["preflight", "--node", "$(NODE_NAME)", "--pod", "$(POD_NAMESPACE)/$(POD_NAME)"]
    if gang is not None:
        args += ["--gang", gang.ref]
        if gang.size:
            args += ["--gang-size", str(gang.size)]
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "GPUFLEET_PREFLIGHT_GPUS", "value": str(sum(gpus.values()))},
    ]
    if settings.server_url:
        env.append({"name": "GPUFLEET_SERVER", "value": settings.server_url})
    if settings.ca_pem:
        env.append({"name": "GPUFLEET_CA_PEM", "value": settings.ca_pem})
    if settings.token_secret:
        # optional: a namespace without the Secret still runs the check; only the report is then refused
        ref = {"name": settings.token_secret, "key": settings.token_key, "optional": True}
        env.append({"name": "GPUFLEET_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    # CPU and memory given too: a namespace whose ResourceQuota covers them refuses a pod with a container that
    # names none. Init containers' requests are the larger of theirs and the app containers' sum, so these small
    # ones never change where the pod fits.
    resources: dict[str, Any] = {
        "requests": {"cpu": INIT_CPU, "memory": INIT_MEMORY},
        "limits": {"cpu": INIT_CPU_LIMIT, "memory": INIT_MEMORY_LIMIT},
    }
    for name, count in sorted(gpus.items()):
        resources["limits"][name] = str(count)  # an extended resource's request is its limit
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    return {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": args,
        "env": env,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _patch(pod: Mapping[str, Any], container: dict[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch (RFC 6902) that puts `container` first among the init containers."""
    if _mapping(pod.get("spec")).get("initContainers"):
        return [{"op": "add", "path": "/spec/initContainers/0", "value": container}]
    return [{"op": "add", "path": "/spec/initContainers", "value": [container]}]


def decide(pod: Mapping[str, Any], namespace: str, settings: Settings) -> tuple[Decision, list[dict[str, Any]]]:
    """Whether to add the preflight to `pod`, and the patch that does."""
    meta = _mapping(pod.get("metadata"))
    notes = _mapping(meta.get("annotations"))
    if settings.namespaces and namespace not in settings.namespaces:
        return Decision(False, f"namespace {namespace} is not selected"), []
    if str(notes.get(OPT_OUT, "")).strip().lower() in OPT_OUT_VALUES:
        return Decision(False, f"opted out ({OPT_OUT}: {notes[OPT_OUT]})"), []
    spec = _mapping(pod.get("spec"))
    if any(c.get("name") == CONTAINER for c in _containers(spec, "initContainers")):
        return Decision(False, f"already has the {CONTAINER} init container"), []
    gpus, claims = gpu_request(pod)
    if not gpus and not claims:
        return Decision(False, "asks for no GPU"), []
    gang = gang_of(pod)
    container = init_container(settings, gpus, claims, gang)
    return Decision(True, "GPU pod", gang, gpus, claims), _patch(pod, container)


def review(body: Any, settings: Settings) -> tuple[dict[str, Any], Decision]:
    """The AdmissionReview answer to `body` (the request as the API server sends it). A body that is not an
    AdmissionReview v1 with a request is an AdmissionError; an object that is not a Pod is allowed untouched."""
    if not isinstance(body, Mapping):
        raise AdmissionError("the body is not a JSON object", fix=FIX)
    if body.get("apiVersion") != API_VERSION or body.get("kind") != "AdmissionReview":
        raise AdmissionError(
            f"the body is not an AdmissionReview {API_VERSION} (apiVersion {body.get('apiVersion')!r}, kind "
            f"{body.get('kind')!r})",
            fix="list only v1 in the webhook's admissionReviewVersions; " + FIX,
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise AdmissionError("the AdmissionReview has no request", fix=FIX)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise AdmissionError("the AdmissionReview's request has no uid", fix=FIX)
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    answer = {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    kind = _mapping(request.get("kind"))
    if kind.get("kind") != "Pod" or kind.get("group", "") != "" or request.get("subResource"):
        return answer, Decision(False, f"not a Pod ({kind.get('kind')})")
    if request.get("operation") != "CREATE":
        return answer, Decision(False, f"operation {request.get('operation')}, not CREATE")
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        raise AdmissionError("the AdmissionReview's request has no Pod object", fix=FIX)
    namespace = str(request.get("namespace") or _mapping(pod.get("metadata")).get("namespace") or "")
    decision, patch = decide(pod, namespace, settings)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return answer, decision
