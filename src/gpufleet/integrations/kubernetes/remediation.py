"""Remediation through the Kubernetes API with the official client (the `[k8s]` extra).

cordon/uncordon patch `spec.unschedulable` together with the `gpufleet.io/cordoned-by` annotation (the incidents
holding the node cordoned, gpufleet.remediate.backends.cordons) in one patch that carries the resourceVersion read,
so two incidents never lose each other's id (the API server answers 409 to a stale one and the backend reads again); a
node an operator cordoned stays cordoned. drain evicts every pod on the node through the Eviction API (so
PodDisruptionBudgets are honored: a 429 answer is retried with back-off, and pods still blocked make the drain an
error the runbook retries later); drain_gpu moves only the pods holding one GPU, as the node's agent reports them,
each as its namespace's eviction mode says, and names their owners. A node condition (`GpufleetRemediation`) is set
with patch_node_status and every action is announced as an Event on the node. Node-local actions (GPU reset, reboot,
power limits, port isolation, diag) are not API operations and raise UnsupportedActionError. label_node writes the
fabric topology's node labels (the keys it is given, nothing else) in one merge patch of metadata.labels, after
reading the node so a label already right is not written again. sync_hypernodes keeps Volcano's HyperNodes (cluster
scoped custom objects, through CustomObjectsApi): one list, then a create, replace or delete per object that differs;
only objects carrying gpufleet's managed-by label are replaced or deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.client import connect, kubernetes_module
from gpufleet.integrations.kubernetes.objects import event, eviction
from gpufleet.integrations.kubernetes.topology import MANAGED_LABELS, node_labels
from gpufleet.integrations.kubernetes.topology_objects import MANAGED_BY, VOLCANO_API
from gpufleet.remediate.backends.base import (
    Cordons,
    Drains,
    EvictsGpuWork,
    KeepsHyperNodes,
    LabelsNodes,
    NodeLocation,
    RemediationBackend,
    RequeuesJobs,
    UnsupportedActionError,
)
from gpufleet.remediate.backends.cordons import CordonChange, on_cordon, on_uncordon
from gpufleet.remediate.config import EvictionSpec

if TYPE_CHECKING:
    from gpufleet.fabric.topology import Topology

CONDITION = "GpufleetRemediation"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CORDONED_BY = "gpufleet.io/cordoned-by"  # the incidents holding the node cordoned, comma-separated
CONFLICT_ATTEMPTS = 5  # re-reads of a node another writer changed between our read and our patch
# Device-plugin resources that put a GPU (or a share or MIG slice of one) in a pod; a pod asking for none of them
# holds no GPU
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "habana.ai/gaudi")


HYPERNODES = "hypernodes"  # Volcano's HyperNode plural (cluster scoped)


def _managed(obj: Mapping[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())


def _differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether `old` lacks what `new` sets: its labels, or its spec's fields (fields the API server defaulted into
    `old` are not a difference)."""
    labels = old["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (new["metadata"].get("labels") or {}).items()):
        return True
    spec = old.get("spec") or {}
    return any(spec.get(k) != v for k, v in new["spec"].items())


def _api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


class KubernetesBackend(RemediationBackend, Cordons, Drains, EvictsGpuWork, RequeuesJobs, LabelsNodes, KeepsHyperNodes):
    name = "kubernetes"

    def __init__(
        self,
        core: Any,
        *,
        apps: Any = None,
        batch: Any = None,
        custom: Any = None,
        event_namespace: str = "default",
        rack_label: str = "gpufleet.io/rack",
        leaf_label: str = "gpufleet.io/leaf",
        gpu_resource: str = "nvidia.com/gpu",
        eviction_attempts: int = 5,
        eviction_backoff_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`core` is a kubernetes.client.CoreV1Api (or anything with its methods); `apps` and `batch` (AppsV1Api,
        BatchV1Api) read the ReplicaSets and Jobs that own evicted pods, to name their top controller; `custom`
        (CustomObjectsApi) keeps Volcano's HyperNodes."""
        kubernetes_module()  # no client installed: say so now, with the fix, not at the first action
        self.core = core
        self.apps = apps
        self.batch = batch
        self.custom = custom
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
        core = connect(context=context)
        k8s = kubernetes_module().client
        return cls(core, apps=k8s.AppsV1Api(), batch=k8s.BatchV1Api(), custom=k8s.CustomObjectsApi(), **kwargs)

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

    def _change_cordon(self, node: str, decide: Callable[[bool, tuple[str, ...]], CordonChange]) -> CordonChange:
        """Read the node, decide, and write schedulability and holders in one patch that carries the
        resourceVersion read: if anyone wrote the node meanwhile the API server refuses it (409) and we decide
        again on what is there now."""
        api_exc = _api_exception()
        for _ in range(CONFLICT_ATTEMPTS):
            current = self._node(node)
            meta = current.metadata
            held = (meta.annotations or {}).get(CORDONED_BY, "")
            holders = tuple(h for h in held.split(",") if h)
            change = decide(bool(current.spec and current.spec.unschedulable), holders)
            if not change.write:
                return change
            body = {
                "metadata": {
                    "resourceVersion": meta.resource_version,
                    # null removes the annotation (merge patch)
                    "annotations": {CORDONED_BY: ",".join(change.holders) or None},
                },
                "spec": {"unschedulable": change.unschedulable},
            }
            try:
                self.core.patch_node(node, body)
                return change
            except api_exc as exc:
                if getattr(exc, "status", None) != 409:
                    status, why = getattr(exc, "status", ""), getattr(exc, "reason", exc)
                    raise BackendError(f"Kubernetes patch node {node} failed: {status} {why}") from None
        raise BackendError(
            f"node {node} kept changing while gpufleet wrote its cordon ({CONFLICT_ATTEMPTS} conflicts)",
            fix="the runbook retries on the next apply",
        )

    def cordon(self, node: str, reason: str, incident: str | None) -> str:
        change = self._change_cordon(node, lambda u, h: on_cordon(node, u, h, incident))
        if change.write:
            self._condition(node, True, "Cordoned", reason)
            self._event(node, "GpufleetCordon", f"cordoned: {reason}")
        return change.detail

    def uncordon(self, node: str, incident: str | None) -> str:
        change = self._change_cordon(node, lambda u, h: on_uncordon(node, u, h, incident))
        if change.write and not change.unschedulable:
            self._condition(node, False, "Recovered", "returned to service")
            self._event(node, "GpufleetUncordon", change.detail, type_="Normal")
        return change.detail

    def topology_labels(
        self, topology: Topology, previous: Mapping[str, Mapping[str, str]] | None = None
    ) -> Mapping[str, Mapping[str, str]]:
        return node_labels(topology, previous)

    def label_node(self, node: str, labels: Mapping[str, str | None]) -> str:
        """Only the keys in `labels` are in the patch (a merge patch of metadata.labels leaves every other label as
        it is; null removes one), and only those whose value differs from the node's now."""
        foreign = sorted(set(labels) - set(MANAGED_LABELS))
        if foreign:  # a caller's bug must never reach someone else's labels
            raise BackendError(f"refusing to write node labels gpufleet does not own: {', '.join(foreign)}")
        have = self._node(node).metadata.labels or {}
        writes = {k: v for k, v in labels.items() if (have.get(k) != v if v is not None else k in have)}
        if not writes:
            return ""
        self._call(f"patch node {node}", self.core.patch_node, node, {"metadata": {"labels": writes}})
        detail = ", ".join(f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(writes.items()))
        self._event(node, "GpufleetTopologyLabels", f"fabric topology labels: {detail}", type_="Normal")
        return f"labelled {node}: {detail}"

    def sync_hypernodes(self, desired: Sequence[Mapping[str, Any]], *, dry_run: bool = False) -> list[str]:
        """One list of the cluster's HyperNodes, then a create per missing one, a replace (carrying the
        resourceVersion read, so a concurrent writer's change is refused, not lost) per one whose labels or spec
        differ, and a delete per one of gpufleet's that is no longer wanted. A name held by a HyperNode someone else
        made is left to them and said."""
        if self.custom is None:
            raise BackendError("no CustomObjectsApi to keep Volcano's HyperNodes with")
        group, version = VOLCANO_API.split("/")
        listed = self._call("list hypernodes", self.custom.list_cluster_custom_object, group, version, HYPERNODES)
        have = {str(o["metadata"]["name"]): o for o in listed.get("items") or []}
        would = "would " if dry_run else ""
        done: list[str] = []
        wanted = set()
        for obj in desired:
            name = str(obj["metadata"]["name"])
            wanted.add(name)
            old = have.get(name)
            said = f"hypernode {name} (tier {obj['spec']['tier']}, {len(obj['spec']['members'])} members)"
            if old is None:
                if not dry_run:
                    self._call(f"create hypernode {name}", self.custom.create_cluster_custom_object, group, version,
                               HYPERNODES, dict(obj))  # fmt: skip
                done.append(f"{would}create {said}")
            elif not _managed(old):
                done.append(f"left hypernode {name} alone: it exists and gpufleet did not create it")
            elif _differs(old, obj):
                if not dry_run:
                    meta = {**obj["metadata"], "resourceVersion": old["metadata"].get("resourceVersion")}
                    self._call(f"replace hypernode {name}", self.custom.replace_cluster_custom_object, group,
                               version, HYPERNODES, name, {**obj, "metadata": meta})  # fmt: skip
                done.append(f"{would}replace {said}")
        for name in sorted(n for n, o in have.items() if n not in wanted and _managed(o)):
            if not dry_run:
                self._call(f"delete hypernode {name}", self.custom.delete_cluster_custom_object, group, version,
                           HYPERNODES, name)  # fmt: skip
            done.append(f"{would}delete hypernode {name}")
        return done

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

    def drain(self, node: str, reason: str, incident: str | None) -> str:
        cordoned = self._change_cordon(node, lambda u, h: on_cordon(node, u, h, incident))
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
        return f"{cordoned.detail}; drained; evicted {', '.join(evicted) or 'no pods'}"

    # --- GPU-scoped drain ----------------------------------------------------------------------------------------

    def _requests_gpu(self, pod: Any) -> bool:
        for c in [*(pod.spec.containers or []), *(pod.spec.init_containers or [])] if pod.spec else []:
            res = c.resources
            wanted = {**((res.limits or {}) if res else {}), **((res.requests or {}) if res else {})}
            if any(k.startswith((self.gpu_resource, *GPU_RESOURCE_PREFIXES)) for k in wanted):
                return True
        return False

    def _gpu_pods(self, node: str, index: int, pods: list[Any]) -> tuple[list[Any], str]:
        """The pods on GPU `index`, and how we know. The agent names a GPU's holder when one pod holds it whole;
        when it names none, a GPU pod it placed on no GPU (a shared GPU's pods, or a node it has not reported) may
        be on this one, so those go too: a faulty GPU's work never stays for want of attribution."""
        key = lambda p: f"{p.metadata.namespace}/{p.metadata.name}"  # noqa: E731
        holders = self.gpu_holders(node) if self.gpu_holders is not None else None
        gpu_pods = [p for p in pods if self._requests_gpu(p)]
        if holders is None:
            return gpu_pods, "the node's agent has not said which pod holds which GPU: every GPU pod on the node"
        holder = holders.get(index, "")
        if holder:
            return [p for p in pods if key(p) == holder], f"the node's agent names {holder} as GPU {index}'s holder"
        placed = {h for h in holders.values() if h}
        unplaced = [p for p in gpu_pods if key(p) not in placed]
        if unplaced:
            return unplaced, f"no one pod holds GPU {index} whole: every GPU pod the agent places on no GPU"
        return [], f"the node's agent reports GPU {index} free"

    def _owner(self, pod: Any) -> str:
        """The pod's top controller, following ownerReferences through the API (a ReplicaSet's own references name
        its Deployment, a Job's its CronJob); "" for a bare pod."""
        meta, ns = pod.metadata, pod.metadata.namespace
        owner = ""
        refs = meta.owner_references or []
        for _ in range(4):  # Deployment -> ReplicaSet -> Pod is the deepest built-in chain
            ref = next((r for r in refs if r.controller), refs[0] if refs else None)
            if ref is None:
                break
            owner = f"{ref.kind} {ns}/{ref.name}"
            try:
                if ref.kind == "ReplicaSet" and self.apps is not None:
                    refs = self.apps.read_namespaced_replica_set(ref.name, ns).metadata.owner_references or []
                elif ref.kind == "Job" and self.batch is not None:
                    refs = self.batch.read_namespaced_job(ref.name, ns).metadata.owner_references or []
                else:
                    break
            except _api_exception():
                break  # gone or not ours to read: the nearest owner is what we know
        return owner

    def _leave(self, pod: Any, index: int, node: str, reason: str) -> None:
        """Tell the pod's owner (an Event on the pod) that it runs on a faulty GPU and was left there on purpose."""
        meta = pod.metadata
        body = event(
            kind="Pod",
            name=meta.name,
            namespace=meta.namespace,
            involved_namespace=meta.namespace,
            uid=meta.uid,
            reason="GpufleetFaultyGpu",
            message=f"GPU {index} of {node} is faulty ({reason}); left running by policy: move the work off it",
            component="gpufleet-remediate",
            when=datetime.fromtimestamp(self.clock(), UTC),
        )
        self._call("create event", self.core.create_namespaced_event, meta.namespace, body)

    def _delete(self, pod: Any, grace: int) -> None:
        c = kubernetes_module().client
        meta = pod.metadata
        try:
            self.core.delete_namespaced_pod(
                meta.name, meta.namespace, body=c.V1DeleteOptions(grace_period_seconds=grace)
            )
        except _api_exception() as exc:
            if getattr(exc, "status", None) != 404:  # already gone is what we wanted
                status, why = getattr(exc, "status", ""), getattr(exc, "reason", exc)
                raise BackendError(f"deleting {meta.namespace}/{meta.name} failed: {status} {why}") from None

    def drain_gpu(self, node: str, index: int, reason: str, eviction: EvictionSpec) -> str:
        pods = self._pods_on(node)
        targets, how = self._gpu_pods(node, index, pods)
        by_mode: dict[str, list[Any]] = {"evict": [], "delete": [], "leave": []}
        for pod in targets:
            by_mode[eviction.mode(pod.metadata.namespace)].append(pod)
        for pod in by_mode["delete"]:
            self._delete(pod, eviction.delete_grace_period)
        for pod in by_mode["leave"]:
            self._leave(pod, index, node, reason)
        evicted, blocked = self._evict(by_mode["evict"])
        owners = {f"{p.metadata.namespace}/{p.metadata.name}": self._owner(p) for p in targets}
        named = lambda keys: ", ".join(f"{k} ({owners[k]})" if owners.get(k) else k for k in keys)  # noqa: E731
        done = [f"evicted {named(sorted(evicted))}"] if evicted else []
        deleted = [f"{p.metadata.namespace}/{p.metadata.name}" for p in by_mode["delete"]]
        left = [f"{p.metadata.namespace}/{p.metadata.name}" for p in by_mode["leave"]]
        if deleted:
            done.append(f"deleted {named(deleted)} (grace {eviction.delete_grace_period}s)")
        if left:
            done.append(f"left {named(left)} running, owner told")
        kept = len(pods) - len(targets)
        summary = f"GPU {index} of {node}: {'; '.join(done) or 'no pods to move'}; {kept} other pod(s) kept ({how})"
        if blocked:
            self._event(node, "GpufleetDrainBlocked", f"GPU {index}: eviction blocked by a PodDisruptionBudget")
            raise BackendError(
                f"{summary}; {named(blocked)} held by a PodDisruptionBudget",
                fix="the runbook retries on the next apply; or relax the budget",
            )
        self._event(node, "GpufleetGpuDrain", f"{summary} [{reason}]")
        return summary

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
