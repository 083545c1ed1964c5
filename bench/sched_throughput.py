"""Placement throughput on a synthetic 5,000-node x 8-GPU cluster with whole-GPU pods.

    python bench/sched_throughput.py [--nodes 5000] [--pods 10000] [--policies best-fit,fgd,...]

Each pod goes through the full cycle: filter every node (CPU, memory, GPU model, free GPUs), score every
feasible node, pick, bind (update the arrays). Reference: kube-scheduler's CI floors at 5,000 nodes
(test/integration/scheduler_perf): 680 pods/s for SchedulingBasic 5000Nodes_10000Pods and 180 pods/s for
SchedulingWithExtendedResource. Target: >= 1,000 pods/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from gpufleet.sched.replay.openb import NodeList, PodList
from gpufleet.sched.replay.policies import expand_policies, make_policy
from gpufleet.sched.replay.state import ReplayCluster, pod_requests

KUBE_PLAIN = 680.0
KUBE_EXTENDED = 180.0
TARGET = 1000.0


def synthetic(n_nodes: int, n_pods: int, seed: int) -> tuple[NodeList, PodList]:
    rng = np.random.default_rng(seed)
    nodes = NodeList(
        names=tuple(f"node-{i:05d}" for i in range(n_nodes)),
        cpu_milli=np.full(n_nodes, 128000, dtype=np.int64),
        memory_mib=np.full(n_nodes, 1048576, dtype=np.int64),
        num_gpu=np.full(n_nodes, 8, dtype=np.int64),
        model=tuple("H100" for _ in range(n_nodes)),
    )
    gpus = rng.choice([1, 2, 4, 8], size=n_pods, p=[0.7, 0.15, 0.1, 0.05]).astype(np.int64)
    pods = PodList(
        names=tuple(f"pod-{i:06d}" for i in range(n_pods)),
        cpu_milli=gpus * rng.choice([4000, 8000, 12000], size=n_pods),
        memory_mib=gpus * rng.choice([16384, 32768, 65536], size=n_pods),
        num_gpu=gpus,
        gpu_milli=np.full(n_pods, 1000, dtype=np.int64),
        gpu_spec=tuple("" for _ in range(n_pods)),
        qos=tuple("LS" for _ in range(n_pods)),
    )
    return nodes, pods


def measure(nodes: NodeList, pods: PodList, policy_name: str) -> tuple[float, int]:
    cluster = ReplayCluster.from_nodes(nodes)
    policy = make_policy(policy_name)
    policy.prepare(cluster, pods)
    rng = np.random.default_rng(0)
    placed = 0
    requests = pod_requests(pods)
    start = time.perf_counter()
    for pod in requests:
        feasible = cluster.feasible(pod)
        if feasible.any():
            cluster.place(pod, policy.choose(cluster, pod, feasible, rng))
            placed += 1
    return len(requests) / (time.perf_counter() - start), placed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--policies", default="first-fit,best-fit,gpu-packing,dot-product,fgd")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    console = Console(width=150)
    nodes, pods = synthetic(args.nodes, args.pods, seed=1)
    console.print(
        f"{args.nodes} nodes x 8 GPUs, {args.pods} whole-GPU pods "
        f"({int(pods.num_gpu.sum())} GPUs requested of {int(nodes.num_gpu.sum())}), {args.repeats} repeats"
    )
    table = Table(title="placement throughput (pods/s, median of repeats)")
    for col in (
        "policy",
        "pods/s",
        "placed",
        "vs kube plain 680",
        "vs kube ext. res. 180",
        f">= {TARGET:.0f}",
    ):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name in expand_policies(args.policies):
        runs = [measure(nodes, pods, name) for _ in range(args.repeats)]
        rate = statistics.median(r[0] for r in runs)
        table.add_row(
            name,
            f"{rate:,.0f}",
            str(runs[0][1]),
            f"{rate / KUBE_PLAIN:.2f}x",
            f"{rate / KUBE_EXTENDED:.2f}x",
            str(rate >= TARGET),
        )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
