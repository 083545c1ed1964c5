"""Rehearsing a remediation policy over a month of a fleet's events: how long `gpufleet remediate replay` takes.

The events are the twin's: one slice of a DGX H100 scalable unit (32 nodes, 256 GPUs; training jobs on half the
nodes; the fault generator's campaign, one fault of every infrastructure type at seeded times and places) runs
through the real door into a control plane with remediation off, which records incidents and node events (kernel
reports, link events, findings) in its state database. The slice is laid end to end to fill the month, each copy on
its own seeded shuffle of the unit's nodes (so faults land on different nodes from one copy to the next), into a
fresh state database; a person returns each faulty node to service eight hours after its fault (an uncordon in the
audit log, which the replay applies at its moment), as a repair would. Replayed: through the built-in default policy
(the baseline, as there is no recorded run) and through a stricter candidate (two nodes out at most, drains and
reboots 10 minutes apart and three an hour), each through the real engine on the replay backend in event time.
Reported: the events and incidents replayed, wall and CPU seconds (median of the repeats) and events per second;
the target is 30 s for the 30 days.

    python bench/remediate_replay.py [--days 30] [--slice-hours 24] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

TARGET_S = 30.0
STRICT = {
    "budget": {"cluster": 2},
    "rateLimits": {
        "drain": {"minInterval": "10m", "maxPerHour": 3},
        "reboot-node": {"minInterval": "10m", "maxPerHour": 3},
    },
}
REPAIR_S = 8 * 3600.0  # a person returns a node to service within a working day of its fault (repaired, swapped)


def _slice(hours: float, seed: int, scenario: Path) -> Any:
    """`hours` of the scalable unit with a fault campaign, through the door; the control plane's database."""
    from gpufleet.cli.core import builtin_example
    from gpufleet.control.service import ControlPlane
    from gpufleet.locks import ordered_lock
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.runner import run_headless
    from gpufleet.sim.scenario import build_twin
    from gpufleet.state import Database

    cluster = builtin_example("clusters/dgx-h100-su.yaml")
    scenario.write_text(
        f"""apiVersion: gpufleet.io/v1
kind: Scenario
metadata: {{name: replay-bench}}
spec:
  cluster: {cluster}
  duration: {round(hours * 3600)}s
  tick: 30s
  seed: {seed}
  workload: {{autoTrainingNodesPerJob: 4, autoTrainingFill: 0.5}}
  campaign: {{seed: {seed}, types: all, perType: 1, start: 5m}}
"""
    )
    twin, duration = build_twin(scenario)
    db = Database(":memory:")
    plane = ControlPlane(db, TwinBackend(twin, ordered_lock("twin")), clock=lambda: twin.epoch + twin.time)
    run_headless(twin, SimFleet(twin), plane.ingest, plane.tick, duration)
    return db


def month(directory: Path, days: float, slice_hours: float, seed: int) -> tuple[Path, int, float]:
    """A state database holding `days` of the twin's incidents and node events; (its directory, node events in one
    slice, seconds the twin took)."""
    from gpufleet.state import DB_NAME, AuditLog, Database, IncidentTable

    started = time.perf_counter()
    src = _slice(slice_hours, seed, directory / "slice.yaml")
    took = time.perf_counter() - started
    bodies = [json.loads(r[0]) for r in src.query("SELECT body FROM incidents ORDER BY first_seen, id")]
    events = src.query(
        "SELECT agent, incarnation, seq, time, received, node, kind, entity, message, body FROM events "
        "WHERE agent != 'control' ORDER BY id"
    )
    inventory = src.query("SELECT node, agent, updated, body FROM inventory ORDER BY node")
    nodes = [r[0] for r in inventory]
    dst = Database(directory / DB_NAME)
    rng = np.random.default_rng(seed)
    copies = round(days * 24 / slice_hours)
    span = slice_hours * 3600.0
    rows: list[tuple[Any, ...]] = []
    incidents: list[dict[str, Any]] = []
    for k in range(copies):
        shift = k * span
        rename = dict(zip(nodes, (nodes[int(i)] for i in rng.permutation(len(nodes))), strict=True))
        for b in bodies:
            entity = dict(b["entity"])
            if entity.get("node"):
                entity["node"] = rename.get(entity["node"], entity["node"])
            incidents.append(
                {**b, "id": f"INC-{k:04d}-{b['id'][4:]}", "entity": entity, "first_seen": b["first_seen"] + shift,
                 "last_seen": b["last_seen"] + shift, "evidence": []}
            )  # fmt: skip
        for _agent, incarnation, seq, t, received, node, kind, entity, message, body in events:
            node = rename.get(node, node)
            rows.append(
                (node, f"{incarnation}-{k}", seq, t + shift, received + shift, node, kind, entity, message, body)
            )
    with dst.transaction():
        dst.executemany(
            "INSERT INTO events(agent, incarnation, seq, time, received, node, kind, entity, message, body) "
            "VALUES (?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        dst.executemany("INSERT INTO inventory VALUES (?,?,?,?)", inventory)
    IncidentTable(dst).save(incidents)
    people = AuditLog(dst)
    for b in incidents:
        node = b["entity"].get("node")
        if node:
            people.append(time_=b["first_seen"] + REPAIR_S, actor="ops", action="uncordon", target=f"node/{node}",
                          decision=f"node {node} uncordoned", reason="repaired")  # fmt: skip
    dst.close()
    return directory, len(events), took


def replay_rows(days: float, slice_hours: float, repeats: int, seed: int) -> tuple[list[tuple[str, ...]], str]:
    """The table's rows: generating the month, then each policy's replay timed."""
    from gpufleet.control.remediation import RESUME_EVERY_S
    from gpufleet.remediate import RemediationPolicy
    from gpufleet.remediate.replay import load_recording, replay
    from gpufleet.remediate.replay_report import summarize
    from gpufleet.state import open_state

    with tempfile.TemporaryDirectory() as tmp:
        directory, per_slice, took = month(Path(tmp), days, slice_hours, seed)
        db = open_state(directory, create=False)
        t0 = time.perf_counter()
        recording = load_recording(db, days * 86400.0)
        loaded = time.perf_counter() - t0
        rows = [
            ("twin slice recorded (not timed against the target)", f"{per_slice:,}", "", f"{took:.1f}", "", "", ""),
            ("state database read", f"{recording.events:,}", f"{len(recording.incidents):,}", f"{loaded:.2f}", "",
             "", ""),
        ]  # fmt: skip
        outcome = []
        for name, policy in (
            ("default policy", RemediationPolicy()),
            ("stricter candidate", RemediationPolicy.model_validate({"spec": STRICT})),
        ):
            walls, cpus = [], []
            run = None
            for _ in range(repeats):
                w, c = time.perf_counter(), time.process_time()
                run = replay(recording, policy, resume_every_s=RESUME_EVERY_S)
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
            assert run is not None
            wall = statistics.median(walls)
            s = summarize(run.entries, recording, run.reboot_until)
            verdict = "met" if wall <= TARGET_S * days / 30.0 else "MISSED"
            rows.append(
                (f"replay: {name}", f"{recording.events:,}", f"{len(recording.incidents):,}", f"{wall:.2f}",
                 f"{statistics.median(cpus):.2f}", f"{recording.events / wall:,.0f}", verdict)
            )  # fmt: skip
            outcome.append(
                f"{name}: {s.actions:,} actions, {s.gpu_hours:,.1f} GPU-hours out, {s.breaker_trips} breaker trip(s), "
                f"{s.refusals:,} refused, {s.deferrals:,} deferred"
            )
        db.close()
    return rows, "; ".join(outcome)


def replay_table(console: Console, days: float, slice_hours: float = 24.0, repeats: int = 3, seed: int = 36) -> None:
    rows, outcome = replay_rows(days, slice_hours, repeats, seed)
    table = Table(
        title=f"Rehearsing a policy over {days:g} days of the twin's events "
        f"(target {TARGET_S * days / 30.0:g} s; median of {repeats})"
    )
    for col in ("step", "events", "incidents", "wall s", "CPU s", "events/s", "target"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(outcome, highlight=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=30.0, help="days of events to replay")
    parser.add_argument("--slice-hours", type=float, default=24.0, help="hours of the twin laid end to end")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    replay_table(Console(width=200), args.days, args.slice_hours, args.repeats, args.seed)


if __name__ == "__main__":
    main()
