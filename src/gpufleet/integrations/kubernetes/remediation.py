"""Remediation through the Kubernetes API with the official client (the `[k8s]` extra).

cordon/uncordon patch `spec.unschedulable`; drain evicts every pod on the node through the Eviction API (so
PodDisruptionBudgets are honored: a 429 answer is retried with back-off, and pods still blocked make the drain an
error the runbook retries later); a node condition (`GpufleetRemediation`) is set with patch_node_status and every
action is announced as an Event on the node. Node-local actions (GPU reset, reboot, power limits, port isolation,
diag) are not API operations and raise UnsupportedActionError.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.client import connect, kubernetes_module
from gpufleet.integrations.kubernetes.objects import event, eviction
from gpufleet.remediate.backends.base import (
    Cordons,
    Drains,
    NodeLocation,
    RemediationBackend,
    RequeuesJobs,
    UnsupportedActionError,
)

CONDITION = "GpufleetRemediation"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


class KubernetesBackend(RemediationBackend, Cordons, Drains, RequeuesJobs):
    name = "kubernetes"

    def __init__(
        self,
        core: Any,
        *,
        event_namespace: str = "default",
        rack_label: str = "gpufleet.io/rack",
        leaf_label: str = "gpufleet.io/leaf",
        gpu_resource: str = "nvidia.com/gpu",
        eviction_attempts: int = 5,
        eviction_backoff_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`core` is a kubernetes.client.CoreV1Api (or anything with its methods)."""
        kubernetes_module()  # no client installed: say so now, with the fix, not at the first action
        self.core = core
        self.event_namespace = event_namespace
        self.rack_label = rack_label
        self.leaf_label = leaf_label
        self.gpu_resource = gpu_resource
        self.eviction_attempts = eviction_attempts
        self.eviction_backoff_s = eviction_backoff_s
        self.sleep = sleep
        self.clock = clock

    @classmethod
    def from_kubeconfig(cls, context: str | None = None, **kwargs: Any) -> KubernetesBackend:
        return cls(connect(context=context), **kwargs)

    # --- reads ---------------------------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _api_exception() as exc:
            status, reason = getattr(exc, "status", ""), getattr(exc, "reason", exc)
            raise BackendError(f"Kubernetes {what} failed: {status} {reason}") from None

    def _nodes(self) -> list[Any]:
        return list(self._call("list nodes", self.core.list_node).items)

    def _node(self, name: str) -> Any:
        return self._call(f"read node {name}", self.core.read_node, name)

    def now(self) -> float:
        return self.clock()

    def nodes(self) -> list[str]:
        return [n.metadata.name for n in self._nodes()]

    def placement(self) -> dict[str, NodeLocation]:
        out = {}
        for n in self._nodes():
            labels = n.metadata.labels or {}
            out[n.metadata.name] = NodeLocation(
                rack=labels.get(self.rack_label, ""), leaf=labels.get(self.leaf_label, "")
            )
        return out

    @staticmethod
    def _ready(node: Any) -> bool:
        for cond in (node.status.conditions or []) if node.status else []:
            if cond.type == "Ready":
                return bool(cond.status == "True")
        return False

    def unavailable(self) -> set[str]:
        return {n.metadata.name for n in self._nodes() if (n.spec and n.spec.unschedulable) or not self._ready(n)}

    def node_ready(self, node: str) -> bool:
        return self._ready(self._node(node))

    # --- writes --------------------------------------------------------------------------------------------------

    def _event(self, node: str, reason: str, message: str, type_: str = "Warning") -> None:
        body = event(
            kind="Node",
            name=node,
            namespace=self.event_namespace,
            reason=reason,
            message=message,
            type_=type_,
            component="gpufleet-remediate",
            when=datetime.fromtimestamp(self.clock(), UTC),
        )
        self._call("create event", self.core.create_namespaced_event, self.event_namespace, body)

    def _condition(self, node: str, active: bool, reason: str, message: str) -> None:
        stamp = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cond = {
            "type": CONDITION,
            "status": "True" if active else "False",
            "reason": reason,
            "message": message[:1024],
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        # The client sends a dict as a strategic merge patch: conditions merge by type, Ready and the rest stay.
        self._call("patch node status", self.core.patch_node_status, node, {"status": {"conditions": [cond]}})

    def _unschedulable(self, node: str, value: bool) -> None:
        self._call(f"patch node {node}", self.core.patch_node, node, {"spec": {"unschedulable": value}})

    def cordon(self, node: str, reason: str) -> str:
        self._unschedulable(node, True)
        self._condition(node, True, "Cordoned", reason)
        self._event(node, "GpufleetCordon", f"cordoned: {reason}")
        return f"node {node} cordoned"

    def uncordon(self, node: str) -> str:
        self._unschedulable(node, False)
        self._condition(node, False, "Recovered", "returned to service")
        self._event(node, "GpufleetUncordon", "returned to service", type_="Normal")
        return f"node {node} uncordoned"

    def _pods_on(self, node: str) -> list[Any]:
        pods = self._call(
            "list pods", self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        ).items
        keep = []
        for pod in pods:
            meta = pod.metadata
            if (meta.annotations or {}).get(MIRROR_ANNOTATION):
                continue  # static pods: the kubelet owns them
            if any(o.kind == "DaemonSet" for o in meta.owner_references or []):
                continue  # recreated on the same node anyway, as kubectl drain --ignore-daemonsets
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                continue
            keep.append(pod)
        return keep

    def _evict(self, pods: list[Any]) -> tuple[list[str], list[str]]:
        """Evict pods; retry those a PodDisruptionBudget holds (HTTP 429). Returns (evicted, still blocked)."""
        api_exc = _api_exception()
        evicted: list[str] = []
        pending = list(pods)
        for attempt in range(self.eviction_attempts):
            blocked = []
            for pod in pending:
                name, ns = pod.metadata.name, pod.metadata.namespace
                try:
                    self.core.create_namespaced_pod_eviction(name, ns, eviction(name, ns))
                    evicted.append(f"{ns}/{name}")
                except api_exc as exc:
                    status = getattr(exc, "status", None)
                    if status == 404:
                        evicted.append(f"{ns}/{name}")  # already gone
                    elif status == 429:
                        blocked.append(pod)
                    else:
                        reason = getattr(exc, "reason", exc)
                        raise BackendError(f"evicting {ns}/{name} failed: {status} {reason}") from None
            pending = blocked
            if not pending:
                break
            if attempt + 1 < self.eviction_attempts:
                self.sleep(self.eviction_backoff_s * (2**attempt))
        return evicted, [f"{p.metadata.namespace}/{p.metadata.name}" for p in pending]

    def drain(self, node: str, reason: str) -> str:
        self._unschedulable(node, True)
        self._condition(node, True, "Drained", reason)
        evicted, blocked = self._evict(self._pods_on(node))
        if blocked:
            self._event(
                node, "GpufleetDrainBlocked", f"eviction blocked by a PodDisruptionBudget: {', '.join(blocked)}"
            )
            raise BackendError(
                f"drain of {node} incomplete: {', '.join(blocked)} held by a PodDisruptionBudget",
                fix="the runbook retries on the next apply; or relax the budget",
            )
        self._event(node, "GpufleetDrain", f"drained ({reason}); evicted {len(evicted)} pods")
        return f"node {node} drained; evicted {', '.join(evicted) or 'no pods'}"

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        """Evict the job's pods (label job-name=<job>, as batch Jobs set it) from the excluded nodes; with those
        nodes cordoned, the job's controller recreates them elsewhere."""
        pods = self._call("list pods", self.core.list_pod_for_all_namespaces, label_selector=f"job-name={job}").items
        targets = [p for p in pods if not exclude or (p.spec and p.spec.node_name in exclude)]
        evicted, blocked = self._evict(targets)
        if blocked:
            raise BackendError(f"requeue of {job} incomplete: {', '.join(blocked)} held by a PodDisruptionBudget")
        return f"job {job}: evicted {', '.join(evicted) or 'no pods'} from {', '.join(exclude) or 'all nodes'}"

    def cannot(self, action: str, node: str, fix: str) -> UnsupportedActionError:
        """Also tells the node's watchers (an Event), since a person must act on the node itself."""
        self._event(node, "GpufleetActionUnsupported", f"{action} needs a node-local agent")
        return UnsupportedActionError(f"the Kubernetes API cannot {action} on {node}", fix=fix)

    def gpu_count(self, node: str) -> int:
        status = self._node(node).status
        return int((status.capacity or {}).get(self.gpu_resource, 0)) if status else 0

    def gpu_model(self, node: str) -> str:
        return str((self._node(node).metadata.labels or {}).get("nvidia.com/gpu.product", ""))
