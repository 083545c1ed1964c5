"""Core verbs: up, sim run, get, describe, validate, cordon/uncordon/drain."""

from __future__ import annotations

import time
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.control.paths import DEFAULT_PORT, api_token, server_url
from gpufleet.errors import BackendError, NotFoundError, UserError
from gpufleet.spec.base import format_duration, parse_duration

sim_app = typer.Typer(help="Run the digital twin headless.", no_args_is_help=True)


class Resource(StrEnum):
    nodes = "nodes"
    gpus = "gpus"
    jobs = "jobs"
    incidents = "incidents"


def builtin_example(relative: str) -> Path:
    """A manifest shipped inside the package (examples/...)."""
    return Path(str(resources.files("gpufleet").joinpath("examples", relative)))


# --- data sources: a running control plane, or a twin built here -------------------------------------------


def _api_get(path: str, server: str) -> Any:
    try:
        resp = httpx.get(f"{server}{path}", timeout=10)
    except httpx.HTTPError:
        raise BackendError(
            f"no control plane answers at {server}",
            fix="start one with `gpufleet up`, or read a file with --scenario FILE",
        ) from None
    if resp.status_code == 404:
        raise NotFoundError(resp.json().get("error", "not found"), fix=resp.json().get("fix"))
    if resp.status_code >= 400:
        body = resp.json()
        raise BackendError(f"{server}{path}: {body.get('error', resp.text)}", fix=body.get("fix"))
    return resp.json()


def local_plane(scenario: Path, at: str, progress: bool = True) -> Any:
    """Run a scenario here, its nodes through the same door into a control plane in memory, up to `--at`."""
    import threading

    from gpufleet.control.service import ControlPlane
    from gpufleet.sim.backend import TwinBackend
    from gpufleet.sim.fleet import SimFleet
    from gpufleet.sim.runner import run_headless
    from gpufleet.sim.scenario import build_twin
    from gpufleet.sim.source import EPOCH
    from gpufleet.state import Database
    from gpufleet.telemetry.store import EmbeddedStore

    twin, duration = build_twin(scenario)
    seconds = parse_duration(at)
    if seconds > duration:
        raise UserError(f"--at {at} is after the scenario ends ({format_duration(duration)})")
    plane = ControlPlane(
        Database(":memory:"),
        TwinBackend(twin, threading.RLock()),
        clock=lambda: EPOCH + twin.time,
        remediation="off",
        metrics=EmbeddedStore(None),
    )
    fleet = SimFleet(twin)
    with Progress(
        TextColumn("[bold]simulating[/bold] {task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not progress,
    ) as bar:
        task = bar.add_task(f"{twin.cluster.name} to {format_duration(seconds)}", total=max(seconds, 1))
        run_headless(twin, fleet, plane.ingest, plane.tick, seconds, lambda done: bar.update(task, completed=done))
    return plane


def _fetch(resource: str, scenario: Path | None, at: str, server: str, node: str | None = None) -> Any:
    from gpufleet.control import views

    if scenario is None:
        suffix = f"?node={node}" if node else ""
        return _api_get(f"/api/v1/{resource}{suffix}", server)
    plane = local_plane(scenario, at)
    if resource == "incidents":
        return plane.incidents(limit=100_000)
    if resource == "nodes":
        return views.node_rows(plane)
    if resource == "gpus":
        return views.gpu_rows(plane, node)
    return views.job_rows(plane)


SCENARIO_OPT = typer.Option(
    None,
    "--scenario",
    "-f",
    help="Build a twin from this scenario file instead of asking a running control plane.",
)
AT_OPT = typer.Option("0s", "--at", help="With --scenario: simulate this long first (e.g. 2h).")
SERVER_OPT = typer.Option(None, "--server", help=f"Control plane URL (default $GPUFLEET_SERVER or :{DEFAULT_PORT}).")


# --- rendering --------------------------------------------------------------------------------------------


def _render_nodes(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["NAME", "STATUS", "GPUS", "UTIL", "TEMP", "POWER", "LINKS", "JOBS"]
    if wide:
        cols += ["POOL", "MODEL", "RACK", "DRIVER", "CUDA", "LAST SEEN"]
    out = []
    for r in rows:
        row = [
            r["name"],
            r["status"],
            f"{r['gpus_allocatable']}/{r['gpus']}",
            "-" if r["gpu_util_pct"] is None else f"{r['gpu_util_pct']:.0f}%",
            "-" if r["gpu_temp_max_c"] is None else f"{r['gpu_temp_max_c']:.0f}C",
            f"{r['power_kw']:.1f}kW",
            r["links_up"],
            ",".join(r["jobs"]) or "-",
        ]
        if wide:
            seen = r.get("last_seen_ago_s")
            row += [r["pool"], r["gpu_model"] or "-", r["rack"], r["driver"], r["cuda"], _ago(seen)]
        out.append(row)
    console.print(make_table(cols, out))


def _render_gpus(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["NODE", "GPU", "HEALTH", "UTIL", "TEMP", "POWER", "SM MHZ", "MEM USED", "CLOCK EVENTS"]
    if wide:
        cols += ["UUID", "PCI", "PCIE", "DBE", "XID"]
    out = []
    for r in rows:
        row = [
            r["node"],
            r["gpu"],
            r["health"],
            "-" if r["util_pct"] is None else f"{r['util_pct']:.0f}%",
            "-" if r["temp_c"] is None else f"{r['temp_c']:.0f}C",
            "-" if r["power_w"] is None else f"{r['power_w']:.0f}W",
            "-" if r["sm_clock_mhz"] is None else f"{r['sm_clock_mhz']:.0f}",
            "-" if r["fb_used_mib"] is None else f"{r['fb_used_mib']:.0f}MiB",
            ",".join(r["clock_events"]) or "-",
        ]
        if wide:
            dbe = "-" if r["ecc_dbe_volatile"] is None else f"{r['ecc_dbe_volatile']:.0f}"
            xid = f"{r['xid_last']:.0f}" if r["xid_last"] else "-"
            row += [r["uuid"], r["pci_bus_id"], r["pcie"], dbe, xid]
        out.append(row)
    console.print(make_table(cols, out))


def _render_jobs(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["NAME", "STATE", "NODES", "RANKS", "STEP", "STEP TIME", "LAST STEP", "RESTARTS", "CAUSE"]
    if wide:
        cols.append("NODE LIST")
    out = []
    for r in rows:
        row = [
            r["name"],
            r["state"],
            r["nodes"],
            r["ranks"],
            r["step"],
            f"{r['step_time_s']}s",
            f"{r['last_step_age_s']:.0f}s ago",
            r["restarts"],
            r["cause"] or "-",
        ]
        if wide:
            row.append(",".join(r["node_list"]))
        out.append(row)
    console.print(make_table(cols, out))


def _render_incidents(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["ID", "CAUSE", "ENTITY", "SEVERITY", "STATE", "AGE", "COUNT", "ACTION", "SUMMARY"]
    if wide:
        cols.append("EFFECTS")
    out = []
    for r in rows:
        row = [
            r["id"],
            r["cause"],
            _entity(r["entity"]),
            r["severity"],
            r["state"],
            _ago(r.get("age_s")),
            r["count"],
            r["action"] or "-",
            r["summary"],
        ]
        if wide:
            row.append("; ".join(r["effects"]) or "-")
        out.append(row)
    console.print(make_table(cols, out))


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(max(0.0, float(seconds)))


def _entity(e: dict[str, Any] | str) -> str:
    if isinstance(e, str):
        return e
    parts = [e.get("kind", ""), e.get("node") or e.get("name", "")]
    if e.get("index") is not None:
        parts.append(str(e["index"]))
    if e.get("name") and e.get("node"):
        parts.append(e["name"])
    return "/".join(str(p) for p in parts if p)


RENDERERS = {"nodes": _render_nodes, "gpus": _render_gpus, "jobs": _render_jobs, "incidents": _render_incidents}


def _render_node_detail(d: dict[str, Any]) -> None:
    console.print(
        f"[bold]Name:[/bold] {d['name']}   [bold]Status:[/bold] {d['status']}   [bold]Agent:[/bold] {d['agent']}"
    )
    console.print("[bold]Labels:[/bold] " + (", ".join(f"{k}={v}" for k, v in d["labels"].items()) or "<none>"))
    conds = ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in d["conditions"])
    console.print(f"[bold]Conditions:[/bold] {conds}")
    sw = d["software"]
    console.print(
        f"[bold]Software:[/bold] driver {sw['driver'] or '?'}, CUDA {sw['cuda'] or '?'}, kernel {sw['kernel'] or '?'}"
        + (f", fabric manager {sw['fabric_manager']}" if sw.get("fabric_manager") else "")
    )
    _render_gpus(d["gpus"], wide=False)
    nic_rows = [
        [
            n["name"],
            n["rail"],
            n["state"],
            "-" if n["speed_gbps"] is None else f"{n['speed_gbps']:g}G",
            n["peer"] or "-",
            "-" if n["symbol_errors"] is None else f"{n['symbol_errors']:.0f}",
            "-" if n["link_downed"] is None else f"{n['link_downed']:.0f}",
        ]
        for n in d["nics"]
    ]
    if nic_rows:
        console.print(make_table(["HCA", "RAIL", "STATE", "SPEED", "PEER", "SYMBOL ERR", "LINK DOWNED"], nic_rows))
    if d["incidents"]:
        _render_incidents(d["incidents"], wide=False)
    if d["kernel_log"]:
        console.print(Panel("\n".join(d["kernel_log"]), title="kernel log (recent GPU reports)", expand=False))


# --- commands ---------------------------------------------------------------------------------------------


def get(
    resource: Resource = typer.Argument(..., help="nodes, gpus, jobs or incidents"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    node: str | None = typer.Option(None, "--node", help="gpus only: one node's GPUs."),
    scenario: Path | None = SCENARIO_OPT,
    at: str = AT_OPT,
    server: str | None = SERVER_OPT,
) -> None:
    """List nodes, GPUs, training jobs or incidents, like `kubectl get`."""
    rows = _fetch(resource.value, scenario, at, server or server_url(), node)
    emit(rows, output, lambda wide: RENDERERS[resource.value](rows, wide))


def describe(
    kind: str = typer.Argument(..., help="node"),
    name: str = typer.Argument(..., help="node name"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    scenario: Path | None = SCENARIO_OPT,
    at: str = AT_OPT,
    server: str | None = SERVER_OPT,
) -> None:
    """Show everything about one node: GPUs, NICs and links, conditions, software, recent kernel log."""
    from gpufleet.control import views

    if kind not in ("node", "nodes"):
        raise UserError(f"cannot describe {kind!r}", fix="use `gpufleet describe node NAME`")
    if scenario is None:
        detail = _api_get(f"/api/v1/nodes/{name}", server or server_url())
    else:
        detail = views.describe_node(local_plane(scenario, at), name)
    emit(detail, output, lambda wide: _render_node_detail(detail))


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


def _node_action(verb: str, name: str, server: str | None) -> None:
    base = server or server_url()
    token = api_token()
    if token is None:
        raise UserError("no API token found", fix="set GPUFLEET_TOKEN or run on the host where `gpufleet up` runs")
    try:
        resp = httpx.post(
            f"{base}/api/v1/nodes/{name}/{verb}", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
    except httpx.HTTPError:
        raise BackendError(f"no control plane answers at {base}", fix="start one with `gpufleet up`") from None
    body = resp.json()
    if resp.status_code >= 400:
        raise UserError(body.get("error", resp.text), fix=body.get("fix"))
    console.print(f"node/{name} {verb}ed" if verb != "drain" else f"node/{name} drained: {body['result']}")


def cordon(name: str = typer.Argument(...), server: str | None = SERVER_OPT) -> None:
    """Mark a node unschedulable."""
    _node_action("cordon", name, server)


def uncordon(name: str = typer.Argument(...), server: str | None = SERVER_OPT) -> None:
    """Mark a node schedulable again."""
    _node_action("uncordon", name, server)


def drain(name: str = typer.Argument(...), server: str | None = SERVER_OPT) -> None:
    """Cordon a node and stop its jobs (their controller restarts them elsewhere)."""
    _node_action("drain", name, server)


@sim_app.command("run")
def sim_run(
    scenario: Path = typer.Argument(..., help="A `kind: Scenario` manifest."),
    duration: str | None = typer.Option(None, "--duration", "-d", help="Override the scenario's duration (e.g. 24h)."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    events_out: Path | None = typer.Option(
        None, "--events", help="Write every event (kernel log, link, job) as JSON lines."
    ),
) -> None:
    """Run a scenario headless as fast as the machine allows, then summarize what happened."""
    import json

    from gpufleet.sim.scenario import build_twin
    from gpufleet.sim.summary import summarize

    twin, scenario_duration = build_twin(scenario)
    seconds = parse_duration(duration) if duration else scenario_duration
    quiet = output in (OutputFormat.json, OutputFormat.yaml)
    start = time.perf_counter()
    with Progress(
        TextColumn("[bold]simulating[/bold] {task.description}"),
        BarColumn(),
        TextColumn("{task.fields[sim]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=True,
    ) as progress:
        task = progress.add_task(f"{twin.cluster.name}: {twin.gpus.n} GPUs", total=seconds, sim="")
        twin.run(seconds, lambda done: progress.update(task, completed=done, sim=format_duration(done)))
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
    app.command()(get)
    app.command()(describe)
    app.command()(validate)
    app.command()(cordon)
    app.command()(uncordon)
    app.command()(drain)
    app.add_typer(sim_app, name="sim")
