"""Fabric discovery, validation and counter sweeps: how long the analysis of one poll takes, and how soon a fault is
found.

1. Generated rail-optimized fat trees of 32, 256, 2,048 and 16,384 HCAs (DGX nodes of 8 rails, 64-port NDR
   switches; 16,384 HCAs is the 64-SU SuperPOD: 512 leaves, 512 spines, 256 cores). Per size, the ibnetdiscover
   text of the fabric is written, then timed as the fabric service takes one poll: parse, build the graph, validate
   against the manifest's intended cabling, and a full counter sweep (every port's 13 counters, twice: deltas,
   rates, the port judge and both ends of every cable). Peer in the same run: reading the same text and splitting it
   into lines (the floor any parser pays). Target: 16,384 HCAs analysed in <= 10 s.
2. The ibsim fat tree (2 spines, 4 leaves, 8 HCAs) with OpenSM, polled with the real tools: time of one poll (the
   tools themselves) and of its analysis; then a link taken down and a counter raised through the ibsim console,
   and the time until the fabric service reports each, against the poll interval. Target: within one poll.
3. The scheduler export (`gpufleet fabric export --format slurm-topology`) of a three-tier rail-optimized fat tree
   of 16,384 DGX nodes with eight rails (131,072 HCAs; 128-port switches), CPU time: the topology model from the
   fabric graph, then topology.conf from the model. Peer in the same run: the rails view (FabricIndex) the model
   starts from, which placement and the NCCL model already build. Target: <= 5 s.
4. Label churn on the same fat tree when one leaf fails (it and its cables are no longer discovered): the control
   plane's work for that poll, CPU time: the topology model again, every node's Kubernetes topology labels, their
   diff with the labels before, and the topology's change events. The nodes whose labels change must be exactly the
   nodes homed under the failed leaf (checked, not assumed). Peer in the same run: the rails view of the failed
   fabric.

Run: python bench/fabric.py [--rounds 3] [--poll 2.0] [--sizes 32,256,2048,16384] [--no-ibsim]
                            [--export-nodes 16384] (0 leaves the export out)
                            [--churn-nodes 16384] (0 leaves the label churn out)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.control.fabric_topology import topology_changes
from gpufleet.fabric.counters import CounterTracker, Readings
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph
from gpufleet.fabric.intended import intended_graph
from gpufleet.fabric.port_health import PortHealth
from gpufleet.fabric.rails import FabricIndex
from gpufleet.fabric.render import to_ibnetdiscover
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.fabric.validate import validate
from gpufleet.health.thresholds import load_thresholds
from gpufleet.integrations.kubernetes.topology import label_changes, node_labels
from gpufleet.integrations.slurm.topology_conf import render_topology_conf
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
EXPORT_TARGET_S = 5.0
COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
            "PortRcvRemotePhysicalErrors", "PortXmitDiscards", "PortXmitWait", "VL15Dropped",
            "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors", "PortXmitData", "PortRcvData",
            "PortXmitPkts")  # fmt: skip


def cluster_of(hcas: int) -> ClusterBody:
    nodes = max(1, hcas // 8)
    return ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "dgx", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"topology": "rail-optimized-fat-tree", "leafRadix": 64, "nodesPerScalableUnit": 32},
        }
    )


def sweep(ports: list[End], seed: int, base: np.ndarray | None = None) -> tuple[Readings, np.ndarray]:
    """Every port's counters, as a perfquery sweep reads them: traffic grows, a few ports count errors."""
    rng = np.random.default_rng(seed)
    values = np.zeros((len(ports), len(COUNTERS)), dtype=np.int64) if base is None else base.copy()
    values[:, -3:] += rng.integers(10**6, 10**8, size=(len(ports), 3))
    bad = rng.choice(len(ports), size=max(1, len(ports) // 1000), replace=False)
    values[bad, 0] += rng.integers(1, 50, size=bad.size)
    rows = values.tolist()
    return Readings.from_rows(ports, COUNTERS, rows, left_out="silent"), values


def generated(console: Console, sizes: list[int], rounds: int) -> list[tuple[int, float]]:
    table = Table(title="Generated rail-optimized fat trees: one poll's analysis (median of rounds)")
    for col in ("HCAs", "switches", "cables", "ibnetdiscover MB", "read+split s", "parse+graph s", "validate s",
                "counter sweep s", "total s", "x floor", "target"):  # fmt: skip
        table.add_column(col, justify="right")
    thresholds = load_thresholds()
    out = []
    for hcas in sizes:
        cluster = build_cluster("bench", cluster_of(hcas))
        expected = intended_graph(cluster)
        text = to_ibnetdiscover(expected)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
            fh.write(text)
            path = Path(fh.name)
        floors, parses, validates, sweeps, totals = [], [], [], [], []
        for r in range(rounds):
            t0 = time.perf_counter()
            lines = path.read_text().splitlines()
            floors.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            found = from_ibnetdiscover(parse_ibnetdiscover(path.read_text()))
            t1 = time.perf_counter()
            findings = validate(found, expected)
            t2 = time.perf_counter()
            ports = [end for link in found.links for end in link.ends()]
            tracker, health = CounterTracker(), PortHealth(thresholds, graph=found)
            first, values = sweep(ports, r)
            tracker.update(1000.0, first, complete=True)
            second, _ = sweep(ports, r + 100, values)
            deltas = tracker.update(1030.0, second, complete=True)
            health.observe(1030.0, deltas, found)
            t3 = time.perf_counter()
            parses.append(t1 - t0)
            validates.append(t2 - t1)
            sweeps.append(t3 - t2)
            totals.append(t3 - t0)
            assert not [f for f in findings if f.severity == "critical"], findings[:3]
        del lines
        total = statistics.median(totals)
        out.append((hcas, total))
        table.add_row(
            f"{hcas:,}", f"{len(found.switches()):,}", f"{len(found.links):,}", f"{path.stat().st_size / 1e6:.1f}",
            f"{statistics.median(floors):.3f}", f"{statistics.median(parses):.2f}",
            f"{statistics.median(validates):.2f}", f"{statistics.median(sweeps):.2f}", f"{total:.2f}",
            f"{total / statistics.median(floors):.0f}", "<= 10 s" if hcas >= 16384 else "",
        )  # fmt: skip
        path.unlink()
    console.print(table)
    return out


def fat_tree(nodes: int) -> FabricGraph:
    """A three-tier rail-optimized fat tree of `nodes` 8-rail DGX nodes on 128-port switches."""
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "dgx", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"topology": "rail-optimized-fat-tree", "leafRadix": 128, "tiers": 3},
        }
    )
    return intended_graph(build_cluster("bench", body))


def export(console: Console, nodes: int, rounds: int) -> float:
    """CPU time of the Slurm topology export of a three-tier rail-optimized fat tree of `nodes` 8-rail nodes."""
    graph = fat_tree(nodes)
    peers, models, writes, totals = [], [], [], []
    for _ in range(rounds):
        t0 = time.process_time()
        FabricIndex(graph)
        t1 = time.process_time()
        topology = topology_from_graph(graph)
        t2 = time.process_time()
        text = render_topology_conf(topology)
        t3 = time.process_time()
        peers.append(t1 - t0)
        models.append(t2 - t1)
        writes.append(t3 - t2)
        totals.append(t3 - t1)
    lines = [line for line in text.splitlines() if line.startswith("SwitchName=")]
    total = statistics.median(totals)
    table = Table(title="Slurm topology.conf export, three-tier rail-optimized fat tree (CPU s, median of rounds)")
    for col in ("nodes", "HCAs", "switches", "cables", "SwitchName lines", "rails view (peer) s", "topology model s",
                "topology.conf s", "export s", "x peer", "target"):  # fmt: skip
        table.add_column(col, justify="right")
    table.add_row(
        f"{nodes:,}", f"{len(graph.hcas()):,}", f"{len(graph.switches()):,}", f"{len(graph.links):,}",
        f"{len(lines):,}", f"{statistics.median(peers):.2f}", f"{statistics.median(models):.2f}",
        f"{statistics.median(writes):.2f}", f"{total:.2f}", f"{total / statistics.median(peers):.1f}",
        f"<= {EXPORT_TARGET_S:g} s",
    )  # fmt: skip
    console.print(table)
    return total


def churn(console: Console, nodes: int, rounds: int) -> bool:
    """One leaf of the fat tree fails: which nodes' labels change, and the CPU time of finding out."""
    graph = fat_tree(nodes)
    before = topology_from_graph(graph)
    labels_before = node_labels(before)
    leaf = before.tier("leaf")[0].name  # rail 0's first leaf: every host under it is homed there
    homed = set(before.homed(leaf))
    failed = graph.restricted_to(graph.nodes.keys() - {leaf})  # it and its cables are no longer discovered
    peers, models, labelling, diffs, totals = [], [], [], [], []
    for _ in range(rounds):
        t0 = time.process_time()
        FabricIndex(failed)
        t1 = time.process_time()
        after = topology_from_graph(failed)
        t2 = time.process_time()
        labels_after = node_labels(after)
        t3 = time.process_time()
        changes = label_changes(labels_before, labels_after)
        events = topology_changes(before, after)
        t4 = time.process_time()
        peers.append(t1 - t0)
        models.append(t2 - t1)
        labelling.append(t3 - t2)
        diffs.append(t4 - t3)
        totals.append(t4 - t1)
    exact = set(changes) == homed
    total = statistics.median(totals)
    table = Table(title="Label churn when one leaf fails, three-tier rail-optimized fat tree (CPU s, median of rounds)")
    for col in ("nodes", "failed leaf", "homed under it", "nodes relabelled", "labels written", "exactly those",
                "change events", "rails view (peer) s", "topology model s", "node labels s", "diff + events s",
                "total s", "x peer"):  # fmt: skip
        table.add_column(col, justify="right")
    table.add_row(
        f"{nodes:,}", leaf, f"{len(homed):,}", f"{len(changes):,}",
        f"{sum(len(c) for c in changes.values()):,}", "yes" if exact else "NO", f"{len(events):,}",
        f"{statistics.median(peers):.2f}", f"{statistics.median(models):.2f}",
        f"{statistics.median(labelling):.2f}", f"{statistics.median(diffs):.3f}", f"{total:.2f}",
        f"{total / statistics.median(peers):.1f}",
    )  # fmt: skip
    console.print(table)
    return exact


def ibsim(console: Console, poll_s: float) -> None:
    """The real stack: tools' own time, our analysis, and the time from a fault to its finding."""
    sys.path.insert(0, str(ROOT))
    from gpufleet.agent.fabric import FabricWatch
    from gpufleet.sources.infiniband.diag_tools import FabricTools
    from tests.ibsim import SOCKET_SYSCTLS, running_fabric

    subprocess.run(["sysctl", "-qw", *SOCKET_SYSCTLS], check=False)
    with running_fabric(Path(tempfile.mkdtemp(prefix="fabric-bench-"))) as fabric:
        tools = FabricTools(timeout_s=20, env=fabric.env, cwd=str(fabric.work))
        service = FabricService(load_thresholds())
        found_at: dict[str, float] = {}

        def deliver(reports: list) -> None:  # type: ignore[type-arg]
            for report in reports:
                service.take(report)
            kinds = {(a["kind"], tuple(sorted(a.get("ends") or [a.get("port")]))) for a in views.alarms(service)}
            for kind, ends in kinds:
                found_at.setdefault(f"{kind} {' '.join(ends)}", time.monotonic())

        watch = FabricWatch([tools], deliver, poll_s=poll_s)
        polls, analyses = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            [report] = watch.poll()
            polls.append(report.took_s)
            analyses.append(time.perf_counter() - t0 - report.took_s)
        watch.start()
        time.sleep(poll_s * 1.5)
        t_down = time.monotonic()
        os.write(fabric.console, b'Unlink "leaf2"[35]\n')
        t_counter = time.monotonic()
        os.write(fabric.console, b'PerformanceSet "node03 mlx5_0"[1] PortCounters.SymbolErrorCounter=500\n')
        _wait(lambda: any(k.startswith("link-down") for k in found_at)
              and any(k.startswith("symbol-errors") for k in found_at), poll_s * 4 + 30)  # fmt: skip
        watch.stop()
        down = next(t for k, t in found_at.items() if k.startswith("link-down")) - t_down
        counter = next(t for k, t in found_at.items() if k.startswith("symbol-errors")) - t_counter
        table = Table(title=f"ibsim fat tree with OpenSM, real tools (poll every {poll_s:g} s)")
        for col in ("measure", "seconds", "vs poll interval", "target"):
            table.add_column(col, justify="right")
        table.add_row("one poll: ibnetdiscover+iblinkinfo+ibqueryerrors+sminfo (median)",
                      f"{statistics.median(polls):.2f}", "", "")  # fmt: skip
        table.add_row("its analysis (graph, validation, counters, findings)", f"{statistics.median(analyses):.3f}",
                      f"{statistics.median(analyses) / statistics.median(polls):.2f}x the tools", "")  # fmt: skip
        table.add_row(
            "link taken down -> link-down finding", f"{down:.2f}", f"{down / poll_s:.2f}", "<= 1 poll + its run"
        )
        table.add_row("symbol errors raised -> finding", f"{counter:.2f}", f"{counter / poll_s:.2f}",
                      "<= 1 poll + its run")  # fmt: skip
        console.print(table)


def _wait(check, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out after {timeout_s:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--sizes", default="32,256,2048,16384")
    parser.add_argument("--no-ibsim", action="store_true")
    parser.add_argument("--export-nodes", type=int, default=16384, help="0 leaves the topology export out")
    parser.add_argument("--churn-nodes", type=int, default=16384, help="0 leaves the label churn out")
    args = parser.parse_args()
    console = Console(width=170)
    results = generated(console, [int(s) for s in args.sizes.split(",")], args.rounds)
    biggest = max(results)
    verdict = "met" if biggest[1] <= TARGET_S else "NOT met"
    console.print(f"{biggest[0]:,} HCAs analysed in {biggest[1]:.2f} s: target <= {TARGET_S:g} s {verdict}")
    if args.export_nodes:
        took = export(console, args.export_nodes, args.rounds)
        verdict = "met" if took <= EXPORT_TARGET_S else "NOT met"
        console.print(
            f"{args.export_nodes:,}-node export in {took:.2f} s CPU: target <= {EXPORT_TARGET_S:g} s {verdict}"
        )
    if args.churn_nodes:
        exact = churn(console, args.churn_nodes, args.rounds)
        console.print(
            f"{args.churn_nodes:,}-node label churn after one leaf failed: "
            + ("only the nodes homed under it change" if exact else "NOT only the nodes homed under it")
        )
    if not args.no_ibsim:
        ibsim(console, args.poll)


if __name__ == "__main__":
    main()
