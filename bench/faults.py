"""Fault campaign: does the health pipeline find every injected fault, only those, and how fast?

A 256-node x 8-GPU twin (eight DGX H100 scalable units, eight 400 Gb/s rails) runs 24 simulated hours with
training jobs on most nodes and every fault class injected `--per-type` times at random places, then the same
cluster runs 24 hours with no fault at all. For each fault class it reports recall, precision, detection latency
and the time to the first safe action the remediation engine decides (dry-run, behind its safety budgets). The
same telemetry is replayed through the classic pipeline (Prometheus at a 15 s scrape evaluating gpufleet's own
alert rules with their `for:` windows) and both latencies are printed side by side.

    python bench/faults.py [--nodes 256] [--hours 24] [--per-type 3] [--seed 11] [--jobs 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpufleet.health.classic import ClassicPipeline
from gpufleet.health.engine import HealthEngine
from gpufleet.health.twin_feed import TwinFeed
from gpufleet.model import RootCause
from gpufleet.sim.faults import InjectedFault, expand_campaign
from gpufleet.sim.scenario import layout_workload
from gpufleet.sim.twin import Twin
from gpufleet.sources.twin import EPOCH
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
class RunResult:
    label: str
    faults: list[InjectedFault]
    incidents: list[dict[str, object]]
    classic: list[tuple[str, str, float]]
    first_action: dict[str, float]
    ranks: dict[tuple[str, int], tuple[str, int]]  # (job, rank) -> (node, gpu) at injection
    wall_s: float
    ticks: int
    extra: dict[str, float] = field(default_factory=dict)


def run(label: str, nodes: int, hours: float, per_type: int, seed: int, with_faults: bool) -> RunResult:
    from gpufleet.remediate import RemediationStore, Remediator, TwinBackend
    from gpufleet.remediate.config import RemediationPolicy

    body = cluster_body(nodes)
    assert not isinstance(body.cluster, str)
    cluster = build_cluster(f"campaign-{nodes}", body.cluster)
    jobs, services = layout_workload(cluster, body, "campaign")
    seconds = int(hours * 3600)
    faults: list[InjectedFault] = []
    if with_faults:
        spec = CampaignSpec(seed=seed, per_type=per_type, start=600.0, end=max(1200.0, seconds - 1800.0))
        faults = expand_campaign(spec, cluster, jobs, seconds, first_id=0)
    twin = Twin(
        cluster,
        seed=seed,
        jobs=jobs,
        services=services,
        faults=faults,
        cost_per_gpu_hour=body.cluster.cost_per_gpu_hour,
    )
    feed = TwinFeed(twin)
    engine = HealthEngine(feed.frame, port_speeds_gbps=feed.port_speeds())
    classic = ClassicPipeline(
        [(e.hostname, e.gpu) for e in feed.frame.entities], [(p.hostname, p.hca) for p in feed.frame.ib_ports]
    )
    state = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    policy = RemediationPolicy.model_validate(
        {
            "apiVersion": "gpufleet.io/v1",
            "kind": "RemediationPolicy",
            "metadata": {"name": "bench"},
            "spec": {"dryRun": True},
        }
    )
    remediator = Remediator(TwinBackend(twin), RemediationStore(state / "remediate.db"), policy=policy)
    first_action: dict[str, float] = {}
    ranks: dict[tuple[str, int], tuple[str, int]] = {}
    pending = sorted(faults, key=lambda f: f.time)
    started = time.perf_counter()
    for _ in range(seconds):
        while pending and pending[0].time <= twin.time:
            f = pending.pop(0)
            if f.job is not None and f.rank is not None:
                ts = twin.training
                k = int(ts.ranks_of([j.name for j in ts.jobs].index(f.job))[f.rank])
                ranks[(f.job, f.rank)] = (
                    twin.cluster.nodes[int(twin.gpus.node_of[k])].name,
                    int(twin.gpus.index_on_node[k]),
                )
        twin.step()
        obs = feed.observe()
        changed = engine.observe(obs)
        classic.observe(obs.now, obs.frame)
        for inc in changed:
            if inc.id not in first_action:
                report = remediator.apply(inc)
                if any(s.decision in ("would", "done") for s in report.steps):
                    first_action[inc.id] = obs.now
    wall = time.perf_counter() - started
    incidents = [
        {
            "id": i.id,
            "cause": i.cause,
            "node": i.entity.node,
            "index": i.entity.index,
            "name": i.entity.name,
            "first_seen": i.first_seen - EPOCH,
            "xid": i.xid,
            "evidence": [e.text for e in i.evidence],
            "effects": list(i.effects),
            "summary": i.summary,
        }
        for i in engine.book.incidents.values()
    ]
    alerts = [(a.name, a.target, a.fired - EPOCH) for a in classic.fired]
    actions = {k: v - EPOCH for k, v in first_action.items()}
    return RunResult(
        label, faults, incidents, alerts, actions, ranks, wall, seconds, {"findings": float(engine.findings)}
    )


def target_of(f: InjectedFault, ranks: dict[tuple[str, int], tuple[str, int]]) -> tuple[str, int | None, str]:
    if f.job is not None:
        node, gpu = ranks[(f.job, f.rank or 0)]
        return node, gpu, ""
    if f.rail is not None:
        return f.node or "", 1, f"mlx5_{f.rail}"
    return f.node or "", f.gpu, ""


def matches(f: InjectedFault, inc: dict[str, object], ranks: dict[tuple[str, int], tuple[str, int]]) -> bool:
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
        return inc["xid"] == code or any(f"): {code}, " in str(e) for e in inc["evidence"])  # type: ignore[attr-defined]
    return inc["cause"] in EXPECTED_CAUSE[f.type]


def classic_target(f: InjectedFault, ranks: dict[tuple[str, int], tuple[str, int]]) -> set[str]:
    node, index, name = target_of(f, ranks)
    if f.job is not None:
        return {f"job/{f.job}", f"gpu/{node}/{index}"}
    if name:
        return {f"port/{node}/{name}"}
    if f.type is FaultType.driver_mismatch:
        return {f"gpu/{node}/{g}" for g in range(8)}
    return {f"gpu/{node}/{index}"}


def score(result: RunResult) -> tuple[Table, dict[str, object]]:
    per: dict[FaultType, dict[str, list[float]]] = {}
    matched_incidents: set[str] = set()
    for f in result.faults:
        row = per.setdefault(f.type, {"found": [], "latency": [], "action": [], "classic": [], "missed": []})
        hits = [i for i in result.incidents if matches(f, i, result.ranks) and float(i["first_seen"]) >= f.time - 2]  # type: ignore[arg-type]
        if hits:
            first = min(hits, key=lambda i: float(i["first_seen"]))  # type: ignore[arg-type]
            matched_incidents.update(str(i["id"]) for i in hits)
            row["found"].append(1.0)
            row["latency"].append(float(first["first_seen"]) - f.time)  # type: ignore[arg-type]
            act = result.first_action.get(str(first["id"]))
            if act is not None:
                row["action"].append(act - f.time)
        else:
            row["found"].append(0.0)
            row["missed"].append(f.time)
        targets = classic_target(f, result.ranks)
        fired = [t for _, target, t in result.classic if target in targets and t >= f.time]
        row["classic"].append(min(fired) - f.time if fired else float("nan"))
    unmatched = [i for i in result.incidents if str(i["id"]) not in matched_incidents]
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
    summary: dict[str, object] = {}
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
            "classic": row["classic"],
            "missed": row["missed"],
        }
    total = len(result.incidents)
    precision = (total - len(unmatched)) / total if total else 1.0
    summary["precision"] = precision
    summary["unmatched"] = unmatched
    return table, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--per-type", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=2, help="processes: the campaign and the fault-free run")
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
            for at in row["missed"]:  # type: ignore[union-attr]
                f = next(f for f in result.faults if f.type.value == ftype and f.time == at)
                console.print(f"  missed {ftype} at {at:.0f} s on {f.target}")
    unmatched = summary["unmatched"]
    console.print(
        f"precision: {100 * float(summary['precision']):.1f}% of {len(result.incidents)} incidents match an "
        f"injected fault; {len(unmatched)} do not"
    )  # type: ignore[arg-type]
    for inc in unmatched:  # type: ignore[attr-defined]
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
        f"on {args.nodes * 8} GPUs ({result.ticks / result.wall_s:.0f}x real time with detection)"
    )


if __name__ == "__main__":
    main()
