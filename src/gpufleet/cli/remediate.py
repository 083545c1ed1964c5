"""`gpufleet remediate ...`: plan and apply runbooks for incidents, the circuit breaker, the audit log, runbooks."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

import gpufleet.remediate  # noqa: F401  (registers the Runbook and RemediationPolicy kinds for `gpufleet validate`)
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.cli.render import clock

remediate_app = typer.Typer(
    help="Fix faults safely: runbooks per root cause, budgets, a circuit breaker, rate limits, an audit log.",
    no_args_is_help=True,
)
breaker_app = typer.Typer(help="The circuit breaker that stops automatic action during a wave of failures.")


class BackendName(StrEnum):
    twin = "twin"
    slurm = "slurm"
    kubernetes = "kubernetes"


STATE_OPT = typer.Option(
    None,
    "--state",
    help="Data directory whose state database holds the audit log, breaker and step state (default: $GPUFLEET_HOME,"
    " the one the control plane uses).",
)
POLICY_OPT = typer.Option(None, "--policy", help="A RemediationPolicy manifest (budgets, breaker, rate limits).")
BACKEND_OPT = typer.Option(BackendName.twin, "--backend", help="Where actions go: twin, slurm or kubernetes.")
SCENARIO_OPT = typer.Option(
    None,
    "--scenario",
    help="twin backend: a fresh twin is built from this scenario on every run, so only the remediation state "
    "carries over (default: the built-in day-256gpu).",
)
DIAG_OPT = typer.Option(
    None, "--diag-command", help='slurm backend: how to test a node, e.g. "ssh {node} dcgmi diag -r {level}".'
)


def _state_dir(state: Path | None) -> Path:
    from gpufleet.control.paths import data_dir
    from gpufleet.private_files import private_dir

    return private_dir(state) if state is not None else data_dir()


def _backend(name: BackendName, scenario: Path | None, diag_command: str | None) -> Any:
    if name is BackendName.slurm:
        from gpufleet.integrations.slurm.remediation import SlurmBackend

        return SlurmBackend(diag_command=diag_command)
    if name is BackendName.kubernetes:
        from gpufleet.integrations.kubernetes.remediation import KubernetesBackend

        return KubernetesBackend.from_kubeconfig()
    from gpufleet.cli.core import builtin_example
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.scenario import build_twin

    twin, _ = build_twin(scenario or builtin_example("scenarios/day-256gpu.yaml"))
    return TwinBackend(twin)


def _remediator(
    backend: BackendName, scenario: Path | None, policy: Path | None, state: Path | None, diag_command: str | None
) -> Any:
    from gpufleet.remediate import RemediationStore, Remediator
    from gpufleet.remediate.in_force import in_force
    from gpufleet.state import open_state

    directory = _state_dir(state)
    given = in_force(policy, directory)
    store = RemediationStore(open_state(directory))
    backend_impl = _backend(backend, scenario, diag_command)
    return Remediator(backend_impl, store, given.policy, given.runbooks, given.tickets)


def _render_reports(reports: list[Any], wide: bool) -> None:
    for r in reports:
        head = f"incident {r.incident} ({r.cause}) -> runbook {r.runbook} [{r.mode}, backend {r.backend}"
        console.print(head + (f", breaker {r.breaker}]" if r.breaker != "closed" else "]"), highlight=False)
        cols = ["STEP", "ACTION", "TARGET", "DECISION", "REASON"]
        console.print(make_table(cols, [(s.step, s.action, s.target, s.decision, s.reason) for s in r.steps]))


def _run(incident: Path, mode: str, backend: BackendName, scenario: Path | None, policy: Path | None,
         state: Path | None, diag_command: str | None, output: OutputFormat) -> None:  # fmt: skip
    from gpufleet.remediate import load_incidents

    incidents = load_incidents(incident)
    rem = _remediator(backend, scenario, policy, state, diag_command)
    reports = []
    for inc in incidents:
        if mode == "plan":
            reports.append(rem.plan(inc))
        else:
            reports.append(rem.apply(inc, dry_run=True if mode == "dry-run" else None))
    emit(reports, output, lambda wide: _render_reports(reports, wide))


def plan(
    incident: Path = typer.Option(..., "--incident", help="Incident file (JSON or YAML; one or a list)."),
    backend: BackendName = BACKEND_OPT,
    scenario: Path | None = SCENARIO_OPT,
    policy: Path | None = POLICY_OPT,
    state: Path | None = STATE_OPT,
    diag_command: str | None = DIAG_OPT,
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Show what the runbook would do for an incident, with every safety decision. Writes nothing."""
    _run(incident, "plan", backend, scenario, policy, state, diag_command, output)


def apply(
    incident: Path = typer.Option(..., "--incident", help="Incident file (JSON or YAML; one or a list)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Decide and write the audit log, change nothing."),
    backend: BackendName = BACKEND_OPT,
    scenario: Path | None = SCENARIO_OPT,
    policy: Path | None = POLICY_OPT,
    state: Path | None = STATE_OPT,
    diag_command: str | None = DIAG_OPT,
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Carry out the runbook for an incident within the budgets, breaker and rate limits. Steps already done for
    the same incident are not repeated; a paused runbook continues where it stopped."""
    _run(incident, "dry-run" if dry_run else "apply", backend, scenario, policy, state, diag_command, output)


def resume(
    backend: BackendName = BACKEND_OPT,
    scenario: Path | None = SCENARIO_OPT,
    policy: Path | None = POLICY_OPT,
    state: Path | None = STATE_OPT,
    diag_command: str | None = DIAG_OPT,
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Continue every runbook that paused (waiting for a reboot, deferred by a rate limit, refused by the breaker
    or a budget, or stopped by an error), oldest first."""
    reports = _remediator(backend, scenario, policy, state, diag_command).resume()
    if not reports and output in (OutputFormat.table, OutputFormat.wide):
        console.print("no paused runbooks")
        return
    emit(reports, output, lambda wide: _render_reports(reports, wide))


def breaker_status(
    backend: BackendName = BACKEND_OPT,
    scenario: Path | None = SCENARIO_OPT,
    policy: Path | None = POLICY_OPT,
    state: Path | None = STATE_OPT,
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Whether the breaker is tripped, why, and how many nodes failed inside its window."""
    status = _remediator(backend, scenario, policy, state, None).breaker_status()

    def render(wide: bool) -> None:
        color = "red" if status["state"] == "tripped" else "green"
        console.print(f"breaker: [{color}]{status['state']}[/{color}]", highlight=False)
        if status["reason"]:
            console.print(f"reason: {status['reason']} (by {status['changed_by']})", highlight=False)
        console.print(
            f"failing nodes in the last {status['window_s']:g}s: {status['failing_nodes_in_window']} "
            f"(trips at {status['threshold']})",
            highlight=False,
        )
        wave = status["wave_failing_per_window"]
        if isinstance(wave, list) and wave:
            console.print(
                f"failing nodes in each {status['window_s']:g}s window before, latest last: "
                f"{', '.join(str(n) for n in reversed(wave))} (a wave trips at {status['wave_threshold']} in each)",
                highlight=False,
            )

    emit(status, output, render)


def breaker_reset(
    by: str | None = typer.Option(None, "--by", help="Who resets it (default: the login name)."),
    note: str = typer.Option("", "--note", help="Why it is safe to resume automatic action."),
    backend: BackendName = BACKEND_OPT,
    scenario: Path | None = SCENARIO_OPT,
    policy: Path | None = POLICY_OPT,
    state: Path | None = STATE_OPT,
) -> None:
    """Close a tripped breaker (a person's decision, recorded in the audit log)."""
    rem = _remediator(backend, scenario, policy, state, None)
    was = rem.books().breaker().tripped
    rem.reset_breaker(by=by, note=note)
    console.print("breaker reset" if was else "breaker was not tripped; reset recorded")


def audit(
    incident: str | None = typer.Option(None, "--incident", help="Only this incident id."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the last N entries."),
    state: Path | None = STATE_OPT,
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """The audit log: every decision (done, refused, deferred, skipped, would) with its reason, oldest first."""
    from gpufleet.remediate import RemediationStore
    from gpufleet.state import open_state

    entries = RemediationStore(open_state(_state_dir(state))).audit_entries(incident, limit)

    def render(wide: bool) -> None:
        cols = ["SEQ", "TIME", "INCIDENT", "STEP", "ACTION", "TARGET", "DECISION", "REASON"]
        rows: list[tuple[object, ...]] = [
            (e.seq, clock(e.time), e.incident, e.step, e.action, e.target,
             e.decision + (" (dry-run)" if e.dry_run else ""), e.reason or f"by {e.actor}")
            for e in entries
        ]  # fmt: skip
        if wide:
            cols += ["RUNBOOK", "BACKEND"]
            rows = [(*r, e.runbook, e.backend) for r, e in zip(rows, entries, strict=True)]
        console.print(make_table(cols, rows))

    emit(entries, output, render)


def runbooks(
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    policy: Path | None = POLICY_OPT,
) -> None:
    """List the runbooks in force: what each matches and its steps."""
    from gpufleet.remediate import RunbookSet, load_policy, load_runbooks

    rs = RunbookSet.builtin()
    if policy:
        for extra in load_policy(policy).spec.runbooks:
            rs.extend(load_runbooks(policy.parent / extra))
    data = [rb.model_dump(mode="json", by_alias=True, exclude_defaults=True) for rb in rs]

    def render(wide: bool) -> None:
        rows = []
        for rb in rs:
            m = rb.spec.match
            match = ",".join(m.causes) + (f" action={','.join(m.actions)}" if m.actions else "")
            match += f" severity={','.join(m.severities)}" if m.severities else ""
            steps = " -> ".join(s.action.value + ("?" if s.when != type(s.when)() else "") for s in rb.spec.steps)
            rows.append((rb.name, match, steps) + ((rb.spec.description,) if wide else ()))
        cols = ["NAME", "MATCHES", "STEPS (? = guarded)"] + (["DESCRIPTION"] if wide else [])
        console.print(make_table(cols, rows))

    emit(data, output, render)


TOTAL_LABELS = {
    "actions": "actions carried out",
    "nodes_out": "nodes taken out of service",
    "node_hours": "node-hours out of service",
    "gpu_hours": "GPU-hours lost",
    "breaker_trips": "breaker trips",
    "refusals": "steps refused (budget, breaker)",
    "deferrals": "steps deferred (rate limits)",
}


def _signed(value: float) -> str:
    text = f"{value:+,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:+,}"
    return "0" if text in ("+0", "-0") else text


def _number(value: float) -> str:
    return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"


def _render_replay(data: dict[str, Any], wide: bool) -> None:
    from gpufleet.spec.base import format_duration

    window = data["window"]
    console.print(
        f"replayed {data['events']:,} events ({data['incidents']:,} incidents) on {data['nodes']} nodes over "
        f"{format_duration(window['end'] - window['start'])} up to {clock(window['end'])}; current = "
        f"{data['baseline']}",
        highlight=False,
    )
    for note in data["notes"]:
        console.print(f"note: {note}", highlight=False)
    diffs = data["differences"]
    same = data["incidents"] - len(diffs)
    if diffs:
        rows = []
        for d in diffs:
            now, then = d["current"], d["candidate"]
            rows.append(
                (d["incident"], d["cause"], d["node"], "; ".join(now["actions"]) or "-",
                 "; ".join(then["actions"]) or "-", _stopped(then["steps"]) or "-",
                 _signed(round(then["node_hours"] - now["node_hours"], 3)))
            )  # fmt: skip
        cols = ["INCIDENT", "CAUSE", "NODE", "ACTIONS TAKEN", "CANDIDATE WOULD TAKE", "CANDIDATE STOPPED AT",
                "NODE-HOURS"]  # fmt: skip
        console.print(make_table(cols, rows, title=f"{len(diffs)} incident(s) handled differently"))
    console.print(f"{same:,} of {data['incidents']:,} incidents handled the same", highlight=False)
    totals = data["totals"]
    total_rows = [
        (TOTAL_LABELS.get(k, k), _number(v["current"]), _number(v["candidate"]), _signed(v["difference"]))
        for k, v in totals.items()
    ]
    console.print(make_table(["TOTAL", "CURRENT", "CANDIDATE", "DIFFERENCE"], total_rows))


def _stopped(steps: dict[str, str]) -> str:
    """Where the candidate's runbook ended if it did not finish: "drain deferred"."""
    stopped = [f"{step} {how}" for step, how in steps.items() if how in ("refused", "deferred", "waiting", "error")]
    return ", ".join(stopped)


def replay(
    policy: Path = typer.Option(..., "--policy", help="The candidate RemediationPolicy manifest to rehearse."),
    since: str = typer.Option("30d", "--since", help="How far back to replay, from the newest recorded event."),
    state: Path | None = STATE_OPT,
    reboot_time: str = typer.Option(
        "5m", "--reboot-time", help="How long a node is away after a reboot the recorded run did not do."
    ),
    reset_time: str = typer.Option("1m", "--reset-time", help="How long a GPU reset takes the GPU out of service."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Rehearse a policy: replay the recorded incidents and node events through the engine under POLICY, in event
    time (runbooks, budgets, breaker and rate limits as they would have applied), and show what it would have done
    differently from what was done. Reads the state database; changes nothing."""
    import os

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpufleet.cli.output import err_console
    from gpufleet.control.policy_replay import parse_since, rehearse, runbooks_for
    from gpufleet.errors import UserError
    from gpufleet.remediate import load_policy
    from gpufleet.spec.base import parse_duration
    from gpufleet.state import open_state

    seconds = parse_since(since)  # before anything is read: a bad flag says so first
    durations = {}
    for flag, text in (("--reboot-time", reboot_time), ("--reset-time", reset_time)):
        try:
            durations[flag] = parse_duration(text)
        except ValueError:
            raise UserError(f"{flag} {text!r} is not a duration", fix=f"give {flag} like 5m or 90s") from None
    candidate = load_policy(policy)
    runbooks = runbooks_for(candidate, policy.parent)
    db = open_state(_state_dir(state), os.environ.get("GPUFLEET_STATE"), create=False)
    columns = (TextColumn("replaying {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"{label} (events)", total=total)
            bar.update(tasks[label], completed=done)

        result = rehearse(
            db,
            candidate,
            seconds,
            runbooks=runbooks,
            reboot_s=durations["--reboot-time"],
            gpu_reset_s=durations["--reset-time"],
            progress=progress,
        )
    data = result.as_dict()
    emit(data, output, lambda wide: _render_replay(data, wide))


def register(app: typer.Typer) -> None:
    remediate_app.command()(plan)
    remediate_app.command()(apply)
    remediate_app.command()(resume)
    remediate_app.command()(audit)
    remediate_app.command()(runbooks)
    remediate_app.command()(replay)
    breaker_app.command("status")(breaker_status)
    breaker_app.command("reset")(breaker_reset)
    remediate_app.add_typer(breaker_app, name="breaker")
    app.add_typer(remediate_app, name="remediate")
