"""Pods, nodes and Lists shaped as `kubectl get ... -o json` prints them, and small model clusters."""

from __future__ import annotations

from typing import Any

from gpufleet.model import Cluster
from gpufleet.sched.framework.snapshot import PodInfo, Snapshot, parse_pod, parse_snapshot
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

H100 = "NVIDIA-H100-80GB-HBM3"
H100_NVL = "NVIDIA-H100-NVL"
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def kpod(
    name: str,
    *,
    gpus: int | str = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    namespace: str = "default",
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    resources: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": resources or {"limits": limits}}],
        "schedulerName": "gpufleet",
        **spec,
    }
    if node:
        body["nodeName"] = node
    if priority is not None:
        body["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": body,
        "status": {"phase": "Running" if node else "Pending"},
    }


def knode(
    name: str,
    *,
    gpus: int = 8,
    allocatable_gpus: int | None = None,
    product: str = H100,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: str = "True",
    cpu: str = "224",
    memory: str = "2000Gi",
) -> dict[str, Any]:
    base = {"kubernetes.io/hostname": name}
    if gpus:
        base["nvidia.com/gpu.product"] = product
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    allocatable = dict(capacity)
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        allocatable["nvidia.com/gpu"] = str(gpus if allocatable_gpus is None else allocatable_gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**base, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
        },
    }


def klist(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}}


def snap(*items: dict[str, Any]) -> Snapshot:
    return parse_snapshot(klist(*items))


def pod(name: str, **kw: Any) -> PodInfo:
    return parse_pod(kpod(name, **kw))


def fabric_cluster(nodes: int = 8, per_su: int = 4, model: str = "h100-sxm", gpus: int = 8) -> Cluster:
    """`nodes` 8-GPU nodes with 8 rails, `per_su` nodes per scalable unit (one set of 8 rail leaves each)."""
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": nodes, "gpu": {"model": model, "count": gpus}, "nics": {"count": 8}}],
            "fabric": {"leafRadix": 64, "nodesPerScalableUnit": per_su},
        }
    )
    return build_cluster("t", body)
