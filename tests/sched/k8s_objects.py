"""Pods, nodes and Lists shaped as `kubectl get ... -o json` prints them, and small model clusters."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from gpufleet.model import Cluster
from gpufleet.sched.framework.snapshot import PodInfo, Snapshot, parse_pod, parse_snapshot
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests.conftest import require_tool

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
    gpu_resource: str = "nvidia.com/gpu",
    **spec: Any,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[gpu_resource] = str(gpus)
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


# --- other vendors' nodes, labelled as their feature discovery labels them -------------------------------------------


def amd_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "Instinct_MI300X_OAM",
    resources: dict[str, int] | None = None,
    partition: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An MI300X node with the AMD node labeller's default labels (operator defaults: product-name, device-id,
    family, vram, cu-count, simd-count, driver-version; the beta.amd.com forms too) and the device plugin's
    capacity: `amd.com/gpu`, or `resources` (e.g. {"amd.com/cpx_nps4": 64} under mixed naming)."""
    cus, vram = (38, "24G") if partition and partition.startswith("cpx") else (304, "192G")
    devices = sum((resources or {"amd.com/gpu": gpus}).values())
    lab = {"kubernetes.io/hostname": name, "feature.node.kubernetes.io/amd-gpu": "true"}
    for prop, value in (
        ("product-name", product), ("device-id", "74a1"), ("family", "AI"), ("vram", vram),
        ("cu-count", str(cus)), ("simd-count", str(cus * 4)),
    ):  # fmt: skip
        lab[f"amd.com/gpu.{prop}"] = lab[f"beta.amd.com/gpu.{prop}"] = value
        lab[f"beta.amd.com/gpu.{prop}.{value}"] = str(devices)
    lab["amd.com/gpu.driver-version"] = "6.10.5"
    if partition:
        lab["amd.com/gpu.compute-memory-partition"] = partition
    node = knode(name, gpus=0, labels={**lab, **(labels or {})})
    for key in ("capacity", "allocatable"):
        node["status"][key].update({k: str(v) for k, v in (resources or {"amd.com/gpu": gpus}).items()})
    return node


def gaudi_node(name: str, *, gpus: int = 8, device_type: str = "GAUDI3", device_id: str = "1060") -> dict[str, Any]:
    """A Gaudi node as Gaudi feature discovery labels it and the Habana device plugin reports it."""
    lab = {
        "kubernetes.io/hostname": name,
        "habana.ai/device.family": "gaudi",
        "habana.ai/device.count": str(gpus),
        "habana.ai/device.id": device_id,
        "habana.ai/device.revision": "01",
        "habana.ai/device.type": device_type,
        "habana.ai/driver.version": "1.21.0" if device_type else "",
        "habana.ai/fw.os": "Zephyr" if device_type else "",
    }
    node = knode(name, gpus=0, labels=lab)
    for key in ("capacity", "allocatable"):
        node["status"][key]["habana.ai/gaudi"] = str(gpus)
    return node


def kubectl_pod(tmp_path: Path, name: str, limits: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job's pod template made by kubectl itself (`create job --dry-run=client`, `set resources --local`), as a
    pending Pod for the gpufleet scheduler."""
    require_tool("kubectl")
    cfg = tmp_path / "kubeconfig"
    if not cfg.exists():
        cfg.write_text(
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
            "users: [{name: u, user: {token: unused}}]\n"
        )
    env = {**os.environ, "KUBECONFIG": str(cfg)}

    def run(args: list[str], stdin: str | None = None) -> dict[str, Any]:
        done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True, env=env)
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    job = run(["create", "job", name, "--image=rocm/pytorch:latest", "--dry-run=client", "-o", "json"])
    job = run(["set", "resources", "-f", "-", "--local", f"--limits={limits}", "-o", "json"], json.dumps(job))
    spec = {**job["spec"]["template"]["spec"], "schedulerName": "gpufleet"}
    meta = {"name": f"{name}-0", "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
