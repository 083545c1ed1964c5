"""`gpufleet sched`: trace replay and placement policies; Kubernetes placement on a kubectl capture (plan, explain)
or live (run)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, err_console, make_table
from gpufleet.errors import UserError
from gpufleet.sched.replay.openb import NodeList, PodList, load_trace
from gpufleet.sched.replay.policies import POLICIES, expand_policies, make_policy
from gpufleet.sched.replay.runner import ReplayResult, arrival_order, replay

sched_app = typer.Typer(
    help="Placement: trace replay and policies; plan, explain or run on Kubernetes (kubectl captures or live).",
    no_args_is_help=True,
)

MAX_JOBS = 2


def parse_seeds(text: str) -> list[int]:
    """'42', '42,45' or '42-51' (ranges inclusive) -> list of seeds."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else part[1:].split("-", 1)
                start, stop = int(lo), int(hi)
                if stop < start:
                    raise ValueError
                seeds.extend(range(start, stop + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise UserError(f"bad seed list {text!r}", fix="use e.g. 42, 42,43 or 42-51") from None
    if not seeds:
        raise UserError("no seed given", fix="use e.g. --seeds 42-51")
    return seeds


def parse_points(text: str) -> list[int]:
    try:
        points = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UserError(f"bad --at list {text!r}", fix="use arrived percentages like 100,130") from None
    if not points or any(not 0 <= p <= 1000 for p in points):
        raise UserError(f"bad --at list {text!r}", fix="use arrived percentages like 100,130")
    return points


def _run(
    nodes: NodeList, pods: PodList, policy: str, seed: int, tune: float, points: list[int], topology: Any = None
) -> ReplayResult:
    return replay(nodes, pods, policy, seed=seed, tune=tune, points=points, topology=topology)


def run_grid(
    nodes: NodeList,
    pods: PodList,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    tune: float,
    points: list[int],
    jobs: int = 1,
    show_progress: bool = True,
    topology: Any = None,
) -> list[ReplayResult]:
    """Every policy x seed, in that order; ``jobs`` worker processes (at most 2)."""
    runs = [(p, s) for p in policies for s in seeds]
    n_pods = len(arrival_order(pods, nodes.total_gpu_milli, seed=seeds[0], tune=tune))
    results: dict[tuple[str, int], ReplayResult] = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, disable=not show_progress, transient=True) as bar:
        overall = bar.add_task(f"{len(runs)} replay(s)", total=len(runs))
        if jobs <= 1:
            for policy, seed in runs:
                task = bar.add_task(f"{policy} seed {seed}", total=n_pods)

                def advance(k: int, task: TaskID = task) -> None:
                    bar.advance(task, k)

                results[(policy, seed)] = replay(
                    nodes,
                    pods,
                    policy,
                    seed=seed,
                    tune=tune,
                    points=points,
                    progress=advance,
                    topology=topology,
                )
                bar.remove_task(task)
                bar.advance(overall)
        else:
            with ProcessPoolExecutor(max_workers=min(jobs, MAX_JOBS)) as pool:
                futures = {pool.submit(_run, nodes, pods, p, s, tune, points, topology): (p, s) for p, s in runs}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.advance(overall)
    return [results[r] for r in runs]


def mean_row(results: Sequence[ReplayResult], points: list[int]) -> dict[str, object]:
    def mean(key: str, point: int) -> float | None:
        vals = [getattr(r, key)[str(point)] for r in results]
        good = [v for v in vals if v is not None]
        return round(sum(good) / len(good), 2) if good else None

    return {
        "policy": results[0].policy,
        "seeds": [r.seed for r in results],
        "pods_mean": round(sum(r.pods for r in results) / len(results), 1),
        "failed_mean": round(sum(r.failed for r in results) / len(results), 1),
        "alloc_pct": {str(p): mean("alloc_pct", p) for p in points},
        "frag_amount_pct": {str(p): mean("frag_amount_pct", p) for p in points},
        "seconds_mean": round(sum(r.seconds for r in results) / len(results), 3),
    }


def write_plot(results: Sequence[ReplayResult], path: Path, title: str) -> None:
    """Allocation vs arrived workload, one line per policy (mean over its seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(131))
    fig, (full, zoom) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1.3]})
    by_policy: dict[str, list[ReplayResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    low = 100.0
    for policy, runs in by_policy.items():
        curves = [r.curve(xs) for r in runs]
        px: list[int] = []
        py: list[float] = []
        for x in xs:
            vals = [v for c in curves if (v := c[x]) is not None]
            if vals:
                px.append(x)
                py.append(sum(vals) / len(vals))
        label = f"{policy} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"
        for ax in (full, zoom):
            ax.plot(px, py, label=label)
        low = min([low] + [y for x, y in zip(px, py, strict=True) if x >= 100])
    for ax in (full, zoom):
        ax.plot([0, 100], [0, 100], color="black", linestyle=":", linewidth=1, label="ideal")
        ax.set_xlabel("Arrived workload (% of cluster GPU capacity)")
        ax.set_ylabel("GPU allocation (%)")
        ax.grid(True, alpha=0.3)
    zoom.set_xlim(80, 130)
    zoom.set_ylim(max(0.0, low - 3), 100)
    full.set_title(title)
    zoom.set_title("80-130% arrived")
    zoom.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise UserError(f"cannot write plot {path}: {exc.strerror}", fix="choose a writable path") from None
    finally:
        plt.close(fig)


def _replay_cluster(path: Path) -> tuple[NodeList, Any]:
    """A cluster manifest's nodes as the replay's node list, and the topology model of its fabric (None without)."""
    from gpufleet.fabric.topology import topology_from_fabric
    from gpufleet.sched.replay.openb_cluster import node_list_of
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    manifest = load_cluster(path)
    cluster = build_cluster(manifest.metadata.name, manifest.spec)
    topology = None
    if cluster.fabric is not None and cluster.fabric.links:
        topology = topology_from_fabric(cluster.fabric, nvlink_domains=manifest.spec.nvlink_domains())
    return node_list_of(cluster), topology


@sched_app.command("replay")
def replay_cmd(
    trace_dir: Path | None = typer.Option(
        None, "--trace-dir", help="Folder with the openb CSVs (node and pod lists); not needed with --cluster."
    ),
    pods: str = typer.Option("default", "--pods", help="Pod list: 'default' -> openb_pod_list_default.csv, or a CSV."),
    cluster: Path | None = typer.Option(
        None,
        "--cluster",
        exists=True,
        dir_okay=False,
        help="A cluster manifest (examples/clusters/dgx-h100-su.yaml): replay on its nodes instead of the trace's, "
        "and place gangs (the pod list's gang column) under the fewest switches of its fabric.",
    ),
    policy: str = typer.Option("fgd", "--policy", help=f"Policy, comma list, or 'all' ({', '.join(POLICIES)})."),
    seed: int = typer.Option(42, "--seed", help="Shuffle seed."),
    seeds: str | None = typer.Option(None, "--seeds", help="Several seeds: 42-51 or 42,43 (overrides --seed)."),
    tune: float = typer.Option(1.3, "--tune", help="Tune the workload to this multiple of GPU capacity (0: off)."),
    at: str = typer.Option("100,130", "--at", help="Arrived-workload percentages to report."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, max=MAX_JOBS, help="Worker processes (at most 2)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write allocation vs arrived workload as a PNG."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Replay the FGD paper's fill-up experiment on an openb trace.

    Pods are shuffled by the seed, re-sampled until their GPU request reaches --tune x capacity, placed one
    by one with no departures; a pod that fits nowhere fails. Reports GPU allocation % and fragmentation %
    (of all GPUs) when the arrived GPU request reaches each --at percentage of capacity. Node models may be catalog
    models of any vendor (h100-sxm, mi300x, gaudi3) and a pod list may name each pod's resource in a gpu_resource
    column (amd.com/gpu, ...): such a pod only lands on that vendor's nodes.

    A pod list may name each pod's gang in a `gang` column: a gang's pods arrive together and are placed all or none
    (whole GPUs), under one leaf group where one holds them, else under one set of spines, else anywhere, in the
    fabric of the --cluster manifest; the result says where each gang landed.
    """
    from gpufleet.sched.replay.openb import load_pods, pod_file

    policies = expand_policies(policy)
    seed_list = parse_seeds(seeds) if seeds else [seed]
    points = parse_points(at)
    topology = None
    if cluster is not None:
        nodes, topology = _replay_cluster(cluster)
        if trace_dir is None and not pods.endswith(".csv"):
            raise UserError(f"--pods {pods!r} needs --trace-dir", fix="pass --trace-dir, or --pods as a path to a CSV")
        pod_list = load_pods(pod_file(trace_dir or Path("."), pods))
        where = str(cluster)
    else:
        if trace_dir is None:
            raise UserError("no nodes to replay on", fix="pass --trace-dir with the openb CSVs, or --cluster MANIFEST")
        nodes, pod_list = load_trace(trace_dir, pods)
        where = str(trace_dir)
    if not len(nodes) or not nodes.total_gpu_milli:
        raise UserError(f"no GPU nodes in {where}", fix="use a node list with GPUs")
    show = output in (OutputFormat.table, OutputFormat.wide)
    results = run_grid(
        nodes, pod_list, policies, seed_list, tune=tune, points=points, jobs=jobs, show_progress=show,
        topology=topology,
    )  # fmt: skip
    if plot is not None:
        seeds_text = ", ".join(map(str, seed_list))
        plural = "s" if len(seed_list) > 1 else ""
        write_plot(results, plot, f"openb {pods}, tune {tune}, seed{plural} {seeds_text}")

    data: object = results[0].summary() if len(results) == 1 else [r.summary() for r in results]

    def render(wide: bool) -> None:
        cols = ["POLICY", "SEED", "PODS", "FAILED"]
        cols += [f"ALLOC@{p}%" for p in points] + [f"FRAG@{p}%" for p in points] + ["SECONDS"]
        rows = []
        for r in results:
            rows.append(
                [r.policy, r.seed, r.pods, r.failed]
                + [r.alloc_pct[str(p)] for p in points]
                + [r.frag_amount_pct[str(p)] for p in points]
                + [f"{r.seconds:.1f}"]
            )
        if len(seed_list) > 1:
            for name in policies:
                m = mean_row([r for r in results if r.policy == name], points)
                rows.append(
                    [f"{name} (mean)", "-", m["pods_mean"], m["failed_mean"]]
                    + [m["alloc_pct"][str(p)] for p in points]  # type: ignore[index]
                    + [m["frag_amount_pct"][str(p)] for p in points]  # type: ignore[index]
                    + [f"{m['seconds_mean']:.1f}"]
                )
        console.print(make_table(cols, rows, title=f"openb {pods} replay (tune {tune})"))
        for r in results:
            if r.gangs is not None:
                console.print(f"{r.policy} seed {r.seed}: {r.gangs.summary()}", highlight=False, markup=False)
                if wide:
                    console.print(_replay_gang_table(r))
        if plot is not None:
            console.print(f"plot written to {plot}")

    emit(data, output, render)


def _replay_gang_table(result: ReplayResult) -> Any:
    from gpufleet.sched.replay.gangs import tier_of

    assert result.gangs is not None
    rows = [
        [
            g.name,
            g.pods,
            g.gpus,
            tier_of(g),
            len(g.landing.nodes) if g.landing else "-",
            len(g.landing.leaves) if g.landing else "-",
            len(g.landing.spines) if g.landing else "-",
        ]
        for g in result.gangs.gangs
    ]
    cols = ["GANG", "PODS", "GPUS", "LANDED", "NODES", "LEAVES", "SPINES"]
    return make_table(cols, rows, title=f"{result.policy} seed {result.seed}: gangs")


@sched_app.command("policies")
def policies_cmd(
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """List the placement policies."""
    data = [{"name": name, "description": make_policy(name).description} for name in POLICIES]
    emit(
        data,
        output,
        lambda wide: console.print(make_table(["NAME", "DESCRIPTION"], [list(d.values()) for d in data])),
    )


# --- Kubernetes placement: plan on a kubectl capture, explain one pod, or run as a scheduler ---------------------

SNAPSHOT_HELP = "A capture from `kubectl get nodes,pods -A -o json` (PriorityClass and PodGroup items are used too)."
POLICY_HELP = "binpack (fill nodes, keep whole nodes free) or spread (kube-scheduler's LeastAllocated)."
AFFINITY_HELP = (
    "NODE=FILE: the node's `nvidia-smi topo -m` output (repeat per node, or NODE may be a glob such as 'dgx-*'). A pod "
    "asking for GPUs and RDMA NICs (nvidia.com/hostdev, rdma/..., SR-IOV VFs) then gets GPUs whose NICs share their "
    "PCIe switch, and the plan says so or why not."
)


def _attach_affinity(snap: Any, specs: Sequence[str]) -> None:
    """Each NODE=FILE: read the `nvidia-smi topo -m` file and give its affinity to the snapshot's matching nodes."""
    from fnmatch import fnmatchcase

    from gpufleet.cli.inputs import read_input_text
    from gpufleet.parsers.nvidia.topo import parse_topo_matrix
    from gpufleet.parsers.nvidia.topo_affinity import affinity_from_topo

    for spec in specs:
        pattern, sep, path = spec.partition("=")
        if not sep or not pattern or not path:
            raise UserError(f"--affinity {spec!r} is not NODE=FILE", fix="e.g. --affinity dgx-001=topo-m.txt")
        text, cited = read_input_text(Path(path))
        affinity = affinity_from_topo(parse_topo_matrix(text, source=cited, strict=False))
        if not affinity.gpus:
            raise UserError(f"{cited}: no GPU row with its NIC links", fix="pass the output of `nvidia-smi topo -m`")
        matched = [n for n in snap.nodes if fnmatchcase(n.node.name, pattern)]
        if not matched:
            raise UserError(f"--affinity {pattern}: no node of the snapshot matches", fix="name a node of the capture")
        for info in matched:
            info.affinity = affinity


@sched_app.command("plan")
def plan_cmd(
    snapshot: Path = typer.Option(..., "--snapshot", "-f", help=SNAPSHOT_HELP),
    policy: str = typer.Option("binpack", "--policy", help=POLICY_HELP),
    scheduler_name: str | None = typer.Option(
        None, "--scheduler-name", help="Only pending pods with this schedulerName (default: every pending pod)."
    ),
    preemption: bool = typer.Option(True, "--preemption/--no-preemption", help="Evict lower-priority pods to fit."),
    queues: Path | None = typer.Option(
        None,
        "--queues",
        help="YAML list of queues: name, guaranteed {resource: n}, borrowing (default true), limit. Pods name their "
        "queue with the kueue.x-k8s.io/queue-name label.",
    ),
    fabric: Path | None = typer.Option(
        None,
        "--fabric",
        exists=True,
        dir_okay=False,
        help="`ibnetdiscover` output: gangs keep off nodes whose rails go through a leaf with an uplink down, "
        "missing or slow (unless nothing else fits), and prefer leaves with their uplinks whole; each placed gang "
        "shows where it landed (leaves, spines, switch hops) and its predicted all-reduce.",
    ),
    allreduce_size: str = typer.Option(
        "1G", "--allreduce-size", help="Message size of the predicted gang all-reduce (8, 64K, 1G: powers of 1024)."
    ),
    backfill: bool = typer.Option(
        False,
        "--backfill",
        help="EASY backfill instead of preemption: reserve for the first pod that does not fit and start later ones "
        "only if they do not delay it. Runtimes come from the gpufleet.io/runtime-estimate annotation.",
    ),
    now: str | None = typer.Option(
        None, "--now", help="The time to plan at for --backfill (RFC 3339; default: the latest time in the capture)."
    ),
    affinity: list[str] = typer.Option([], "--affinity", help=AFFINITY_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Print where each pending pod would be placed, which pods would be preempted, and why the rest cannot fit."""
    from gpufleet.cli.nccl import parse_size
    from gpufleet.sched.framework.scheduler import Scheduler
    from gpufleet.sched.framework.snapshot import load_snapshot
    from gpufleet.sched.framework.types import PlanResult

    nbytes = parse_size(allreduce_size)
    snap = load_snapshot(snapshot)
    _attach_affinity(snap, affinity)
    topology = None
    if fabric is not None:
        snap.fabric_health, topology = _fabric_health(fabric, [n.node.name for n in snap.nodes])
    sched = Scheduler.from_snapshot(snap, strategy=_strategy(policy), topology=topology)
    pending = snap.pending(scheduler_name)
    book = _queues(queues) if queues else None
    reservation: dict[str, Any] | None = None
    if backfill:
        from gpufleet.sched.framework.backfill import backfill as run_backfill
        from gpufleet.sched.framework.snapshot import parse_time

        started = [p.started for p in snap.pods if p.started is not None]
        at = parse_time(now, "--now") if now else max(started, default=0.0)
        ends = {
            p.key: p.started + p.runtime_s
            for p in snap.pods
            if p.bound and p.started is not None and p.runtime_s is not None
        }
        bf = run_backfill(sched, pending, snap.gangs, now=at or 0.0, ends=ends)
        result = PlanResult(placements=bf.started)
        placed = {p.pod for p in bf.started}
        for p in pending:
            if p.key not in placed:
                fail = sched.failure(p)
                held = bf.held.get(p.pod.gang or p.key)
                if held:
                    fail.message = held
                result.failures.append(fail)
        if bf.reservation is not None:
            r = bf.reservation
            reservation = {"unit": r.unit, "start_in_s": r.start - (at or 0.0), "nodes": r.nodes}
    else:
        result = sched.plan(pending, snap.gangs, preemption=preemption, queues=book)
    data: dict[str, Any] = {
        "nodes": len(snap.nodes),
        "pending": len(pending),
        "placements": [_placement(p) for p in result.placements],
        "evictions": [{"pod": e.pod, "node": e.node, "reason": e.reason} for e in result.evictions],
        "failures": [{"pod": f.pod, "reason": "FailedScheduling", "message": f.message} for f in result.failures],
    }
    if backfill:
        data["reservation"] = reservation
    gangs = _landed(sched, result, snap.pods, nbytes)
    if gangs:
        data["gangs"] = gangs
    leaves = snap.fabric_health.leaves if snap.fabric_health is not None else {}
    bad = {name: h for name, h in sorted(leaves.items()) if h.state != "ok"}
    if fabric is not None:
        data["fabric"] = {
            name: {"state": h.state, "uplink_capacity": h.uplink_capacity, "reasons": list(h.reasons)}
            for name, h in bad.items()
        }

    def render(wide: bool) -> None:
        rows: list[list[Any]] = [
            [p.pod, p.node, ",".join(map(str, p.gpus)) if p.gpus else "-", p.score] for p in result.placements
        ]
        cols = ["POD", "NODE", "GPUS", "SCORE"]
        if any(p.alignment for p in result.placements):
            cols += ["NICS", "GPU-NIC"]
            for row, p in zip(rows, result.placements, strict=True):
                row += [",".join(p.nics) or "-", p.alignment or "-"]
        console.print(make_table(cols, rows, title=f"{len(rows)} placements"))
        if result.evictions:
            ev = [[e.pod, e.node, e.reason] for e in result.evictions]
            console.print(make_table(["VICTIM", "NODE", "REASON"], ev, title="preemptions"))
        if result.failures:
            fails = [[f.pod, "FailedScheduling", f.message] for f in result.failures]
            console.print(make_table(["POD", "REASON", "MESSAGE"], fails, title="unschedulable"))
        if gangs:
            console.print(_gang_table(gangs))
        if reservation:
            console.print(
                f"reserved for {reservation['unit']}: starts in {reservation['start_in_s']:g}s on "
                f"{', '.join(reservation['nodes'])}"
            )
        for name, h in bad.items():
            why = "; ".join(h.reasons)
            console.print(f"fabric: {name} is {h.state} ({why}): gangs keep off its nodes while others fit",
                          highlight=False, markup=False)  # fmt: skip

    emit(data, output, render)


def _placement(p: Any) -> dict[str, Any]:
    out = {"pod": p.pod, "node": p.node, "gpus": list(p.gpus), "score": p.score}
    if p.alignment:
        out.update(nics=list(p.nics), alignment=p.alignment)
    return out


def _fabric_health(path: Path, names: list[str]) -> tuple[Any, Any]:
    """Leaf health for placement from an `ibnetdiscover` output, filed under the snapshot's node names, and the
    fabric's topology model (leaves, spines, cores) from the same graph."""
    from gpufleet.cli.inputs import read_input_text
    from gpufleet.fabric.discover import from_ibnetdiscover
    from gpufleet.fabric.placement import placement_health
    from gpufleet.fabric.topology import topology_from_graph
    from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover

    text, cited = read_input_text(path)
    graph = from_ibnetdiscover(parse_ibnetdiscover(text, source=cited))
    return placement_health(graph, names=names), topology_from_graph(graph, source=cited)


def _landed(sched: Any, result: Any, pods: list[Any], nbytes: int) -> dict[str, dict[str, Any]]:
    """Each placed gang: where it landed and its predicted all-reduce there (or why there is none)."""
    from gpufleet.sched.framework.collective import gang_allreduce

    out: dict[str, dict[str, Any]] = {}
    for name, landing in result.landings.items():
        members = [p for p in pods if p.pod.gang == name]
        prediction, why = gang_allreduce(sched.state, landing, members, nbytes)
        out[name] = {**landing.to_dict(), "allreduce": prediction.to_dict() if prediction else None}
        if prediction is None:
            out[name]["allreduce_note"] = why
    return out


def _gang_table(gangs: dict[str, dict[str, Any]]) -> Any:
    rows = []
    for name, g in gangs.items():
        ar = g["allreduce"]
        hops = "-" if g["switch_hops"] is None else str(g["switch_hops"])
        if ar is None:
            predicted = g.get("allreduce_note", "-")
        else:
            predicted = (
                f"{ar['time_us'] / 1000:.2f} ms, {ar['busbw_gbps']:.0f} GB/s busbw ({ar['algo']}/{ar['proto']}; "
                f"{ar['one_leaf_time_us'] / 1000:.2f} ms under one leaf)"
            )
        rows.append([name, len(g["nodes"]), len(g["leaves"]), len(g["spines"]), hops, predicted])
    return make_table(["GANG", "NODES", "LEAVES", "SPINES", "SWITCH HOPS", "ALL-REDUCE"], rows, title="gangs landed")


@sched_app.command("explain")
def explain_cmd(
    pod: str = typer.Argument(..., help="The pod, as NAME or NAMESPACE/NAME."),
    snapshot: Path = typer.Option(..., "--snapshot", "-f", help=SNAPSHOT_HELP),
    policy: str = typer.Option("binpack", "--policy", help=POLICY_HELP),
    affinity: list[str] = typer.Option([], "--affinity", help=AFFINITY_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Show which nodes accept POD and how they score, or the FailedScheduling message with every filter's count."""
    from gpufleet.sched.framework.scheduler import Scheduler
    from gpufleet.sched.framework.snapshot import load_snapshot

    snap = load_snapshot(snapshot)
    _attach_affinity(snap, affinity)
    info = snap.pod(pod)
    sched = Scheduler.from_snapshot(snap, strategy=_strategy(policy))
    if info.key in sched.state.placed:
        sched.state.release(info.key)  # explain a bound pod as if it were pending again
    exp = sched.explain(info)
    data = {
        "pod": exp.pod,
        "requests": info.requests,
        "feasible": [
            {"node": n, "score": s, **({"alignment": exp.alignment[n]} if n in exp.alignment else {})}
            for n, s in exp.feasible
        ],
        "rejected": exp.reasons,
        "message": exp.message,
    }

    def render(wide: bool) -> None:
        req = ", ".join(f"{k}={v}" for k, v in info.requests.items()) or "nothing"
        console.print(f"[bold]{exp.pod}[/bold] requests {req}")
        if exp.feasible:
            shown: list[list[Any]] = [[n, s] for n, s in (exp.feasible if wide else exp.feasible[:10])]
            cols = ["NODE", "SCORE"]
            if exp.alignment:
                cols.append("GPU-NIC")
                for row in shown:
                    row.append(exp.alignment.get(row[0], "-"))
            console.print(make_table(cols, shown, title=f"{len(exp.feasible)} feasible node(s)"))
        if exp.reasons:
            rows = sorted(exp.reasons.items(), key=lambda kv: -kv[1])
            console.print(make_table(["REJECTED BY", "NODES"], rows))
        if exp.message:
            console.print(f"[red]FailedScheduling[/red] {exp.message}", highlight=False, soft_wrap=True)

    emit(data, output, render)


@sched_app.command("run")
def run_cmd(
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="The kubeconfig (default: ~/.kube/config)."),
    context: str | None = typer.Option(None, "--context", help="The kubeconfig context to use."),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="Use the pod's service account."),
    scheduler_name: str = typer.Option("gpufleet", "--scheduler-name", help="Schedule pods that name this scheduler."),
    policy: str = typer.Option("binpack", "--policy", help=POLICY_HELP),
    once: bool = typer.Option(False, "--once", help="Run one scheduling cycle and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and print, but bind, evict and record nothing."),
    interval: float = typer.Option(2.0, "--interval", help="Seconds between cycles."),
) -> None:
    """Act as a secondary scheduler: bind pending pods whose schedulerName is gpufleet."""
    from gpufleet.integrations.kubernetes.scheduler import CycleResult, KubernetesScheduler, connect

    sched = KubernetesScheduler(
        connect(kubeconfig, context, in_cluster), scheduler_name=scheduler_name, strategy=_strategy(policy)
    )

    def show(cycle: CycleResult) -> None:
        for p in cycle.bound:
            console.print(f"{'would bind' if dry_run else 'bound'} {p.pod} -> {p.node}")
        for pod in cycle.evicted:
            console.print(f"{'would evict' if dry_run else 'evicted'} {pod}")
        for f in cycle.events:
            console.print(f"FailedScheduling {f.pod}: {f.message}", highlight=False, soft_wrap=True)

    sched.run(interval, cycles=1 if once else None, dry_run=dry_run, on_cycle=show)


def _queues(path: Path) -> Any:

    from gpufleet import yaml_input
    from gpufleet.errors import ManifestError
    from gpufleet.sched.framework.queues import load_queues

    raw = yaml_input.load_file(path)
    if not isinstance(raw, list):
        raise ManifestError(str(path), "expected a list of queues", fix="- {name: research, guaranteed: {...}}")
    return load_queues(raw)


def _strategy(policy: str) -> Any:
    from gpufleet.errors import UserError
    from gpufleet.sched.framework.scoring import Strategy

    try:
        return Strategy(policy)
    except ValueError:
        raise UserError(f"unknown policy {policy!r}", fix="use --policy binpack or --policy spread") from None


# --- Slurm: submit GPU jobs with GRES, and squeue/sinfo-style views of GPU jobs and nodes ------------------------

BACKEND_HELP = "The scheduler to talk to: slurm (its client commands, with $SLURM_CONF or --slurm-conf)."
SLURM_CONF_HELP = "The cluster's slurm.conf (default: $SLURM_CONF, then /etc/slurm/slurm.conf)."


def _slurm(backend: str, slurm_conf: Path | None) -> Any:
    from gpufleet.integrations.slurm.client import SlurmRunner
    from gpufleet.integrations.slurm.scheduler import SlurmScheduler

    if backend != "slurm":
        raise UserError(
            f"backend {backend!r} cannot take jobs here",
            fix="use --backend slurm; on Kubernetes submit with kubectl and place with `gpufleet sched run`",
        )
    return SlurmScheduler(SlurmRunner(str(slurm_conf) if slurm_conf else None))


@sched_app.command("submit", context_settings={"allow_interspersed_args": False})
def submit_cmd(
    command: list[str] = typer.Argument(..., help="What each node runs (put it after --)."),
    backend: str = typer.Option("slurm", "--backend", help=BACKEND_HELP),
    nodes: int = typer.Option(1, "--nodes", "-N", min=1, help="Nodes, one task each."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs on each node (--gres=gpu:TYPE:N)."),
    gpu_type: str | None = typer.Option(None, "--gpu-type", help="The site's GRES type, e.g. h100."),
    model: str | None = typer.Option(
        None, "--model", help="A GPU model (h100-sxm) to match to the site's GRES type; default: its only type."
    ),
    name: str = typer.Option("gpufleet-job", "--name", help="Job name."),
    partition: str | None = typer.Option(None, "--partition", "-p", help="Slurm partition."),
    exclude: str | None = typer.Option(None, "--exclude", "-x", help="Nodes not to use, comma-separated."),
    log: str | None = typer.Option(None, "--log", help="Where the job writes its output (sbatch --output, %j ok)."),
    workdir: str | None = typer.Option(None, "--chdir", help="The job's working directory."),
    slurm_conf: Path | None = typer.Option(None, "--slurm-conf", help=SLURM_CONF_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Submit a multi-node GPU job, as `sbatch --nodes=N --gres=gpu:TYPE:G --requeue` does; prints its job id.

    Example: gpufleet sched submit --nodes 4 --gpus-per-node 8 --model h100-sxm -- torchrun train.py"""
    import shlex

    from gpufleet.model.workload import TrainingJob

    scheduler = _slurm(backend, slurm_conf)
    job = TrainingJob(
        name=name,
        nodes=[],
        gpus_per_node=gpus_per_node,
        excluded_nodes=[n for n in (exclude or "").split(",") if n],
    )
    job_id = scheduler.submit(
        job, shlex.join(command), gpu_type=gpu_type, model=model, node_count=nodes, partition=partition,
        output=log, workdir=workdir,
    )  # fmt: skip
    said = f"submitted job {job_id} ({name}: {nodes} node(s) x {gpus_per_node} GPUs)"
    data = {"job_id": job_id, "name": name, "nodes": nodes, "gpus_per_node": gpus_per_node}
    emit(data, output, lambda wide: console.print(said))


@sched_app.command("jobs")
def jobs_cmd(
    backend: str = typer.Option("slurm", "--backend", help=BACKEND_HELP),
    job_id: str | None = typer.Option(None, "--job", help="Only this job."),
    slurm_conf: Path | None = typer.Option(None, "--slurm-conf", help=SLURM_CONF_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """GPU jobs, as squeue shows them, with the GPUs each asked for per node."""
    scheduler = _slurm(backend, slurm_conf)
    rows = [
        {
            "job_id": j.job_id, "name": j.name, "state": j.state, "nodes": j.nodes,
            "gpus_per_node": ",".join(str(g) for g in j.gres if g.name == "gpu"), "reason": j.reason,
            "excluded": j.excluded, "restarts": j.restarts,
        }
        for j in scheduler.runner.jobs(job_id)
    ]  # fmt: skip

    def render(wide: bool) -> None:
        body = [
            [r["job_id"], r["name"], r["state"], len(r["nodes"]), r["gpus_per_node"] or "-",
             ",".join(r["nodes"]) or "-", r["reason"] or "-"]
            for r in rows
        ]  # fmt: skip
        console.print(make_table(["JOBID", "NAME", "STATE", "NODES", "GRES/NODE", "NODELIST", "REASON"], body))

    emit(rows, output, render)


@sched_app.command("nodes")
def nodes_cmd(
    backend: str = typer.Option("slurm", "--backend", help=BACKEND_HELP),
    slurm_conf: Path | None = typer.Option(None, "--slurm-conf", help=SLURM_CONF_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """GPU nodes, as sinfo shows them: state, GPU type, GPUs in use and free, and why a node is out."""
    scheduler = _slurm(backend, slurm_conf)
    nodes = scheduler.nodes()
    rows = [
        {
            "name": n.name, "state": n.state, "gpu_type": n.gpu_type, "gpus": n.gpus, "gpus_used": n.gpus_used,
            "gpus_free": n.gpus_free, "reason": n.reason,
        }
        for n in nodes
    ]  # fmt: skip

    def render(wide: bool) -> None:
        body = [
            [r["name"], r["state"], r["gpu_type"] or "-", r["gpus"], r["gpus_used"], r["gpus_free"], r["reason"] or "-"]
            for r in rows
        ]
        console.print(make_table(["NODE", "STATE", "GPU TYPE", "GPUS", "USED", "FREE", "REASON"], body))
        console.print(f"{sum(r['gpus_free'] for r in rows)} of {sum(r['gpus'] for r in rows)} GPUs free")

    emit(rows, output, render)


def register(app: typer.Typer) -> None:
    app.add_typer(sched_app, name="sched")
