"""A recording stand-in for the network calls of the official client's CoreV1Api, AppsV1Api and BatchV1Api. It keeps
nodes, pods, ReplicaSets, Jobs and PodDisruptionBudgets as the client's own V1 models and answers as the API server
does: a patch carrying a stale metadata.resourceVersion is refused with 409 Conflict and every write bumps the
version; a null annotation or label in a patch removes it (merge patch); an eviction is 404 for a gone pod and 429
while a PodDisruptionBudget that selects the pod allows no disruption (each eviction it allows uses one up); reads of
a missing object are 404. Models, exceptions and serialisation are the real client's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client as kube
from kubernetes.client.exceptions import ApiException

DATA = Path(__file__).parent / "data"


def load(path: Path, kind: str) -> Any:
    """A file of `kubectl get ... -o json` output as the client's model, deserialised as a list or read call does."""
    return kube.ApiClient().deserialize(path.read_text(), kind, "application/json")


class RecordingCoreV1:
    def __init__(
        self,
        nodes: list[Any],
        pods: list[Any],
        pdb_refusals: dict[str, int] | None = None,
        pdbs: list[Any] | None = None,
    ) -> None:
        self.nodes = {n.metadata.name: n for n in nodes}
        for n in nodes:
            n.metadata.resource_version = n.metadata.resource_version or "1"
        self.pods = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in pods}
        self.pdb_refusals = dict(pdb_refusals or {})  # pod -> how many 429s before the budget allows it
        self.pdbs = list(pdbs or [])
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.events: list[Any] = []
        self.evictions: list[Any] = []
        self.racing: list[dict[str, Any]] = []  # patches another writer lands just before our next patch
        self.vanishing: set[str] = set()  # pods that end by themselves between our list and our eviction

    def list_node(self) -> Any:
        self.calls.append(("list_node", ()))
        return kube.V1NodeList(items=list(self.nodes.values()))

    def read_node(self, name: str) -> Any:
        self.calls.append(("read_node", (name,)))
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return self.nodes[name]

    def _apply_patch(self, node: Any, body: dict[str, Any]) -> None:
        meta = body.get("metadata", {})
        if "annotations" in meta:
            annotations = dict(node.metadata.annotations or {})
            for k, v in meta["annotations"].items():
                if v is None:
                    annotations.pop(k, None)
                else:
                    annotations[k] = v
            node.metadata.annotations = annotations
        if "labels" in meta:
            labels = dict(node.metadata.labels or {})
            for k, v in meta["labels"].items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
            node.metadata.labels = labels
        if "unschedulable" in body.get("spec", {}):
            if node.spec is None:
                node.spec = kube.V1NodeSpec()
            node.spec.unschedulable = body["spec"]["unschedulable"] or None  # the server drops false
        node.metadata.resource_version = str(int(node.metadata.resource_version) + 1)

    def patch_node(self, name: str, body: dict[str, Any]) -> Any:
        self.calls.append(("patch_node", (name, body)))
        node = self.nodes[name]
        if self.racing:  # someone else writes the node between our read and our patch
            self._apply_patch(node, self.racing.pop(0))
        want = body.get("metadata", {}).get("resourceVersion")
        if want is not None and want != node.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self._apply_patch(node, body)
        return node

    def patch_node_status(self, name: str, body: dict[str, Any]) -> Any:
        self.calls.append(("patch_node_status", (name, body)))
        node = self.nodes[name]
        for c in body["status"]["conditions"]:  # strategic merge on conditions: by type
            node.status.conditions = [x for x in node.status.conditions if x.type != c["type"]]
            node.status.conditions.append(kube.V1NodeCondition(type=c["type"], status=c["status"],
                                                               reason=c["reason"], message=c["message"]))  # fmt: skip
        return node

    def list_pod_for_all_namespaces(self, field_selector: str = "", label_selector: str = "") -> Any:
        self.calls.append(("list_pod_for_all_namespaces", (field_selector, label_selector)))
        pods = list(self.pods.values())
        if field_selector:
            node = field_selector.split("=", 1)[1]
            pods = [p for p in pods if p.spec.node_name == node]
        if label_selector:
            k, v = label_selector.split("=", 1)
            pods = [p for p in pods if (p.metadata.labels or {}).get(k) == v]
        return kube.V1PodList(items=pods)

    def _budget(self, pod: Any) -> Any:
        for pdb in self.pdbs:
            wanted = pdb.spec.selector.match_labels or {}
            labels = pod.metadata.labels or {}
            if pdb.metadata.namespace == pod.metadata.namespace and all(labels.get(k) == v for k, v in wanted.items()):
                return pdb
        return None

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> Any:
        assert isinstance(body, kube.V1Eviction) and body.metadata.name == name
        self.calls.append(("create_namespaced_pod_eviction", (namespace, name)))
        self.evictions.append(body)
        key = f"{namespace}/{name}"
        if key in self.vanishing:
            self.pods.pop(key, None)
        if key not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        if self.pdb_refusals.get(key, 0) > 0:
            self.pdb_refusals[key] -= 1
            raise ApiException(status=429, reason="Too Many Requests")
        budget = self._budget(self.pods[key])
        if budget is not None:
            if budget.status.disruptions_allowed < 1:
                raise ApiException(status=429, reason="Too Many Requests")
            budget.status.disruptions_allowed -= 1
        del self.pods[key]
        return body

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any = None) -> Any:
        assert body is None or isinstance(body, kube.V1DeleteOptions)
        self.calls.append(("delete_namespaced_pod", (namespace, name, body.grace_period_seconds if body else None)))
        if self.pods.pop(f"{namespace}/{name}", None) is None:
            raise ApiException(status=404, reason="Not Found")
        return kube.V1Status(status="Success")

    def create_namespaced_event(self, namespace: str, body: Any) -> Any:
        assert isinstance(body, kube.CoreV1Event) and body.involved_object.kind in ("Node", "Pod")
        if body.involved_object.kind == "Pod":  # an event about a pod lives in the pod's namespace
            assert namespace == body.involved_object.namespace == body.metadata.namespace
        self.calls.append(("create_namespaced_event", (namespace, body.reason)))
        self.events.append(body)
        return body


class RecordingOwners:
    """AppsV1Api.read_namespaced_replica_set and BatchV1Api.read_namespaced_job over the objects given."""

    def __init__(self, objects: list[Any]) -> None:
        self.objects = {(o.kind, o.metadata.namespace, o.metadata.name): o for o in objects}
        self.calls: list[tuple[str, str, str]] = []

    def _read(self, kind: str, name: str, namespace: str) -> Any:
        self.calls.append((kind, namespace, name))
        found = self.objects.get((kind, namespace, name))
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        return found

    def read_namespaced_replica_set(self, name: str, namespace: str) -> Any:
        return self._read("ReplicaSet", name, namespace)

    def read_namespaced_job(self, name: str, namespace: str) -> Any:
        return self._read("Job", name, namespace)


def serialised(model: Any) -> dict[str, Any]:
    """A model as the client puts it on the wire."""
    out: dict[str, Any] = json.loads(json.dumps(kube.ApiClient().sanitize_for_serialization(model)))
    return out
