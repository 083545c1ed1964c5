"""Fault campaign: does the health pipeline find every injected fault, only those, and how fast?

A 256-node x 8-GPU twin (eight DGX H100 scalable units, eight 400 Gb/s rails) runs 24 simulated hours with
training jobs on most nodes and every fault class injected `--per-type` times at random places, then the same
cluster runs 24 hours with no fault at all. The twin's nodes reach the control plane the way `gpufleet up` wires
them: simulated agents (`SimFleet`) collect every second, run the node-local detectors and push one batch per node
through `ControlPlane.ingest` in process; the control loop (`tick`) correlates across nodes and hands new incidents
to remediation in dry-run. For each fault class it reports recall, precision, detection latency (simulated seconds
from the injection to the incident's first sighting) and the time to the first safe action, read from the control
plane's audit log (the first remediation step decided as "would" or "done" for the incident, behind its safety
budgets). The same telemetry (the fleet-wide frame the agents fill each tick) is replayed through the classic
pipeline (Prometheus at a 15 s scrape evaluating gpufleet's own alert rules with their `for:` windows) and both
latencies are printed side by side. It also reports the control plane's own cost: the time spent in `ingest` and
`tick` per simulated second, i.e. the cores it would need at real time (ingest after the transport, no HTTP).

    python bench/faults.py [--nodes 256] [--hours 24] [--per-type 3] [--seed 11] [--jobs 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from classic_alerts import ClassicPipeline
from gpufleet.model import InferenceService, RootCause, TrainingJob
from gpufleet.model.observe import Ack, Batch
from gpufleet.sim.faults import InjectedFault, expand_campaign
from gpufleet.sim.scenario import layout_workload
from gpufleet.sim.twin import EPOCH, Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.scenario_spec import CampaignSpec, FaultType, ScenarioBody

EXPECTED_CAUSE = {
    FaultType.ecc_dbe: {RootCause.ecc_dbe},
    FaultType.gpu_off_bus: {RootCause.gpu_lost},
    FaultType.thermal_runaway: {RootCause.thermal},
    FaultType.power_brake: {RootCause.power_brake},
    FaultType.pcie_degrade: {RootCause.pcie},
    FaultType.nvlink_errors: {RootCause.nvlink},
    FaultType.ib_symbol_errors: {RootCause.ib_symbol_errors},
    FaultType.link_flap: {RootCause.ib_link_flap},
    FaultType.link_down: {RootCause.ib_link_down},
    FaultType.nccl_hang: {RootCause.nccl_hang},
    FaultType.straggler: {RootCause.straggler},
    FaultType.idle_gpu: {RootCause.idle_gpu},
    FaultType.driver_mismatch: {RootCause.driver_mismatch},
}
# Faults reported by an event (a log line, a link state change): detected within a second is the target.
EVENT_FAULTS = {FaultType.xid, FaultType.ecc_dbe, FaultType.gpu_off_bus, FaultType.link_down, FaultType.driver_mismatch}
# The detection window of each threshold fault (the target is this plus one sample).
WINDOWS = {
    FaultType.thermal_runaway: "10 s slowdown (loaded) or 5 min hot at idle",
    FaultType.power_brake: "3 s hold",
    FaultType.pcie_degrade: "1 sample (link state)",
    FaultType.nvlink_errors: "1 sample (Xid 74)",
    FaultType.ib_symbol_errors: "12 min BER window",
    FaultType.link_flap: "second down in 10 min",
    FaultType.nccl_hang: "overdue step + 20 s signature",
    FaultType.straggler: "60 s hold",
    FaultType.idle_gpu: "10 min hold",
}
CAMPAIGN_START_S = 600.0  # faults land after the jobs' first steps and the detectors' baselines

Ranks = dict[tuple[str, int], tuple[str, int]]  # (job, rank) -> (node, GPU) at injection
IncidentRow = dict[str, Any]


def cluster_body(nodes: int) -> ScenarioBody:
    return ScenarioBody.model_validate(
        {
            "cluster": {
                "nodePools": [
                    {
                        "name": "dgx",
                        "count": nodes,
                        "gpu": {"model": "h100-sxm", "count": 8},
                        "nics": {"count": 8, "speedGbps": 400},
                    }
                ],
                "fabric": {"leafRadix": 64, "nodesPerScalableUnit": 32},
                "costPerGpuHour": {"h100-sxm": 2.5},
            },
            "duration": "24h",
            "workload": {"autoTrainingNodesPerJob": 8, "autoTrainingFill": 0.9},
        }
    )


@dataclass
class Campaign:
    """A cluster, its workload and the faults to inject into it, before the twin is built."""

    body: ScenarioBody
    cluster: Any
    jobs: list[TrainingJob]
    services: list[InferenceService]
    faults: list[InjectedFault]

    def twin(self, seed: int) -> Twin:
        assert not isinstance(self.body.cluster, str)
        return Twin(
            self.cluster,
            seed=seed,
            jobs=self.jobs,
            services=self.services,
            faults=self.faults,
            cost_per_gpu_hour=self.body.cluster.cost_per_gpu_hour,
        )


def campaign(
    nodes: int,
    seconds: float,
    per_type: int,
    seed: int,
    with_faults: bool = True,
    start: float = CAMPAIGN_START_S,
    end: float | None = None,
    types: list[FaultType] | None = None,
) -> Campaign:
    """The benchmark cluster and a seeded campaign: `per_type` faults of each class at random times in
    [start, end] (default: up to 30 minutes before the run ends), each on its own node or job."""
    body = cluster_body(nodes)
    assert not isinstance(body.cluster, str)
    cluster = build_cluster(f"campaign-{nodes}", body.cluster)
    jobs, services = layout_workload(cluster, body, "campaign")
    faults: list[InjectedFault] = []
    if with_faults:
        spec = CampaignSpec(
            seed=seed,
            per_type=per_type,
            start=start,
            end=end if end is not None else max(start + 600.0, seconds - 1800.0),
            types=types or "all",
        )
        faults = expand_campaign(spec, cluster, jobs, seconds, first_id=0)
    return Campaign(body, cluster, jobs, services, faults)


def note_ranks(twin: Twin, fault: InjectedFault, ranks: Ranks) -> None:
    """Where a job fault's rank runs when it is injected (jobs move when they restart)."""
    if fault.job is None or fault.rank is None:
        return
    ts = twin.training
    k = int(ts.ranks_of([j.name for j in ts.jobs].index(fault.job))[fault.rank])
    node = twin.cluster.nodes[int(twin.gpus.node_of[k])].name
    ranks[(fault.job, fault.rank)] = (node, int(twin.gpus.index_on_node[k]))


def incident_row(body: Mapping[str, Any], origin: float) -> IncidentRow:
    """An incident as the control plane stores and serves it (`GET /api/v1/incidents`), in the form the scoring
    reads; `origin` is the epoch time of the twin's t=0, so `first_seen` is in twin seconds."""
    entity = body["entity"]
    return {
        "id": body["id"],
        "cause": RootCause(body["cause"]),
        "node": entity.get("node") or "",
        "index": entity.get("index"),
        "name": entity.get("name") or "",
        "first_seen": float(body["first_seen"]) - origin,
        "xid": body.get("xid"),
        "evidence": [e["text"] for e in body.get("evidence", ())],
        "effects": list(body.get("effects", ())),
        "summary": body.get("summary", ""),
    }


@dataclass
class RunResult:
    label: str
    faults: list[InjectedFault]
    incidents: list[IncidentRow]
    classic: list[tuple[str, str, float]]
    first_action: dict[str, float]
    ranks: Ranks
    wall_s: float
    ticks: int
    extra: dict[str, float] = field(default_factory=dict)


def run(label: str, nodes: int, hours: float, per_type: int, seed: int, with_faults: bool) -> RunResult:
    """One run through the door in process, wired as `gpufleet up` wires the twin to its control plane."""
    from gpufleet.control.service import ControlPlane
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.runner import run_headless
    from gpufleet.state import Database
    from gpufleet.telemetry.store import EmbeddedStore

    seconds = int(hours * 3600)
    setup = campaign(nodes, seconds, per_type, seed, with_faults)
    twin = setup.twin(seed)
    lock = threading.RLock()
    plane = ControlPlane(
        Database(":memory:"),
        TwinBackend(twin, lock),
        clock=lambda: EPOCH + twin.time,
        remediation="dry-run",
        metrics=EmbeddedStore(None),
    )
    fleet = SimFleet(twin)
    classic = ClassicPipeline(
        [(e.hostname, e.gpu) for e in fleet.frame.entities], [(p.hostname, p.hca) for p in fleet.frame.ib_ports]
    )
    ranks: Ranks = {}
    pending = sorted(setup.faults, key=lambda f: f.time)
    plane_s = [0.0]  # CPU time inside ingest and tick (thread time: the machine may be shared)

    def before_step() -> None:
        while pending and pending[0].time <= twin.time:
            note_ranks(twin, pending.pop(0), ranks)

    def ingest(batch: Batch) -> Ack:
        t0 = time.thread_time()
        ack = plane.ingest(batch)
        plane_s[0] += time.thread_time() - t0
        return ack

    def tick() -> None:
        t0 = time.thread_time()
        plane.tick()
        plane_s[0] += time.thread_time() - t0
        classic.observe(EPOCH + twin.time, fleet.frame)  # the frame the agents just filled

    started = time.perf_counter()
    run_headless(twin, fleet, ingest, tick, seconds, before_step=before_step)
    wall = time.perf_counter() - started
    plane.close()
    incidents = [incident_row(b, EPOCH) for b in plane.store.incidents.list(limit=10_000_000)]
    first_action: dict[str, float] = {}
    for entry in plane.store.audit_log.entries(actor="remediation"):
        if entry.incident and entry.decision in ("would", "done"):
            first_action[entry.incident] = min(first_action.get(entry.incident, math.inf), entry.time - EPOCH)
    alerts = [(a.name, a.target, a.fired - EPOCH) for a in classic.fired]
    extra = {
        "findings": float(plane.correlator.findings),
        "batches": float(fleet.batches),
        "plane_s": plane_s[0],
        "plane_cores": plane_s[0] / seconds,  # cores the control plane needs at real time (no transport)
    }
    return RunResult(label, setup.faults, incidents, alerts, first_action, ranks, wall, seconds, extra)


def target_of(f: InjectedFault, ranks: Ranks) -> tuple[str, int | None, str]:
    if f.job is not None:
        node, gpu = ranks[(f.job, f.rank or 0)]
        return node, gpu, ""
    if f.rail is not None:
        return f.node or "", 1, f"mlx5_{f.rail}"
    return f.node or "", f.gpu, ""


def matches(f: InjectedFault, inc: IncidentRow, ranks: Ranks) -> bool:
    node, index, name = target_of(f, ranks)
    if inc["node"] != node:
        return False
    if f.type is FaultType.driver_mismatch:
        return inc["cause"] is RootCause.driver_mismatch
    if name and inc["name"] != name:
        return False
    if not name and index is not None and inc["index"] != index:
        return False
    if f.type is FaultType.xid:
        code = f.code
        return inc["xid"] == code or any(f"): {code}, " in str(e) for e in inc["evidence"])
    return inc["cause"] in EXPECTED_CAUSE[f.type]


@dataclass
class Matching:
    """Each fault's matching incidents (first sighting first) and the incidents no fault explains. Effects are
    not incidents of their own: they join their cause's incident, so precision counts them with it."""

    hits: dict[int, list[IncidentRow]]  # fault id -> matching incidents, earliest first (empty: missed)
    unmatched: list[IncidentRow]

    @property
    def precision(self) -> float:
        total = len({str(i["id"]) for hits in self.hits.values() for i in hits}) + len(self.unmatched)
        return (total - len(self.unmatched)) / total if total else 1.0


def match(faults: Iterable[InjectedFault], incidents: list[IncidentRow], ranks: Ranks) -> Matching:
    """An incident matches a fault when it is on the fault's target, of its expected cause, and first seen no
    earlier than 2 s before the injection (twin seconds)."""
    hits: dict[int, list[IncidentRow]] = {}
    matched: set[str] = set()
    for f in faults:
        found = [i for i in incidents if matches(f, i, ranks) and float(i["first_seen"]) >= f.time - 2]
        found.sort(key=lambda i: float(i["first_seen"]))
        hits[f.id] = found
        matched.update(str(i["id"]) for i in found)
    return Matching(hits, [i for i in incidents if str(i["id"]) not in matched])


def classic_target(f: InjectedFault, ranks: Ranks) -> set[str]:
    node, index, name = target_of(f, ranks)
    if f.job is not None:
        return {f"job/{f.job}", f"gpu/{node}/{index}"}
    if name:
        return {f"port/{node}/{name}"}
    if f.type is FaultType.driver_mismatch:
        return {f"gpu/{node}/{g}" for g in range(8)}
    return {f"gpu/{node}/{index}"}


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); with a handful of samples p99 is the max."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def score(result: RunResult) -> tuple[Table, dict[str, Any]]:
    per: dict[FaultType, dict[str, list[float]]] = {}
    matching = match(result.faults, result.incidents, result.ranks)
    for f in result.faults:
        row = per.setdefault(f.type, {"found": [], "latency": [], "action": [], "classic": [], "missed": []})
        hits = matching.hits[f.id]
        if hits:
            first = hits[0]
            row["found"].append(1.0)
            row["latency"].append(float(first["first_seen"]) - f.time)
            act = result.first_action.get(str(first["id"]))
            if act is not None:
                row["action"].append(act - f.time)
        else:
            row["found"].append(0.0)
            row["missed"].append(f.time)
        targets = classic_target(f, result.ranks)
        fired = [t for _, target, t in result.classic if target in targets and t >= f.time]
        row["classic"].append(min(fired) - f.time if fired else float("nan"))
    table = Table(title=f"Fault campaign: {result.label}")
    for col in (
        "fault class",
        "n",
        "recall",
        "latency p50 / max (s)",
        "target",
        "first safe action p50 (s)",
        "classic p50 (s)",
        "classic found",
    ):
        table.add_column(col, justify="right" if col != "fault class" else "left")
    summary: dict[str, Any] = {}
    for ftype in FaultType:
        row = per.get(ftype)
        if row is None:
            continue
        n = len(row["found"])
        lat = row["latency"]
        classic_found = [c for c in row["classic"] if c == c]
        target = "<= 1 s" if ftype in EVENT_FAULTS else WINDOWS.get(ftype, "")
        table.add_row(
            ftype.value,
            str(n),
            f"{100 * sum(row['found']) / n:.0f}%",
            f"{statistics.median(lat):.0f} / {max(lat):.0f}" if lat else "-",
            target,
            f"{statistics.median(row['action']):.0f}" if row["action"] else "-",
            f"{statistics.median(classic_found):.0f}" if classic_found else "never",
            f"{len(classic_found)}/{n}",
        )
        summary[ftype.value] = {
            "recall": sum(row["found"]) / n,
            "latency": lat,
            "action": row["action"],
            "classic": row["classic"],
            "missed": row["missed"],
        }
    summary["precision"] = matching.precision
    summary["unmatched"] = matching.unmatched
    return table, summary


def report(result: RunResult, quiet: RunResult, hours: float, nodes: int) -> dict[str, Any]:
    """What another benchmark (fleet_ingest) reads back: per-class latencies, recall, precision, cost."""
    _, summary = score(result)
    classes = {
        k: {"recall": v["recall"], "latency": v["latency"], "action": v["action"], "missed": v["missed"]}
        for k, v in summary.items()
        if isinstance(v, dict)
    }
    missed = sum(len(v["missed"]) for v in classes.values())
    return {
        "nodes": nodes,
        "hours": hours,
        "faults": len(result.faults),
        "recall": 1.0 - missed / len(result.faults) if result.faults else 1.0,
        "precision": summary["precision"],
        "incidents": len(result.incidents),
        "unmatched": [{k: str(v) for k, v in i.items() if k != "evidence"} for i in summary["unmatched"]],
        "classes": classes,
        "campaign": {"wall_s": result.wall_s, "ticks": result.ticks, **result.extra},
        "fault_free": {
            "wall_s": quiet.wall_s,
            "ticks": quiet.ticks,
            "incidents": len(quiet.incidents),
            "classic_alerts": len(quiet.classic),
            "incident_list": [{k: str(v) for k, v in i.items() if k != "evidence"} for i in quiet.incidents],
            **quiet.extra,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--per-type", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=2, help="processes: the campaign and the fault-free run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON (fleet_ingest.py reads them)")
    args = parser.parse_args()
    console = Console(width=170)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        faulty = pool.submit(run, "faults", args.nodes, args.hours, args.per_type, args.seed, True)
        clean = pool.submit(run, "fault-free", args.nodes, args.hours, args.per_type, args.seed + 1, False)
        result, quiet = faulty.result(), clean.result()
    table, summary = score(result)
    console.print(table)
    for ftype, row in summary.items():
        if isinstance(row, dict) and row.get("missed"):
            for at in row["missed"]:
                f = next(f for f in result.faults if f.type.value == ftype and f.time == at)
                console.print(f"  missed {ftype} at {at:.0f} s on {f.target}")
    unmatched = summary["unmatched"]
    console.print(
        f"precision: {100 * float(summary['precision']):.1f}% of {len(result.incidents)} incidents match an "
        f"injected fault; {len(unmatched)} do not"
    )
    for inc in unmatched:
        console.print(
            f"  unmatched {inc['id']} t={inc['first_seen']:.0f} {inc['cause']} {inc['node']} {inc['summary']}"
        )
    console.print(f"fault-free run: {len(quiet.incidents)} incidents, {len(quiet.classic)} classic alerts")
    for inc in quiet.incidents:
        console.print(f"  {inc['id']} t={inc['first_seen']:.0f} {inc['cause']} {inc['node']} {inc['summary']}")
    classic_names: dict[str, int] = {}
    for name, _, _ in quiet.classic:
        classic_names[name] = classic_names.get(name, 0) + 1
    if classic_names:
        console.print(
            "  classic alerts in the fault-free run: " + ", ".join(f"{k} x{v}" for k, v in classic_names.items())
        )
    console.print(
        f"wall: campaign {result.wall_s:.0f} s, fault-free {quiet.wall_s:.0f} s for {args.hours:g} simulated h "
        f"on {args.nodes * 8} GPUs ({result.ticks / result.wall_s:.0f}x real time through the door, with detection)"
    )
    console.print(
        f"control plane (ingest + tick, in process): {result.extra['plane_cores']:.3f} cores at real time in the "
        f"campaign, {quiet.extra['plane_cores']:.3f} fault-free ({result.extra['batches'] / result.ticks:.0f} "
        "batches per simulated second)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report(result, quiet, args.hours, args.nodes), fh, indent=1, default=str)
        console.print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
