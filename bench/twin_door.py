"""How fast the twin runs through the one door: its nodes as agents pushing to an in-process control plane, as
`gpufleet up` and `gpufleet get ... -f SCENARIO --at` run it, against the bare twin stepping alone, in the same run.

On the built-in 256-GPU day (32 DGX H100 nodes, 1 s ticks): simulated seconds per second of this process's CPU for
the bare twin (`Twin.run`) and through the door (the agents' collection, node-local detectors and batches, the
control plane's ingest and its turn every tick), medians of repeats; then `gpufleet get incidents -f SCENARIO --at
12h -o json` as a person runs it (a process of its own: wall and CPU seconds). Targets: >= 500x real time through
the door, and `--at 12h` in under 90 s.

    python bench/twin_door.py [--seconds 900] [--repeats 3] [--at 12h] [--scenario FILE]

`--at 0` skips the command's run (it takes a minute or more).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.cli.core import twin_plane
from gpufleet.sim.fleet import SimFleet
from gpufleet.sim.runner import run_headless
from gpufleet.sim.scenario import build_twin
from gpufleet.spec.base import parse_duration

DAY = Path(__file__).resolve().parents[1] / "src" / "gpufleet" / "examples" / "scenarios" / "day-256gpu.yaml"
TARGET_X = 500.0
TARGET_AT_12H_S = 90.0
WARM_UP_S = 60.0  # simulated seconds first: the first collections build caches and open every stream


def bare(scenario: Path, seconds: float) -> float:
    """Simulated seconds per CPU second of the twin stepping alone."""
    twin, _ = build_twin(scenario)
    twin.run(WARM_UP_S)
    c0 = time.process_time()
    twin.run(seconds)
    return seconds / (time.process_time() - c0)


def door(scenario: Path, seconds: float) -> float:
    """Simulated seconds per CPU second through the door, wired as `--at` wires it."""
    twin, _ = build_twin(scenario)
    plane = twin_plane(twin)
    fleet = SimFleet(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, WARM_UP_S)
    c0 = time.process_time()
    run_headless(twin, fleet, plane.ingest, plane.tick, seconds)
    return seconds / (time.process_time() - c0)


def at_command(scenario: Path, at: str) -> tuple[float, float, int]:
    """`gpufleet get incidents -f SCENARIO --at AT -o json` in a process of its own: (wall s, CPU s, incidents)."""
    import json

    before = os.times()
    w0 = time.perf_counter()
    ran = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "get", "incidents", "-f", str(scenario), "--at", at, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - w0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, len(json.loads(ran.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=900.0, help="simulated seconds per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--at", default="12h", help="the --at of the command's run (0 skips it)")
    parser.add_argument("--scenario", type=Path, default=DAY)
    args = parser.parse_args()

    bare_x = statistics.median(bare(args.scenario, args.seconds) for _ in range(args.repeats))
    door_x = statistics.median(door(args.scenario, args.seconds) for _ in range(args.repeats))
    table = Table(title=f"{args.scenario.name}: median of {args.repeats} x {args.seconds:g} simulated s (CPU time)")
    for col in ("measure", "x real time", "vs bare twin", "target"):
        table.add_column(col, justify="right")
    ok = "[green]met[/green]" if door_x >= TARGET_X else "[red]short[/red]"
    table.add_row("bare twin (Twin.run)", f"{bare_x:,.0f}", "1.00", "")
    table.add_row(
        "through the door (run_headless)", f"{door_x:,.0f}", f"{door_x / bare_x:.2f}", f">= {TARGET_X:g}x {ok}"
    )
    at_s = 0.0 if args.at.strip() in ("0", "0s") else parse_duration(args.at)
    if at_s > 0:
        wall, cpu, incidents = at_command(args.scenario, args.at)
        met = "[green]met[/green]" if wall < TARGET_AT_12H_S * at_s / 43200 else "[red]short[/red]"
        table.add_row(
            f"gpufleet get incidents --at {args.at} ({incidents} incidents)",
            f"{at_s / cpu:,.0f} (CPU {cpu:.1f} s, wall {wall:.1f} s)",
            f"{at_s / cpu / bare_x:.2f}",
            f"< {TARGET_AT_12H_S * at_s / 43200:g} s wall {met}",
        )
    Console().print(table)
    print(f"the door costs {bare_x / door_x:.1f}x the bare twin's CPU; target {TARGET_X:g}x real time through it")


if __name__ == "__main__":
    main()
