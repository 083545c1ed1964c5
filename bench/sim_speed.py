"""How fast the twin runs: simulated seconds per wall second at 1 s ticks, with telemetry and training jobs.

Clusters of 64, 256 and 1024 DGX-style nodes (8 GPUs, 8 rails each), one 8-node training job per 8 nodes, the
recorder keeping its per-GPU ring and per-minute fleet aggregates. Target: >= 1000x real time at 256 nodes, and
cost growing no faster than linearly in GPUs (per-GPU cost at 1024 nodes no higher than at 64).

    python bench/sim_speed.py [--seconds 600] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from gpufleet.model import TrainingJob
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

TARGET_AT_256 = 1000.0


def make(nodes: int) -> Twin:
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "dgx", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}]}
    )
    cluster = build_cluster(f"bench-{nodes}", body)
    jobs = [
        TrainingJob(name=f"job-{k}", nodes=[f"dgx-{i:03d}" for i in range(8 * k, 8 * k + 8)], gpus_per_node=8)
        for k in range(nodes // 8)
    ]
    return Twin(cluster, seed=1, jobs=jobs)


def measure(nodes: int, seconds: int, repeats: int) -> tuple[float, float, float]:
    """Median speed by wall clock and by this process's CPU time (the machine is shared; CPU time is steadier)."""
    twin = make(nodes)
    twin.run(60)  # warm-up: caches, first allocations
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        twin.run(seconds)
        wall.append(seconds / (time.perf_counter() - w0))
        cpu.append(seconds / (time.process_time() - c0))
    return statistics.median(wall), statistics.median(cpu), float(twin.gpus.n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=600, help="simulated seconds per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, nargs="*", default=[64, 256, 1024])
    args = parser.parse_args()

    rows = []
    for nodes in args.nodes:
        wall, cpu, gpus = measure(nodes, args.seconds, args.repeats)
        rows.append((nodes, int(gpus), wall, cpu, 1e9 / cpu / gpus))
    base_ns = rows[0][4]
    table = Table(title=f"Twin speed at 1 s ticks (median of {args.repeats} x {args.seconds} simulated s)")
    cols = ("nodes", "GPUs", "x real time (wall)", "x real time (CPU)", "target", "ns CPU per GPU-tick", "vs smallest")
    for col in cols:
        table.add_column(col, justify="right")
    for nodes, gpus, wall, cpu, ns in rows:
        target = ""
        if nodes == 256:
            target = "[green]>= 1000x[/green]" if cpu >= TARGET_AT_256 else "[red]< 1000x[/red]"
        table.add_row(str(nodes), str(gpus), f"{wall:,.0f}", f"{cpu:,.0f}", target, f"{ns:,.0f}", f"{ns / base_ns:.2f}")
    Console().print(table)
    print("baseline: real time is 1x; target 1000x at 256 nodes; linear scaling keeps the last column <= 1.0")


if __name__ == "__main__":
    main()
