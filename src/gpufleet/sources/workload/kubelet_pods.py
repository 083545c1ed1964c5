"""The pods on this node, as the kubelet lists them, to turn a cgroup's container ID or pod UID into a pod,
namespace, container and workload.

Both the kubelet's `/pods` endpoint and the API server's `GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`
answer a v1 PodList; `PodIndex.from_pod_list` reads either (and `kubectl get pods -o json`, a List). A container's
ID is its status's `containerID` without the runtime's scheme (`containerd://`, `cri-o://`, `docker://`), the same
ID the runtime writes into the cgroup path; init and ephemeral containers have their own. A static pod has two
UIDs: the kubelet's (its config hash, the one in the cgroup path) and its mirror pod's in the API server, which
carries the first in the `kubernetes.io/config.mirror` annotation, so both are indexed.

The workload is the pod's owner: a JobSet's or a Kubeflow training job's name from their labels, else the
controller in ownerReferences, a ReplicaSet read back to its Deployment by its pod-template-hash.

`KubeletPodList` reads the kubelet over HTTPS with the pod's service-account token. The kubelet authorizes `/pods`
as `nodes/proxy` (or `nodes/pods` where fine-grained kubelet authorization is on, Kubernetes 1.33 and later). The
same reader reads the API server when given its URL (`https://kubernetes.default.svc/api/v1/pods?fieldSelector=
spec.nodeName=<node>`, `verify` set to the service account's ca.crt), which needs `list` on pods instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpufleet.errors import BackendError, ParseError
from gpufleet.model.attribution import Attribution
from gpufleet.parsers.cgroups import CgroupRef

__all__ = ["KubeletPodList", "PodIndex", "PodInfo", "container_id_of", "workload_of"]

DEFAULT_URL = "https://127.0.0.1:10250/pods"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_PATH = SERVICE_ACCOUNT / "token"
CA_PATH = SERVICE_ACCOUNT / "ca.crt"
MAX_BYTES = 64 * 1024 * 1024  # a node's PodList is a few MiB at most
RUNNING_PHASES = ("Running", "Pending")
MIRROR_ANNOTATIONS = ("kubernetes.io/config.mirror", "kubernetes.io/config.hash")
# labels naming the job a pod belongs to above its direct owner, most specific first
WORKLOAD_LABELS = ("jobset.sigs.k8s.io/jobset-name", "training.kubeflow.org/job-name")
JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
_STATUS_LISTS = (("containerStatuses", "container"), ("initContainerStatuses", "init"),
                 ("ephemeralContainerStatuses", "ephemeral"))  # fmt: skip
_SPEC_LISTS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod of the list, with what attribution needs of it."""

    uid: str
    name: str
    namespace: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown ("" when the list does not say)
    workload: str  # its owner's name ("" for a bare pod or a static pod)
    containers: tuple[str, ...]  # every container of its spec: regular, init and ephemeral
    terminated: bool = False  # being deleted with every container stopped

    @property
    def running(self) -> bool:
        return self.phase in RUNNING_PHASES and not self.terminated


@dataclass(frozen=True, slots=True)
class _Container:
    pod: PodInfo
    name: str
    kind: str  # container, init, ephemeral


def container_id_of(value: object) -> str:
    """`containerd://<id>` -> `<id>`; "" for anything that is not a status's containerID."""
    if not isinstance(value, str) or not value:
        return ""
    return value.rsplit("://", 1)[-1].strip().lower()


def workload_of(meta: Mapping[str, Any]) -> str:
    """The name of the workload a pod belongs to, from its metadata (see the module's rule)."""
    labels = _map(meta.get("labels"))
    for key in WORKLOAD_LABELS:
        if isinstance(labels.get(key), str) and labels[key]:
            return str(labels[key])
    refs = [r for r in _list(meta.get("ownerReferences")) if isinstance(r, Mapping)]
    owner = next((r for r in refs if r.get("controller") is True), None)
    if owner is not None:
        kind, name = owner.get("kind"), owner.get("name")
        if isinstance(name, str) and name and kind != "Node":  # a mirror pod is "owned" by its node
            template_hash = labels.get("pod-template-hash")
            if kind == "ReplicaSet" and isinstance(template_hash, str) and name.endswith(f"-{template_hash}"):
                return name[: -len(template_hash) - 1]
            return name
    for key in JOB_LABELS:
        if isinstance(labels.get(key), str) and labels[key]:
            return str(labels[key])
    return ""


class PodIndex:
    """The node's pods by container ID and by pod UID."""

    def __init__(self, pods: list[PodInfo], containers: dict[str, _Container], uids: dict[str, PodInfo]) -> None:
        self.pods = pods
        self._containers = containers
        self._uids = uids
        self._by_name = {(p.namespace, p.name): p for p in pods}

    @classmethod
    def from_pod_list(cls, obj: Mapping[str, Any]) -> PodIndex:
        """Index a v1 PodList (or a kubectl List of which only the Pods count). Items that are not pods or lack a
        name are passed over; a list that is not a list is a ParseError."""
        # an empty list can come as "items": null (a Go nil slice)
        if not isinstance(obj, Mapping) or not isinstance(obj.get("items") or [], list):
            raise ParseError(
                "the pod list is not a Kubernetes PodList (a JSON object with an 'items' array)",
                fix="point the reader at the kubelet's /pods or the API server's /api/v1/pods",
            )
        pods: list[PodInfo] = []
        containers: dict[str, _Container] = {}
        uids: dict[str, PodInfo] = {}
        for item in obj.get("items") or []:
            if not isinstance(item, Mapping) or item.get("kind", "Pod") != "Pod":
                continue
            pod = _pod(item)
            if pod is None:
                continue
            pods.append(pod)
            meta = _map(item.get("metadata"))
            annotations = _map(meta.get("annotations"))
            for uid in (pod.uid, *(annotations.get(k) for k in MIRROR_ANNOTATIONS)):
                if isinstance(uid, str) and uid:
                    uids.setdefault(uid.lower(), pod)
            status = _map(item.get("status"))
            for key, kind in _STATUS_LISTS:
                for cs in _list(status.get(key)):
                    if not isinstance(cs, Mapping) or not isinstance(cs.get("name"), str):
                        continue
                    cid = container_id_of(cs.get("containerID"))
                    if cid:
                        containers[cid] = _Container(pod, str(cs["name"]), kind)
        return cls(pods, containers, uids)

    def __len__(self) -> int:
        return len(self.pods)

    def has_container(self, container_id: str) -> bool:
        return container_id.lower() in self._containers

    def pod(self, uid: str) -> PodInfo | None:
        return self._uids.get(uid.lower())

    def owner(self, ref: CgroupRef) -> Attribution | None:
        """The container a cgroup names: by its container ID, else by its pod UID when the pod has one container
        (a pod of several cannot tell which; a guess would give one container another's GPU use)."""
        if ref.container_id:
            found = self._containers.get(ref.container_id.lower())
            if found is not None:
                p = found.pod
                return Attribution(pod=p.name, namespace=p.namespace, container=found.name, workload=p.workload)
        pod = self._uids.get(ref.pod_uid.lower()) if ref.pod_uid else None
        if pod is None or len(pod.containers) != 1:
            return None
        return Attribution(pod=pod.name, namespace=pod.namespace, container=pod.containers[0], workload=pod.workload)

    def running(self, namespace: str, pod: str) -> bool:
        """Whether the pod is still there to hold a device: Running or Pending and not stopped. A pod the list does
        not have, or one that Succeeded, Failed or was deleted, is not: its allotments linger in the kubelet's
        checkpoint until the kubelet forgets them, and must not count."""
        found = self._by_name.get((namespace, pod))
        return found is not None and found.running

    def ended(self, namespace: str, pod: str) -> bool:
        """Whether the list has the pod and it no longer runs (a pod it does not have yet may have just started)."""
        found = self._by_name.get((namespace, pod))
        return found is not None and not found.running


def _pod(item: Mapping[str, Any]) -> PodInfo | None:
    meta = _map(item.get("metadata"))
    name, namespace = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    spec, status = _map(item.get("spec")), _map(item.get("status"))
    names = [
        str(c["name"]) for key in _SPEC_LISTS for c in _list(spec.get(key))
        if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    ]  # fmt: skip
    phase = status.get("phase") if isinstance(status.get("phase"), str) else ""
    states = [_map(cs.get("state")) for cs in _list(status.get("containerStatuses")) if isinstance(cs, Mapping)]
    terminated = bool(meta.get("deletionTimestamp")) and bool(states) and all("terminated" in s for s in states)
    uid = meta.get("uid") if isinstance(meta.get("uid"), str) else ""
    return PodInfo(str(uid).lower(), name, namespace, str(phase), workload_of(meta), tuple(names), terminated)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


class KubeletPodList:
    """Reads the node's PodList from the kubelet (or the API server, given its URL) with the service-account
    token. `verify` is False for the kubelet's usually self-signed serving certificate, or a CA bundle's path."""

    name = "kubelet-pods"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token_path: str | Path | None = TOKEN_PATH,
        verify: bool | str = False,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.token_path = Path(token_path) if token_path else None
        self.verify = verify
        self.timeout = timeout
        self._transport = transport
        self._client: httpx.Client | None = None  # kept open across reads; replaced after a failure
        self._last: tuple[bytes, PodIndex] | None = None  # the last answer and its index

    def read(self) -> Mapping[str, Any]:
        return self._decode(self._fetch())

    def index(self) -> PodIndex:
        """The node's pods, freshly read; the same index as last time when the kubelet's answer is unchanged."""
        content = self._fetch()
        if self._last is not None and self._last[0] == content:
            return self._last[1]
        index = PodIndex.from_pod_list(self._decode(content))
        self._last = (content, index)
        return index

    __call__ = index

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _fetch(self) -> bytes:
        headers = {"Accept": "application/json"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            if self._client is None:
                self._client = httpx.Client(verify=self.verify, timeout=self.timeout, transport=self._transport)
            response = self._client.get(self.url, headers=headers)
        except httpx.HTTPError as exc:
            self.close()
            raise BackendError(
                f"cannot read the pod list from {self.url}: {type(exc).__name__}: {exc}",
                fix="run the agent with hostNetwork: true so 127.0.0.1:10250 is the kubelet, or set the URL to the "
                "node's address (status.hostIP through the downward API); a CA path in verify for a proper "
                "certificate",
            ) from None
        if response.status_code in (401, 403):
            raise BackendError(f"{self.url} refused the pod list (HTTP {response.status_code})", fix=self._rbac_fix())
        if response.status_code != 200:
            raise BackendError(
                f"{self.url} answered HTTP {response.status_code} for the pod list",
                fix="check the kubelet is serving (its read-write port, 10250) and the URL's path is /pods",
            )
        if len(response.content) > MAX_BYTES:
            raise BackendError(f"{self.url} answered {len(response.content)} bytes", fix="check the URL is /pods")
        return response.content

    def _decode(self, content: bytes) -> Mapping[str, Any]:
        try:
            obj = json.loads(content)
        except ValueError as exc:
            raise ParseError(f"the pod list from {self.url} is not JSON: {exc}", fix="check the URL is /pods") from None
        if not isinstance(obj, Mapping):
            raise ParseError(f"the pod list from {self.url} is not a JSON object", fix="check the URL is /pods")
        return obj

    def _token(self) -> str:
        if self.token_path is None:
            return ""
        try:
            return self.token_path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise BackendError(
                f"cannot read the service-account token {self.token_path}: {exc.strerror or exc}",
                fix="mount the token (automountServiceAccountToken: true on the agent's pod) or set token_path",
            ) from None

    def _rbac_fix(self) -> str:
        if "/api/" in self.url:
            return "grant the agent's service account list on pods (a ClusterRole), or read the kubelet's /pods"
        return (
            "grant the agent's service account get on nodes/proxy (or nodes/pods where fine-grained kubelet "
            "authorization is on, 1.33+) in a ClusterRole, and check the kubelet has webhook authentication and "
            "authorization on"
        )
