"""How the circuit breaker's defaults behave on failure patterns a large fleet sees, next to NVSentinel's defaults.

A 2,048-node fleet (16,384 GPUs, the scale of Meta's Llama 3 run). For each pattern, failures arrive at node level and
are replayed through the breaker rule the remediation engine applies (gpufleet.remediate.safety.breaker_verdict:
distinct failing nodes inside the window against the threshold). Reported per configuration: whether it tripped,
how many node failures were acted on (cordoned/drained) before it did, and when. A third configuration, 5% in
10 minutes, shows what a tighter threshold would catch.

Patterns:
- independent faults at the Llama 3 rate (419 unexpected interruptions in 54 days on 16,384 GPUs), 90 days, 10 seeds,
  and at 10x that rate: a breaker should never trip on these;
- one rack PDU (4 nodes at once) and one leaf switch (32 nodes at once): real, local faults the breaker should let
  through (their nodes are broken either way);
- a detector false-positive storm (40% of nodes within 2 minutes), a bad driver rollout (batches of 10% every
  5 minutes until 60%) and a cooling cascade (1% of nodes per minute for 40 minutes): correlated waves where
  automatic draining does harm and a person should look.

    python bench/remediate_breaker.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from gpufleet.remediate.config import BreakerSpec
from gpufleet.remediate.safety import breaker_verdict

NODES = 2048
GPUS_PER_NODE = 8
LLAMA3_RATE_PER_GPU_S = 419 / (54 * 86400) / 16384  # unexpected interruptions per GPU-second

CONFIGS = {
    "gpufleet default (20% / 10m)": BreakerSpec(),
    "NVSentinel default (50% / 5m)": BreakerSpec(threshold="50%", window=300.0, min_failures=1),
    "tighter (5% / 10m)": BreakerSpec(threshold="5%"),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    tripped: bool
    acted: int  # failing nodes acted on before the trip
    trip_time_s: float | None


def replay(spec: BreakerSpec, failures: list[tuple[float, int]]) -> Outcome:
    """Failures as (time, node), in time order, through the engine's rule: each failure is counted, then the breaker
    decides; the failure that trips it is refused, as are all after it."""
    window: deque[tuple[float, int]] = deque()
    acted = 0
    for t, node in failures:
        window.append((t, node))
        while window and window[0][0] < t - spec.window:
            window.popleft()
        verdict = breaker_verdict(spec, {n for _, n in window}, NODES)
        if verdict.trip:
            return Outcome(True, acted, t)
        acted += 1
    return Outcome(False, acted, None)


def independent(rng: np.random.Generator, days: float, scale: float) -> list[tuple[float, int]]:
    rate = LLAMA3_RATE_PER_GPU_S * GPUS_PER_NODE * NODES * scale
    n = rng.poisson(rate * days * 86400)
    times = np.sort(rng.uniform(0, days * 86400, n))
    return [(float(t), int(rng.integers(NODES))) for t in times]


def burst(nodes: int, at: float = 0.0) -> list[tuple[float, int]]:
    return [(at, k) for k in range(nodes)]


def spread(fraction: float, over_s: float, rng: np.random.Generator) -> list[tuple[float, int]]:
    count = int(fraction * NODES)
    nodes = rng.permutation(NODES)[:count]
    times = np.sort(rng.uniform(0, over_s, count))
    return [(float(t), int(n)) for t, n in zip(times, nodes, strict=True)]


def rollout(batch: float, every_s: float, until: float, rng: np.random.Generator) -> list[tuple[float, int]]:
    order = rng.permutation(NODES)
    per = int(batch * NODES)
    out = []
    for b in range(round(until / batch)):
        out += [(b * every_s + 1.0 * k / per, int(n)) for k, n in enumerate(order[b * per : (b + 1) * per])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    console = Console(width=200)

    table = Table(title=f"Circuit breaker on a {NODES}-node fleet: node failures acted on before the trip")
    table.add_column("pattern")
    table.add_column("distinct failing nodes", justify="right")
    for name in CONFIGS:
        table.add_column(name, justify="right")
    table.add_column("should trip?")

    def cell(outcomes: list[Outcome]) -> str:
        trips = sum(o.tripped for o in outcomes)
        acted = statistics.median(o.acted for o in outcomes)
        if len(outcomes) > 1:
            return f"{trips}/{len(outcomes)} runs tripped; median {acted:.0f} acted"
        o = outcomes[0]
        return f"tripped at {o.trip_time_s:.0f}s after {o.acted} acted" if o.tripped else f"no trip; {o.acted} acted"

    patterns: list[tuple[str, list[list[tuple[float, int]]], str]] = []
    for scale, label in ((1.0, "independent, Llama 3 rate, 90 days"), (10.0, "independent, 10x Llama 3 rate, 90 days")):
        runs = [independent(np.random.default_rng(s), 90, scale) for s in range(args.seeds)]
        patterns.append((label, runs, "no"))
    rng = np.random.default_rng(0)
    patterns += [
        ("rack PDU: 4 nodes at once", [burst(4)], "no"),
        ("leaf switch: 32 nodes at once", [burst(32)], "no"),
        ("false-positive storm: 40% in 2 min", [spread(0.40, 120, rng)], "yes"),
        ("bad driver rollout: +10% every 5 min to 60%", [rollout(0.10, 300, 0.60, rng)], "yes"),
        ("cooling cascade: 1%/min for 40 min", [spread(0.40, 2400, rng)], "yes"),
    ]
    verdicts: dict[str, list[bool]] = {name: [] for name in CONFIGS}
    for label, runs, should in patterns:
        row = [label, f"{statistics.median(len({n for _, n in r}) for r in runs):.0f}"]
        for name, spec in CONFIGS.items():
            outcomes = [replay(spec, r) for r in runs]
            row.append(cell(outcomes))
            tripped_any = any(o.tripped for o in outcomes)
            verdicts[name].append(tripped_any == (should == "yes"))
        row.append(should)
        table.add_row(*row)
    console.print(table)
    for name, ok in verdicts.items():
        console.print(f"{name}: right call on {sum(ok)} of {len(ok)} patterns")


if __name__ == "__main__":
    main()
