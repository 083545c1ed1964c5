"""Kubernetes-framework placement throughput: pods/s on synthetic clusters of 8-GPU nodes (5,000 by default).

Every pod goes through the full framework (cordon, taints, node selection, resource fit, NVLink domain filters;
NodeResourcesFit, TaintToleration, NodeAffinity, NVLink scores; GPU index choice). Workloads:
  - whole-GPU pods (1, 2, 4 or 8 nvidia.com/gpu, with cpu and memory), tolerating the GPU taint;
  - the same with a nodeSelector and preferred node affinity on half the pods;
  - the whole-GPU pods again through `Scheduler.plan`, the path of the live scheduler (`gpufleet sched run`), which
    packs each pod into the tightest leaf group that holds it;
  - 4 x 8-GPU gangs placed all-or-nothing under one leaf group.
Compared in the same table with kube-scheduler's upstream CI floors (scheduler_perf, 5000 nodes): 680 pods/s
SchedulingBasic, 180 pods/s SchedulingWithExtendedResource, 570 pods/s PreemptionAsync (a different workload: there
each preemptor needs one small victim). Targets: >= 10,000 pods/s for whole-GPU pods, >= 1,000 pods/s with
preemption, and a per-pod cost that does not grow with the number of nodes: `--nodes 1000,5000,20000` runs each size
and prints microseconds per pod next to pods/s. Times are CPU time of this process (time.process_time), medians.
`--reference` adds rows for the reference engine (every pod filters and scores every node) in the same run; run
against a source tree from before the class engine, the default rows are labelled `per node`.
At each size at most 2 pods per node are placed (`--pods` caps it), so the smallest cluster is not mostly failures.

    python bench/sched_k8s_throughput.py [--nodes 5000] [--pods 10000] [--repeats 3] [--reference]
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

TARGET = 10000.0
TARGET_PREEMPTION = 1000.0
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


def scheduler(nodes: list[NodeInfo], reference: bool) -> Scheduler:
    # only ask for the reference engine by name, so this file also measures a tree from before the class engine
    return Scheduler(nodes, reference=True) if reference else Scheduler(nodes)


def run_single(nodes: list[NodeInfo], pods: list[PodInfo], reference: bool = False) -> tuple[float, int]:
    sched = scheduler(nodes, reference)
    start = time.process_time()
    placed = sum(isinstance(sched.schedule_one(p), Placement) for p in pods)
    return time.process_time() - start, placed


def run_plan(nodes: list[NodeInfo], pods: list[PodInfo], reference: bool = False) -> tuple[float, int]:
    """The live scheduler's path (`gpufleet sched run` plans each cycle's pending pods): queue order, each pod
    packed into the tightest leaf group that holds it."""
    sched = scheduler(nodes, reference)
    start = time.process_time()
    result = sched.plan(pods, {}, preemption=False)
    return time.process_time() - start, len(result.placements)


def run_gangs(nodes: list[NodeInfo], pods: list[PodInfo], reference: bool = False) -> tuple[float, int]:
    gangs = {f"default/g{k}": Gang(f"default/g{k}", 4) for k in range(len(pods) // 4)}
    sched = scheduler(nodes, reference)
    start = time.process_time()
    result = sched.plan(pods, gangs, preemption=False)
    return time.process_time() - start, len(result.placements)


def run_preemption(
    nodes: list[NodeInfo], fill: list[PodInfo], urgent: list[PodInfo], reference: bool = False
) -> tuple[float, int]:
    """A full cluster of low-priority 2-GPU pods; each 8-GPU high-priority pod must evict four of them."""
    sched = Scheduler(nodes)
    for p in fill:  # the fill is set-up, not measured: the same placements either way
        sched.schedule_one(p)
    sched.reference = reference
    start = time.process_time()
    result = sched.plan(urgent, {})
    return time.process_time() - start, len(result.placements)


def measure(fn: Callable[[], tuple[float, int]], repeats: int) -> tuple[float, int]:
    runs = [fn() for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), runs[0][1]


def sizes(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        msg = f"--nodes {text!r}: give node counts separated by commas, e.g. 1000,5000"
        raise argparse.ArgumentTypeError(msg) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: node counts must be positive, e.g. 1000,5000,20000")
    return out


def rows_for(n_nodes: int, args: argparse.Namespace, reference: bool) -> list[tuple[str, float, int, int]]:
    nodes = [parse_node(node(i)) for i in range(n_nodes)]
    n_pods = min(args.pods, 2 * n_nodes)
    plain = whole_gpu(n_pods)
    aff = with_affinity(n_pods)
    fill = [parse_pod(pod(i, 2)) for i in range(n_nodes * 4)]
    urgent = [parse_pod(pod(10**6 + i, 8)) for i in range(min(args.preemptors, n_nodes))]
    for p in fill:
        p.pod.priority = 1
    for p in urgent:
        p.pod.priority = 1000
    gang_pods = [parse_pod(pod(i, 8, group=f"g{i // 4}")) for i in range(min(n_pods, n_nodes) // 4 * 4)]
    return [
        (
            "whole-GPU pods 1/2/4/8",
            *measure(lambda: run_single(nodes, plain, reference), args.repeats),
            len(plain),
        ),
        (
            "+ selector / pref. affinity",
            *measure(lambda: run_single(nodes, aff, reference), args.repeats),
            len(aff),
        ),
        (
            "whole-GPU pods via plan()",
            *measure(lambda: run_plan(nodes, plain, reference), args.repeats),
            len(plain),
        ),
        (
            "4 x 8-GPU gangs",
            *measure(lambda: run_gangs(nodes, gang_pods, reference), args.repeats),
            len(gang_pods),
        ),
        (
            "preemption 8 evicts 4x2 GPU",
            *measure(lambda: run_preemption(nodes, fill, urgent, reference), args.repeats),
            len(urgent),
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=sizes, default=[5000], help="node counts, comma-separated (1000,5000,20000)")
    ap.add_argument("--pods", type=int, default=10000, help="pods per workload (at most 2 per node)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preemptors", type=int, default=500)
    ap.add_argument("--reference", action="store_true", help="also run the reference engine (every node per pod)")
    args = ap.parse_args()
    engines = ["default", "reference"] if args.reference else ["default"]
    default = "classes" if hasattr(Scheduler, "by_class") else "per node"
    table = Table(title=f"Placement throughput, 8-GPU nodes, CPU time (median of {args.repeats})")
    for col in ("nodes", "engine", "workload", "pods", "placed", "cpu s", "pods/s", "µs/pod", "vs target",
                "vs kube basic 680", "vs kube ext. res. 180", "vs kube preemption 570"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("engine", "workload") else "right")
    for n_nodes in args.nodes:
        for engine in engines:
            label = default if engine == "default" else engine
            for name, seconds, placed, total in rows_for(n_nodes, args, engine == "reference"):
                rate = total / seconds if seconds > 0 else float("inf")
                target = TARGET_PREEMPTION if name.startswith("preemption") else TARGET
                table.add_row(
                    f"{n_nodes:,}", label, name, str(total), str(placed), f"{seconds:.2f}", f"{rate:,.0f}",
                    f"{1e6 * seconds / total:,.0f}", f"{rate / target:.2f}x of {target:,.0f}",
                    f"{rate / KUBE_BASIC:.2f}x", f"{rate / KUBE_EXTENDED:.2f}x", f"{rate / KUBE_PREEMPTION:.2f}x",
                )  # fmt: skip
        table.add_section()
    Console(width=max(Console().width, 170)).print(table)
    Console().print(
        "kube-scheduler figures are upstream scheduler_perf CI thresholds (SchedulingBasic 5000Nodes_10000Pods, "
        "SchedulingWithExtendedResource 5000pods_5000nodes, PreemptionAsync 5000Nodes): floors of a Go scheduler, not "
        "measured here."
    )


if __name__ == "__main__":
    main()
