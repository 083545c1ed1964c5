"""How fast the twin runs: simulated seconds per wall second at 1 s ticks, with telemetry and training jobs.

Clusters of DGX-style nodes (8 GPUs, 8 rails each): 64, 256 and 1024 unless --nodes says otherwise, up to 16,384
nodes = 131,072 GPUs, whose rails need 128-port switches for three tiers. One 8-node training job per 8 nodes; the
recorder keeps its per-GPU ring and per-minute fleet aggregates. Targets: >= 2000x real time at 256 nodes, >= 100x
at 16,384 nodes, and cost growing no faster than linearly in GPUs (per-GPU cost at the largest size no higher than
at the smallest). Speeds are medians over --repeats runs, by this process's CPU time (the machine may be shared;
CPU time is steadier) and by wall clock. "memory" is what the process's resident set grew by to build and run that
size (the ring alone is ring seconds x GPUs x 4 fields x 4 bytes).

    python bench/sim_speed.py [--nodes 64,256,1024] [--seconds 600] [--repeats 3]
    python bench/sim_speed.py --nodes 256,4096,16384 --seconds 600,300,120 --save after.json --baseline before.json

--save writes this run's figures as JSON; --baseline reads such a file (the same sizes, measured before a change)
and adds its speed and the ratio to each row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.model import TrainingJob
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

TARGETS = {256: 2000.0, 16384: 100.0}  # nodes -> x real time by CPU time
PAGE = os.sysconf("SC_PAGE_SIZE")


def make(nodes: int) -> Twin:
    pool = {"name": "dgx", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
    spec: dict[str, object] = {"nodePools": [pool]}
    if nodes * 8 > 64**3 // 4:  # past what three tiers of 64-port switches reach: 128-port leaves (a Quantum-X800)
        spec["fabric"] = {"leafRadix": 128}
    body = ClusterBody.model_validate(spec)
    cluster = build_cluster(f"bench-{nodes}", body)
    jobs = [
        TrainingJob(name=f"job-{k}", nodes=[f"dgx-{i:03d}" for i in range(8 * k, 8 * k + 8)], gpus_per_node=8)
        for k in range(nodes // 8)
    ]
    return Twin(cluster, seed=1, jobs=jobs)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def measure(nodes: int, seconds: int, repeats: int) -> dict[str, float]:
    """Median speed by wall clock and by this process's CPU time, build time and memory for one size."""
    rss0 = rss_mib()
    c0 = time.process_time()
    twin = make(nodes)
    build_s = time.process_time() - c0
    twin.run(60)  # warm-up: caches, first allocations
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        twin.run(seconds)
        wall.append(seconds / (time.perf_counter() - w0))
        cpu.append(seconds / (time.process_time() - c0))
    gpus = twin.gpus.n
    x_cpu = statistics.median(cpu)
    return {
        "nodes": nodes,
        "gpus": gpus,
        "seconds": seconds,
        "x_wall": statistics.median(wall),
        "x_cpu": x_cpu,
        "ns_per_gpu_tick": 1e9 / x_cpu / gpus,
        "build_s": build_s,
        "memory_mib": rss_mib() - rss0,
    }


def sizes(text: list[str]) -> list[int]:
    """`--nodes 256,4096` or `--nodes 256 4096`."""
    return [int(part) for item in text for part in item.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--seconds", default="600", help="simulated seconds per measurement: one for all sizes, or one per size"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", nargs="*", default=["64,256,1024"], help="cluster sizes in nodes (8 GPUs each)")
    parser.add_argument("--save", type=Path, help="write this run's figures here (JSON)")
    parser.add_argument("--baseline", type=Path, help="a file --save wrote before a change: compare with it")
    args = parser.parse_args()

    nodes_list = sizes(args.nodes)
    seconds = [int(s) for s in args.seconds.split(",")]
    if len(seconds) == 1:
        seconds *= len(nodes_list)
    if len(seconds) != len(nodes_list):
        parser.error(f"--seconds gives {len(seconds)} values for {len(nodes_list)} sizes: give one, or one per size")
    base = {}
    if args.baseline:
        base = {int(r["nodes"]): r for r in json.loads(args.baseline.read_text())["rows"]}

    rows = [measure(n, s, args.repeats) for n, s in zip(nodes_list, seconds, strict=True)]
    if args.save:
        args.save.write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=1) + "\n")

    base_ns = rows[0]["ns_per_gpu_tick"]
    table = Table(title=f"Twin speed at 1 s ticks (median of {args.repeats} runs)")
    cols = ["nodes", "GPUs", "sim s", "x real time (wall)", "x real time (CPU)", "target", "ns CPU per GPU-tick"]
    cols += ["vs smallest", "build s (CPU)", "memory MiB"]
    if base:
        cols += ["baseline x (CPU)", "speed-up"]
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        nodes, x_cpu = int(r["nodes"]), r["x_cpu"]
        target = ""
        if nodes in TARGETS:
            goal = TARGETS[nodes]
            target = f"[green]>= {goal:,.0f}x[/green]" if x_cpu >= goal else f"[red]< {goal:,.0f}x[/red]"
        cells = [
            f"{nodes:,}",
            f"{int(r['gpus']):,}",
            f"{int(r['seconds']):,}",
            f"{r['x_wall']:,.0f}",
            f"{x_cpu:,.0f}",
            target,
            f"{r['ns_per_gpu_tick']:,.0f}",
            f"{r['ns_per_gpu_tick'] / base_ns:.2f}",
            f"{r['build_s']:.1f}",
            f"{r['memory_mib']:,.0f}",
        ]
        if base:
            before = base.get(nodes)
            cells += [f"{before['x_cpu']:,.0f}", f"{x_cpu / before['x_cpu']:.1f}x"] if before else ["-", "-"]
        table.add_row(*cells)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    goals = ", ".join(f"{goal:,.0f}x at {n:,} nodes" for n, goal in TARGETS.items())
    print(f"baseline: real time is 1x; targets {goals}; linear scaling keeps 'vs smallest' <= 1.0")


if __name__ == "__main__":
    main()
