"""Core verbs: up, sim run, get, describe, validate, cordon/uncordon/drain."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.cli.progress import PROGRESS_OPT, catch_up
from gpufleet.errors import UserError
from gpufleet.locks import ordered_lock
from gpufleet.spec.base import format_duration, parse_duration

sim_app = typer.Typer(help="Run the digital twin headless.", no_args_is_help=True)


def builtin_example(relative: str) -> Path:
    """A manifest shipped inside the package (examples/...)."""
    return Path(str(resources.files("gpufleet").joinpath("examples", relative)))


def twin_plane(twin: Any) -> Any:
    """A control plane in memory for a twin's nodes, as `--at` wires it: the twin as its backend and clock, no
    remediation, the plane's own metric store."""
    from gpufleet.control.metrics import PLANE_STORE
    from gpufleet.control.service import ControlPlane
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.state import Database
    from gpufleet.telemetry.store import EmbeddedStore

    return ControlPlane(
        Database(":memory:"),
        TwinBackend(twin, ordered_lock("twin")),
        clock=lambda: twin.epoch + twin.time,
        remediation="off",
        metrics=EmbeddedStore(None, config=PLANE_STORE),
    )


def local_plane(scenario: Path, at: str, progress: bool | None = None, cost: Any = None) -> Any:
    """Run a scenario here, its nodes through the same door into a control plane in memory, up to `--at`, saying
    how far it got on stderr (`progress`: None on a terminal only, True or False as asked). `cost`: the cost config
    its idle-cost series are priced with (default: the catalog's list prices)."""
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.runner import run_headless
    from gpufleet.sim.scenario import build_twin

    twin, duration = build_twin(scenario)
    seconds = parse_duration(at)
    if seconds > duration:
        raise UserError(f"--at {at} is after the scenario ends ({format_duration(duration)})")
    plane = twin_plane(twin)
    fleet = SimFleet(twin, cost=cost)
    with catch_up(f"{twin.cluster.name} to {format_duration(seconds)}", seconds, progress) as reached:
        run_headless(twin, fleet, plane.ingest, plane.tick, seconds, reached)
    return plane


def validate(
    files: list[Path] = typer.Argument(..., help="Manifest files (YAML, multi-document allowed)."),
) -> None:
    """Check manifests against their schema; a misspelled or invalid field is named with what is allowed."""
    from gpufleet.spec.loader import load_manifests, load_scenario

    for path in files:
        docs = load_manifests(path)
        for doc in docs:
            kind = getattr(doc, "kind", type(doc).__name__)
            name = getattr(getattr(doc, "metadata", None), "name", "")
            if kind == "Scenario":
                load_scenario(path)  # also resolves and validates the cluster it points at
            console.print(f"[green]valid[/green] {path}: {kind} {name}")


@sim_app.command("run")
def sim_run(
    scenario: Path = typer.Argument(..., help="A `kind: Scenario` manifest."),
    duration: str | None = typer.Option(None, "--duration", "-d", help="Override the scenario's duration (e.g. 24h)."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    events_out: Path | None = typer.Option(
        None, "--events", help="Write every event (kernel log, link, job) as JSON lines."
    ),
    progress: bool | None = PROGRESS_OPT,
) -> None:
    """Run a scenario headless as fast as the machine allows, then summarize what happened."""
    import json

    from gpufleet.sim.scenario import build_twin
    from gpufleet.sim.summary import summarize

    twin, scenario_duration = build_twin(scenario)
    seconds = parse_duration(duration) if duration else scenario_duration
    start = time.perf_counter()
    with catch_up(f"{twin.cluster.name}: {twin.gpus.n} GPUs", seconds, progress) as reached:
        twin.run(seconds, reached)
    summary = summarize(twin, time.perf_counter() - start)
    if events_out is not None:
        with events_out.open("w") as fh:
            for e in twin.events:
                fh.write(
                    json.dumps({"time": e.time, "kind": e.kind, "entity": str(e.entity), "message": e.message}) + "\n"
                )
    emit(summary, output, lambda wide: _render_summary(summary))


def _render_summary(s: dict[str, Any]) -> None:
    c = s["cluster"]
    console.print(
        f"[bold]{c['name']}[/bold]: {c['nodes']} nodes, {c['gpus']} GPUs, {c['ports']} fabric ports; "
        f"simulated {s['simulated']} in {s['wall_seconds']}s ({s['speedup']}x real time)"
    )
    faults = [
        [
            f["at"],
            f["type"] + (f" {f['code']}" if f["code"] else ""),
            f["target"],
            "; ".join(f["effects"]) or "-",
        ]
        for f in s["faults"]
    ]
    console.print(make_table(["AT", "FAULT", "TARGET", "WHAT FOLLOWED"], faults, title="Injected faults"))
    jobs = [[j["name"], j["state"], j["steps"], j["restarts"], f"{j['last_step_age_s']:.0f}s"] for j in s["jobs"]]
    console.print(make_table(["JOB", "STATE", "STEPS", "RESTARTS", "LAST STEP AGO"], jobs, title="Training jobs"))
    f = s["fleet"]
    rows = [[k.replace("_", " "), v] for k, v in f.items()]
    rows.append(["events", ", ".join(f"{k} {v}" for k, v in s["events"].items())])
    rows.append(["xid lines", ", ".join(f"Xid {k} x{v}" for k, v in s["xid_counts"].items()) or "-"])
    console.print(make_table(["FLEET", ""], rows, title="Fleet"))


def register(app: typer.Typer) -> None:
    app.command()(validate)
    app.add_typer(sim_app, name="sim")
