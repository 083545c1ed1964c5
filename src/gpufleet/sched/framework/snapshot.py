"""Kubernetes resource semantics, and pods and nodes read from `kubectl get nodes,pods -o json`.

What a pod asks for follows the API server's rules: per-container requests default to limits; an extended resource
(a name with a domain, such as ``nvidia.com/gpu``) is an integer, must have a limit, and a request different from its
limit is invalid; the pod's effective request is ``max(sum(containers), max(initContainers))``.

Gangs: a pod belongs to a gang when it carries the coscheduling label ``scheduling.x-k8s.io/pod-group`` (the
scheduler-plugins PodGroup) or Volcano's annotation ``scheduling.k8s.io/group-name``. The gang's minMember comes from
a PodGroup object in the same List (``spec.minMember``, or Volcano's ``spec.minAvailable``), else from the annotation
``gpufleet.io/min-member``, else it is every pod of the group. Queues: ``kueue.x-k8s.io/queue-name`` label, Volcano's
``scheduling.volcano.sh/queue-name`` annotation, or ``gpufleet.io/queue``; otherwise ``default``.
A runtime estimate for backfill is read from the annotation ``gpufleet.io/runtime-estimate`` (e.g. ``2h``).

Accelerators of every vendor read alike (devices.py): a pod's GPU request and vendor follow its resource names
(``nvidia.com/gpu``, ``amd.com/gpu``, ``habana.ai/gaudi``, MIG slices, AMD partitions); a node's model and vendor
follow the label its vendor's feature discovery writes and the capacity its device plugin reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet import yaml_input
from gpufleet.errors import ParseError
from gpufleet.model import (
    Gang,
    Node,
    NodeAffinity,
    NodeCondition,
    Pod,
    PodPhase,
    PreferredTerm,
    SelectorRequirement,
    Taint,
    TaintEffect,
    Toleration,
)
from gpufleet.model.affinity import HostAffinity

# the fabric's health for placement is plain data in the model; placement code has long imported it from here
from gpufleet.model.fabric_health import FabricHealth as FabricHealth
from gpufleet.model.fabric_health import LeafHealth as LeafHealth
from gpufleet.model.fabric_health import LeafState as LeafState
from gpufleet.sched.framework.devices import (
    GPU_SHARED_RESOURCE,
    gpu_model_for_product,
    gpu_request_of,
    model_pod_requests,
    node_gpus,
)
from gpufleet.sched.framework.resources import (
    MIG_PREFIX,
    container_resources,
    is_extended_resource,
    parse_quantity,
    pod_requests,
    resource_int,
)

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
MIN_MEMBER_ANNOTATION = "gpufleet.io/min-member"
__all__ = [
    "GPU_SHARED_RESOURCE",
    "MIG_PREFIX",
    "container_resources",
    "gpu_model_for_product",
    "gpu_request_of",
    "is_extended_resource",
    "model_pod_requests",
    "parse_quantity",
    "pod_requests",
]
QUEUE_KEYS = ("kueue.x-k8s.io/queue-name", "scheduling.volcano.sh/queue-name", "gpufleet.io/queue")
RUNTIME_ANNOTATION = "gpufleet.io/runtime-estimate"
DEFAULT_SCHEDULER = "default-scheduler"
# Built-in PriorityClasses the API server creates; user classes come from PriorityClass objects in the List.
SYSTEM_PRIORITIES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
POOL_LABELS = (
    "gpufleet.io/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/instance-type",
)


@dataclass(slots=True)
class PodInfo:
    """A pod as the scheduler sees it: the model pod plus the Kubernetes facts placement needs."""

    pod: Pod
    requests: dict[str, int]  # cpu in millicores, memory in bytes, extended resources as counts
    scheduler_name: str = DEFAULT_SCHEDULER
    priority_class_name: str = ""
    uid: str = ""
    owner: str = ""  # Kind/name of the controller
    runtime_s: float | None = None
    preemptible: bool = True
    annotations: dict[str, str] = field(default_factory=dict)
    created: str = ""  # metadata.creationTimestamp (RFC 3339 sorts as text)
    started: float | None = None  # status.startTime, seconds since the epoch

    @property
    def key(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}"

    @property
    def bound(self) -> bool:
        return self.pod.node is not None and self.pod.phase in (PodPhase.pending, PodPhase.running)


@dataclass(slots=True)
class NodeInfo:
    """A node with what the kubelet reports: capacity and allocatable, per resource."""

    node: Node
    capacity: dict[str, int]
    allocatable: dict[str, int]
    affinity: HostAffinity | None = None  # GPU<->NIC<->CPU, as the node's agent or `nvidia-smi topo -m` reads it


@dataclass(slots=True)
class Snapshot:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)
    gangs: dict[str, Gang] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)
    fabric_health: FabricHealth | None = None  # from the discovered fabric; None: nothing known, every leaf ok

    def pending(self, scheduler_name: str | None = None) -> list[PodInfo]:
        return [
            p
            for p in self.pods
            if p.pod.node is None
            and p.pod.phase is PodPhase.pending
            and (scheduler_name is None or p.scheduler_name == scheduler_name)
        ]

    def pod(self, ref: str) -> PodInfo:
        for p in self.pods:
            if ref in (p.key, p.pod.name):
                return p
        from gpufleet.errors import NotFoundError

        raise NotFoundError(f"no pod {ref!r} in the snapshot", fix="name it as NAME or NAMESPACE/NAME")


def parse_time(value: str | None, where: str) -> float | None:
    """An RFC 3339 timestamp as the API server writes it ("2026-11-20T08:00:00Z") -> seconds since the epoch."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ParseError(f"{where}: {value!r} is not an RFC 3339 time", fix="e.g. 2026-11-20T08:00:00Z") from None


def _requirement(raw: dict[str, Any], where: str) -> SelectorRequirement:
    op = raw.get("operator", "")
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise ParseError(f"{where}: unknown operator {op!r}", fix="use In, NotIn, Exists, DoesNotExist, Gt or Lt")
    values = tuple(str(v) for v in raw.get("values") or ())
    if op in ("Gt", "Lt"):
        if len(values) != 1 or not values[0].lstrip("-").isdigit():
            raise ParseError(f"{where}: {op} needs exactly one integer value", fix='e.g. values: ["8"]')
    elif op in ("In", "NotIn") and not values:
        raise ParseError(f"{where}: {op} needs at least one value", fix="list the values")
    return SelectorRequirement(raw["key"], op, values)


def parse_affinity(spec: dict[str, Any], where: str) -> NodeAffinity | None:
    node_aff = (spec.get("affinity") or {}).get("nodeAffinity")
    if not node_aff:
        return None
    required: list[tuple[SelectorRequirement, ...]] = []
    req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for t, term in enumerate(req.get("nodeSelectorTerms") or []):
        exprs = term.get("matchExpressions") or []
        required.append(tuple(_requirement(e, f"{where} nodeSelectorTerms[{t}]") for e in exprs))
    preferred = []
    for t, pref in enumerate(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        exprs = (pref.get("preference") or {}).get("matchExpressions") or []
        reqs = tuple(_requirement(e, f"{where} preferred[{t}]") for e in exprs)
        preferred.append(PreferredTerm(int(pref.get("weight", 1)), reqs))
    return NodeAffinity(required=tuple(required), preferred=tuple(preferred))


def _effect(raw: str | None, where: str) -> TaintEffect | None:
    if not raw:
        return None
    try:
        return TaintEffect(raw)
    except ValueError:
        fix = "use NoSchedule, PreferNoSchedule or NoExecute"
        raise ParseError(f"{where}: unknown taint effect {raw!r}", fix=fix) from None


def parse_pod(obj: dict[str, Any], priority_classes: dict[str, int] | None = None) -> PodInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta.get("name") or meta.get("generateName") or ""
    where = f"pod {meta.get('namespace', 'default')}/{name}"
    requests = pod_requests(spec, where)
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    tolerations = tuple(
        Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=_effect(t.get("effect"), where),
        )
        for t in spec.get("tolerations") or []
    )
    pcn = spec.get("priorityClassName", "") or ""
    classes = {**SYSTEM_PRIORITIES, **(priority_classes or {})}
    priority = spec.get("priority")
    if priority is None:
        priority = classes.get(pcn, 0)
    gang = labels.get(POD_GROUP_LABEL) or annotations.get(VOLCANO_GROUP_ANNOTATION)
    queue = next((labels.get(k) or annotations.get(k) for k in QUEUE_KEYS if labels.get(k) or annotations.get(k)), None)
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")] or meta.get("ownerReferences") or []
    runtime = annotations.get(RUNTIME_ANNOTATION)
    runtime_s = None
    if runtime:
        from gpufleet.spec.base import parse_duration

        try:
            runtime_s = parse_duration(runtime)
        except ValueError as exc:
            raise ParseError(
                f"{where}: annotation {RUNTIME_ANNOTATION}={runtime!r}: {exc}", fix='e.g. "2h30m"'
            ) from None
    try:
        phase = PodPhase(status.get("phase", "Pending"))
    except ValueError:
        phase = PodPhase.pending
    pod = Pod(
        name=name,
        namespace=meta.get("namespace", "default"),
        cpu_milli=requests.get("cpu", 0),
        memory_mib=math.ceil(requests.get("memory", 0) / 2**20),
        gpu=gpu_request_of(requests),
        tolerations=tolerations,
        node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        affinity=parse_affinity(spec, where),
        priority=int(priority),
        queue=queue or "default",
        gang=f"{meta.get('namespace', 'default')}/{gang}" if gang else None,
        phase=phase,
        node=spec.get("nodeName") or None,
        labels=labels,
    )
    return PodInfo(
        pod=pod,
        requests=requests,
        scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER,
        priority_class_name=pcn,
        uid=meta.get("uid", ""),
        owner=f"{owners[0]['kind']}/{owners[0]['name']}" if owners else "",
        runtime_s=runtime_s,
        preemptible=spec.get("preemptionPolicy", "PreemptLowerPriority") == "PreemptLowerPriority",
        annotations=annotations,
        created=meta.get("creationTimestamp") or "",
        started=parse_time(status.get("startTime"), f"{where} status.startTime"),
    )


def parse_node(obj: dict[str, Any]) -> NodeInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta.get("name", "")
    where = f"node {name}"
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    capacity = {k: resource_int(k, v, f"{where}.status.capacity") for k, v in (status.get("capacity") or {}).items()}
    alloc_raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = {k: resource_int(k, v, f"{where}.status.allocatable") for k, v in alloc_raw.items()}
    taints = []
    for t in spec.get("taints") or []:
        effect = _effect(t.get("effect"), where)
        if effect is None:
            raise ParseError(f"{where}: taint {t.get('key')!r} has no effect", fix="every taint needs an effect")
        taints.append(Taint(t["key"], effect, t.get("value", "")))
    conditions = [
        NodeCondition(
            type=c.get("type", ""),
            status=c.get("status", "Unknown"),
            reason=c.get("reason", ""),
            message=c.get("message", ""),
        )
        for c in status.get("conditions") or []
    ]
    pool = next((labels[k] for k in POOL_LABELS if k in labels), "")
    node = Node(
        name=name,
        pool=pool,
        cpu_milli=capacity.get("cpu", 0),
        memory_mib=capacity.get("memory", 0) // 2**20,
        gpus=node_gpus(name, labels, capacity, allocatable),
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        conditions=conditions,
        rack=labels.get("topology.kubernetes.io/zone", ""),
    )
    return NodeInfo(node=node, capacity=capacity, allocatable=allocatable)


def parse_snapshot(doc: dict[str, Any]) -> Snapshot:
    """A `kubectl get nodes,pods[,priorityclasses,podgroups] -o json` List (or a single object)."""
    items = doc.get("items") if doc.get("kind", "").endswith("List") or "items" in doc else [doc]
    if not isinstance(items, list):
        raise ParseError("snapshot: `items` is not a list", fix="capture with `kubectl get nodes,pods -A -o json`")
    snap = Snapshot()
    min_members: dict[str, int] = {}
    for item in items:
        kind = item.get("kind")
        meta = item.get("metadata") or {}
        if kind == "PriorityClass":
            snap.priority_classes[meta["name"]] = int(item.get("value", 0))
        elif kind == "PodGroup":
            spec = item.get("spec") or {}
            key = f"{meta.get('namespace', 'default')}/{meta['name']}"
            min_members[key] = int(spec.get("minMember", spec.get("minAvailable", 1)))
    for i, item in enumerate(items):
        kind = item.get("kind")
        try:
            if kind == "Node":
                snap.nodes.append(parse_node(item))
            elif kind == "Pod":
                snap.pods.append(parse_pod(item, snap.priority_classes))
        except (KeyError, TypeError, ValueError) as exc:
            raise ParseError(f"snapshot item {i} ({kind}): malformed field {exc}", fix="pass kubectl's JSON") from None
    snap.gangs = assemble_gangs(snap.pods, min_members)
    return snap


def assemble_gangs(pods: list[PodInfo], min_members: dict[str, int] | None = None) -> dict[str, Gang]:
    """Group pods by their pod-group; minMember from the PodGroup, the annotation, or the group's size."""
    gangs: dict[str, Gang] = {}
    for info in pods:
        name = info.pod.gang
        if name is None:
            continue
        g = gangs.get(name)
        if g is None:
            g = gangs[name] = Gang(name=name, min_member=0, queue=info.pod.queue, priority=info.pod.priority)
            annotated = info.annotations.get(MIN_MEMBER_ANNOTATION) or info.pod.labels.get(MIN_MEMBER_ANNOTATION)
            if min_members and name in min_members:
                g.min_member = min_members[name]
            elif annotated and annotated.isdigit():
                g.min_member = int(annotated)
        g.pods.append(info.key)
    for g in gangs.values():
        if g.min_member <= 0:
            g.min_member = len(g.pods)
    return gangs


def load_snapshot(path: Path) -> Snapshot:
    """A saved `kubectl get nodes,pods -A -o json`, read through the one bounded config reader."""
    doc = yaml_input.load_json(yaml_input.read_file(path, capture=True), str(path), capture=True)
    if not isinstance(doc, dict):
        raise ParseError(f"{path}: expected a kubectl List object", fix="capture with `kubectl get ... -o json`")
    return parse_snapshot(doc)


def pod_info(pod: Pod, *, runtime_s: float | None = None, scheduler_name: str = DEFAULT_SCHEDULER) -> PodInfo:
    return PodInfo(pod=pod, requests=model_pod_requests(pod), scheduler_name=scheduler_name, runtime_s=runtime_s)


def node_info(node: Node, *, max_pods: int = 110) -> NodeInfo:
    """A model node as the kubelet would report it (unhealthy GPUs lower allocatable)."""
    cap = node.capacity()
    alloc = node.allocatable()
    cap["pods"] = alloc["pods"] = max_pods
    return NodeInfo(node=node, capacity=cap, allocatable=alloc)
