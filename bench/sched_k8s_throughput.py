"""Kubernetes-framework placement throughput: pods/s on a synthetic 5,000-node x 8-GPU cluster.

Every pod goes through the full framework (cordon, taints, node selection, resource fit, NVLink domain filters;
NodeResourcesFit, TaintToleration, NodeAffinity, NVLink scores; GPU index choice). Workloads:
  - whole-GPU pods (1, 2, 4 or 8 nvidia.com/gpu, with cpu and memory), tolerating the GPU taint;
  - the same with a nodeSelector and preferred node affinity on half the pods;
  - 4 x 8-GPU gangs placed all-or-nothing under one leaf group.
Compared in the same table with kube-scheduler's upstream CI floors (scheduler_perf, 5000 nodes): 680 pods/s
SchedulingBasic, 180 pods/s SchedulingWithExtendedResource, 570 pods/s PreemptionAsync (a different workload: there
each preemptor needs one small victim). Target: >= 1,000 pods/s for whole-GPU pods.

    python bench/sched_k8s_throughput.py [--nodes 5000] [--pods 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from gpufleet.model import Gang
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import NodeInfo, PodInfo, parse_node, parse_pod
from gpufleet.sched.framework.types import Placement

TARGET = 1000.0
KUBE_BASIC = 680.0
KUBE_EXTENDED = 180.0
KUBE_PREEMPTION = 570.0
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(i: int) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": f"gpu-{i:05d}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "topology.kubernetes.io/zone": f"zone-{i % 4}",
        "gpufleet.io/leaf-group": f"su{i // 32}",
    }
    cap = {"cpu": "224", "memory": "2000Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "kind": "Node",
        "metadata": {"name": f"gpu-{i:05d}", "labels": labels},
        "spec": {"taints": [GPU_TAINT]},
        "status": {"capacity": cap, "allocatable": cap, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(i: int, gpus: int, affinity: bool = False, group: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "32Gi"}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        "tolerations": [GPU_TOL],
    }
    if affinity:
        zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [f"zone-{i % 4}"]}
        spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        spec["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [zone]}}
                ]
            }
        }
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "labels": labels}, "spec": spec, "status": {}}


def whole_gpu(n: int) -> list[PodInfo]:
    sizes = (1, 1, 1, 1, 2, 2, 4, 8)
    return [parse_pod(pod(i, sizes[i % len(sizes)])) for i in range(n)]


def with_affinity(n: int) -> list[PodInfo]:
    sizes = (1, 1, 1, 1, 2, 2, 4, 8)
    return [parse_pod(pod(i, sizes[i % len(sizes)], affinity=i % 2 == 0)) for i in range(n)]


def run_single(nodes: list[NodeInfo], pods: list[PodInfo]) -> tuple[float, int]:
    sched = Scheduler(nodes)
    start = time.perf_counter()
    placed = sum(isinstance(sched.schedule_one(p), Placement) for p in pods)
    return time.perf_counter() - start, placed


def run_gangs(nodes: list[NodeInfo], pods: list[PodInfo]) -> tuple[float, int]:
    gangs = {f"default/g{k}": Gang(f"default/g{k}", 4) for k in range(len(pods) // 4)}
    sched = Scheduler(nodes)
    start = time.perf_counter()
    result = sched.plan(pods, gangs, preemption=False)
    return time.perf_counter() - start, len(result.placements)


def run_preemption(nodes: list[NodeInfo], fill: list[PodInfo], urgent: list[PodInfo]) -> tuple[float, int]:
    """A full cluster of low-priority 2-GPU pods; each 8-GPU high-priority pod must evict four of them."""
    sched = Scheduler(nodes)
    for p in fill:
        sched.schedule_one(p)
    start = time.perf_counter()
    result = sched.plan(urgent, {})
    return time.perf_counter() - start, len(result.placements)


def measure(fn: Callable[[], tuple[float, int]], repeats: int) -> tuple[float, int]:
    runs = [fn() for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), runs[0][1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preemptors", type=int, default=500)
    args = ap.parse_args()
    nodes = [parse_node(node(i)) for i in range(args.nodes)]
    plain = whole_gpu(args.pods)
    aff = with_affinity(args.pods)
    fill = [parse_pod(pod(i, 2)) for i in range(args.nodes * 4)]
    urgent = [parse_pod(pod(10**6 + i, 8)) for i in range(args.preemptors)]
    for p in fill:
        p.pod.priority = 1
    for p in urgent:
        p.pod.priority = 1000
    gang_pods = [parse_pod(pod(i, 8, group=f"g{i // 4}")) for i in range(min(args.pods, args.nodes) // 4 * 4)]
    rows = [
        ("whole-GPU pods (1/2/4/8 GPUs)", *measure(lambda: run_single(nodes, plain), args.repeats), len(plain)),
        ("+ nodeSelector / preferred affinity", *measure(lambda: run_single(nodes, aff), args.repeats), len(aff)),
        ("4 x 8-GPU gangs, leaf-packed", *measure(lambda: run_gangs(nodes, gang_pods), args.repeats), len(gang_pods)),
        (
            "preemption: 8-GPU pod evicts 4 x 2-GPU",
            *measure(lambda: run_preemption(nodes, fill, urgent), 1),
            len(urgent),
        ),
    ]
    table = Table(title=f"Placement throughput, {args.nodes} nodes x 8 GPUs (median of {args.repeats})")
    for col in ("workload", "pods", "placed", "seconds", "pods/s", "vs target 1000", "vs kube basic 680",
                "vs kube ext. res. 180", "vs kube preemption 570"):  # fmt: skip
        table.add_column(col, justify="right" if col != "workload" else "left")
    for name, seconds, placed, total in rows:
        rate = total / seconds
        table.add_row(
            name, str(total), str(placed), f"{seconds:.2f}", f"{rate:,.0f}", f"{rate / TARGET:.2f}x",
            f"{rate / KUBE_BASIC:.2f}x", f"{rate / KUBE_EXTENDED:.2f}x", f"{rate / KUBE_PREEMPTION:.2f}x",
        )  # fmt: skip
    Console().print(table)
    Console().print(
        "kube-scheduler figures are upstream scheduler_perf CI thresholds (SchedulingBasic 5000Nodes_10000Pods, "
        "SchedulingWithExtendedResource 5000pods_5000nodes, PreemptionAsync 5000Nodes): floors of a Go scheduler, not "
        "measured here."
    )


if __name__ == "__main__":
    main()
