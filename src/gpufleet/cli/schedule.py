"""`gpufleet sched plan|explain|run`: place pods of a kubectl capture, explain one, or run as a scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table

app = typer.Typer(
    help="Kubernetes placement: plan on a `kubectl get nodes,pods -o json` capture, explain, or run live.",
    no_args_is_help=True,
)

SNAPSHOT_HELP = "A capture from `kubectl get nodes,pods -A -o json` (PriorityClass and PodGroup items are used too)."
POLICY_HELP = "binpack (fill nodes, keep whole nodes free) or spread (kube-scheduler's LeastAllocated)."


@app.command("plan")
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
    backfill: bool = typer.Option(
        False,
        "--backfill",
        help="EASY backfill instead of preemption: reserve for the first pod that does not fit and start later ones "
        "only if they do not delay it. Runtimes come from the gpufleet.io/runtime-estimate annotation.",
    ),
    now: str | None = typer.Option(
        None, "--now", help="The time to plan at for --backfill (RFC 3339; default: the latest time in the capture)."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Print where each pending pod would be placed, which pods would be preempted, and why the rest cannot fit."""
    from gpufleet.sched.framework.scheduler import Scheduler
    from gpufleet.sched.framework.snapshot import load_snapshot
    from gpufleet.sched.framework.types import PlanResult

    snap = load_snapshot(snapshot)
    sched = Scheduler.from_snapshot(snap, strategy=_strategy(policy))
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
        "placements": [
            {"pod": p.pod, "node": p.node, "gpus": list(p.gpus), "score": p.score} for p in result.placements
        ],
        "evictions": [{"pod": e.pod, "node": e.node, "reason": e.reason} for e in result.evictions],
        "failures": [{"pod": f.pod, "reason": "FailedScheduling", "message": f.message} for f in result.failures],
    }
    if backfill:
        data["reservation"] = reservation

    def render(wide: bool) -> None:
        rows: list[list[Any]] = [
            [p.pod, p.node, ",".join(map(str, p.gpus)) if p.gpus else "-", p.score] for p in result.placements
        ]
        console.print(make_table(["POD", "NODE", "GPUS", "SCORE"], rows, title=f"{len(rows)} placements"))
        if result.evictions:
            ev = [[e.pod, e.node, e.reason] for e in result.evictions]
            console.print(make_table(["VICTIM", "NODE", "REASON"], ev, title="preemptions"))
        if result.failures:
            fails = [[f.pod, "FailedScheduling", f.message] for f in result.failures]
            console.print(make_table(["POD", "REASON", "MESSAGE"], fails, title="unschedulable"))
        if reservation:
            console.print(
                f"reserved for {reservation['unit']}: starts in {reservation['start_in_s']:g}s on "
                f"{', '.join(reservation['nodes'])}"
            )

    emit(data, output, render)


@app.command("explain")
def explain_cmd(
    pod: str = typer.Argument(..., help="The pod, as NAME or NAMESPACE/NAME."),
    snapshot: Path = typer.Option(..., "--snapshot", "-f", help=SNAPSHOT_HELP),
    policy: str = typer.Option("binpack", "--policy", help=POLICY_HELP),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Show which nodes accept POD and how they score, or the FailedScheduling message with every filter's count."""
    from gpufleet.sched.framework.scheduler import Scheduler
    from gpufleet.sched.framework.snapshot import load_snapshot

    snap = load_snapshot(snapshot)
    info = snap.pod(pod)
    sched = Scheduler.from_snapshot(snap, strategy=_strategy(policy))
    if info.key in sched.state.placed:
        sched.state.release(info.key)  # explain a bound pod as if it were pending again
    exp = sched.explain(info)
    data = {
        "pod": exp.pod,
        "requests": info.requests,
        "feasible": [{"node": n, "score": s} for n, s in exp.feasible],
        "rejected": exp.reasons,
        "message": exp.message,
    }

    def render(wide: bool) -> None:
        req = ", ".join(f"{k}={v}" for k, v in info.requests.items()) or "nothing"
        console.print(f"[bold]{exp.pod}[/bold] requests {req}")
        if exp.feasible:
            shown = exp.feasible if wide else exp.feasible[:10]
            console.print(make_table(["NODE", "SCORE"], shown, title=f"{len(exp.feasible)} feasible node(s)"))
        if exp.reasons:
            rows = sorted(exp.reasons.items(), key=lambda kv: -kv[1])
            console.print(make_table(["REJECTED BY", "NODES"], rows))
        if exp.message:
            console.print(f"[red]FailedScheduling[/red] {exp.message}", highlight=False, soft_wrap=True)

    emit(data, output, render)


@app.command("run")
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
    import yaml

    from gpufleet.errors import ManifestError, NotFoundError
    from gpufleet.sched.framework.queues import load_queues

    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file", fix="pass a YAML list of queues") from None
    except yaml.YAMLError as exc:
        raise ManifestError(str(path), f"not YAML ({exc})") from None
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


def register(root: typer.Typer) -> None:
    """These verbs join the `gpufleet sched` family (replay, policies) rather than a family of their own."""
    from gpufleet.cli.sched import sched_app

    for command in app.registered_commands:
        sched_app.registered_commands.append(command)
