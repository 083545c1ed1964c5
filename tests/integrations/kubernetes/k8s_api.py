"""A recording stand-in for the network calls of the official client's CoreV1Api, AppsV1Api and BatchV1Api. It keeps
nodes, pods, ReplicaSets, Jobs and PodDisruptionBudgets as the client's own V1 models and answers as the API server
does: a patch carrying a stale metadata.resourceVersion is refused with 409 Conflict and every write bumps the
version; a null annotation or label in a patch removes it (merge patch); an eviction is 404 for a gone pod and 429
while a PodDisruptionBudget that selects the pod allows no disruption (each eviction it allows uses one up); reads of
a missing object are 404. Models, exceptions and serialisation are the real client's. CustomObjectsServer is a real
HTTP server for the client's CustomObjectsApi (Volcano's HyperNodes), so what is checked is what goes on the wire."""

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


class CustomObjectsServer:
    """A real HTTP server answering the official client's CustomObjectsApi for cluster-scoped custom objects
    (/apis/GROUP/VERSION/PLURAL[/NAME]) as the API server does: list (with a labelSelector of key=value terms),
    create (409 AlreadyExists for a taken name), replace (PUT: 409 Conflict for a stale metadata.resourceVersion,
    404 for a missing object), delete (404 for a missing one). Every write sets a new resourceVersion, and
    creationTimestamp and uid as the server would, so a client that compares objects must see past them. Objects
    are kept by plural and name; what reached the server is in `requests`."""

    def __init__(self, objects: list[dict[str, Any]] | None = None, plural: str = "hypernodes") -> None:
        import threading

        self.plural = plural
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []  # method, path, body
        self.version = 100
        self.lock = threading.Lock()
        for obj in objects or []:
            self._stamp(obj)
            self.objects[obj["metadata"]["name"]] = obj

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta.setdefault("generation", 1)

    def writes(self) -> list[tuple[str, str]]:
        """(method, object name) of every write, in order."""
        return [(m, p.split("?")[0].rsplit("/", 1)[-1] if m != "POST" else b["metadata"]["name"])
                for m, p, b in self.requests if m != "GET"]  # fmt: skip

    @staticmethod
    def _status(code: int, reason: str) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        from urllib.parse import parse_qs, urlsplit

        with self.lock:
            self.requests.append((method, path, body))
            url = urlsplit(path)
            parts = url.path.strip("/").split("/")
            if parts[:1] != ["apis"] or len(parts) not in (4, 5) or parts[3] != self.plural:
                return 404, self._status(404, "NotFound")
            name = parts[4] if len(parts) == 5 else None
            if method == "GET" and name is None:
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                terms = [t.split("=", 1) for t in selector.split(",") if t]
                items = [o for o in self.objects.values()
                         if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in terms)]  # fmt: skip
                return 200, {"apiVersion": "/".join(parts[1:3]), "kind": "List", "items": items,
                             "metadata": {"resourceVersion": str(self.version)}}  # fmt: skip
            if method == "POST" and name is None:
                if body["metadata"]["name"] in self.objects:
                    return 409, self._status(409, "AlreadyExists")
                obj = json.loads(json.dumps(body))
                self._stamp(obj)
                self.objects[obj["metadata"]["name"]] = obj
                return 201, obj
            if name is None:
                return 405, self._status(405, "MethodNotAllowed")
            if name not in self.objects:
                return 404, self._status(404, "NotFound")
            if method == "GET":
                return 200, self.objects[name]
            if method == "PUT":
                old = self.objects[name]
                if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                    return 409, self._status(409, "Conflict")
                obj = json.loads(json.dumps(body))
                for key in ("uid", "creationTimestamp"):
                    obj["metadata"][key] = old["metadata"][key]
                self._stamp(obj)
                self.objects[name] = obj
                return 200, obj
            if method == "DELETE":
                return 200, self.objects.pop(name)
            return 405, self._status(405, "MethodNotAllowed")

    def serve(self) -> Any:
        """Start serving; returns (CustomObjectsApi over it, a function that stops the server)."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        state = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, out = state.handle(self.command, self.path, body)
                raw = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        config = kube.Configuration()
        config.host = f"http://127.0.0.1:{httpd.server_port}"

        def stop() -> None:
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=10)

        return kube.CustomObjectsApi(kube.ApiClient(config)), stop
