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


def _local(scenario: Path, at: str) -> Any:
    from gpufleet.sim.twin import Twin

    twin, duration = Twin.from_scenario(scenario)
    seconds = parse_duration(at)
    if seconds > duration:
        raise UserError(f"--at {at} is after the scenario ends ({format_duration(duration)})")
    twin.run(seconds)
    return twin


def _fetch(resource: str, scenario: Path | None, at: str, server: str, node: str | None = None) -> Any:
    from gpufleet.control import views

    if scenario is None:
        suffix = f"?node={node}" if node else ""
        return _api_get(f"/api/v1/{resource}{suffix}", server)
    if resource == "incidents":
        return _local_incidents(scenario, at)
    twin = _local(scenario, at)
    if resource == "nodes":
        return views.node_rows(twin)
    if resource == "gpus":
        return views.gpu_rows(twin, node)
    return views.job_rows(twin)


def _local_incidents(scenario: Path, at: str) -> list[dict[str, Any]]:
    """Run the scenario here with the health engine and list what it found."""
    from gpufleet.control.store import incident_to_json
    from gpufleet.health.engine import HealthEngine
    from gpufleet.health.twin_feed import TwinFeed
    from gpufleet.sim.twin import Twin
    from gpufleet.sources.twin import EPOCH

    twin, duration = Twin.from_scenario(scenario)
    seconds = parse_duration(at)
    if seconds > duration:
        raise UserError(f"--at {at} is after the scenario ends ({format_duration(duration)})")
    feed = TwinFeed(twin)
    engine = HealthEngine(feed.frame, port_speeds_gbps=feed.port_speeds())
    for _ in range(round(seconds / twin.tick)):
        twin.step()
        engine.observe(feed.observe())
    rows = []
    for inc in engine.book.incidents.values():
        row = incident_to_json(inc)
        row["first_seen"] -= EPOCH
        row["last_seen"] -= EPOCH
        rows.append(row)
    return rows


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
        cols += ["POOL", "MODEL", "RACK", "DRIVER", "CUDA"]
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
            row += [r["pool"], r["gpu_model"] or "-", r["rack"], r["driver"], r["cuda"]]
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
            r["sm_clock_mhz"] if r["sm_clock_mhz"] is not None else "-",
            "-" if r["fb_used_mib"] is None else f"{r['fb_used_mib']}MiB",
            ",".join(r["clock_events"]) or "-",
        ]
        if wide:
            row += [r["uuid"], r["pci_bus_id"], r["pcie"], r["ecc_dbe_volatile"], r["xid_last"] or "-"]
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
            r["hang_cause"] or "-",
        ]
        if wide:
            row.append(",".join(r["node_list"]))
        out.append(row)
    console.print(make_table(cols, out))


def _render_incidents(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["ID", "CAUSE", "ENTITY", "SEVERITY", "STATE", "SEEN", "COUNT", "ACTION", "SUMMARY"]
    if wide:
        cols.append("EFFECTS")
    out = []
    for r in rows:
        row = [
            r["id"],
            r["cause"],
            r["entity"],
            r["severity"],
            r["state"],
            format_duration(max(r["first_seen"], 0)),
            r["count"],
            r["action"] or "-",
            r["summary"],
        ]
        if wide:
            row.append("; ".join(r["effects"]) or "-")
        out.append(row)
    console.print(make_table(cols, out))


RENDERERS = {"nodes": _render_nodes, "gpus": _render_gpus, "jobs": _render_jobs, "incidents": _render_incidents}


def _render_node_detail(d: dict[str, Any]) -> None:
    console.print(f"[bold]Name:[/bold] {d['name']}   [bold]Pool:[/bold] {d['pool']}   [bold]Rack:[/bold] {d['rack']}")
    console.print(f"[bold]Unschedulable:[/bold] {d['unschedulable']}")
    console.print("[bold]Labels:[/bold] " + ", ".join(f"{k}={v}" for k, v in d["labels"].items()))
    taints = ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in d["taints"]) or "<none>"
    console.print(f"[bold]Taints:[/bold] {taints}")
    conds = ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in d["conditions"])
    console.print(f"[bold]Conditions:[/bold] {conds}")
    console.print(f"[bold]Capacity:[/bold] {d['capacity']}   [bold]Allocatable:[/bold] {d['allocatable']}")
    sw = d["software"]
    console.print(
        f"[bold]Software:[/bold] driver {sw['driver']}, CUDA {sw['cuda']}, kernel {sw['kernel']}, NCCL {sw['nccl']}"
    )
    _render_gpus(d["gpus"], wide=False)
    nic_rows = [
        [
            n["name"],
            n["rail"],
            n["state"],
            f"{n['speed_gbps']:g}G",
            n["leaf"],
            n["symbol_errors"],
            n["link_downed"],
        ]
        for n in d["nics"]
    ]
    if nic_rows:
        console.print(make_table(["NIC", "RAIL", "STATE", "SPEED", "LEAF", "SYMBOL ERR", "LINK DOWNED"], nic_rows))
    if d["kernel_log"]:
        console.print(Panel("\n".join(d["kernel_log"]), title="kernel log (recent)", expand=False))


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
        detail = views.describe_node(_local(scenario, at), name)
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

    from gpufleet.sim.summary import summarize
    from gpufleet.sim.twin import Twin

    twin, scenario_duration = Twin.from_scenario(scenario)
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


def up(
    scenario: Path | None = typer.Option(
        None, "--scenario", "-f", help="Scenario to run (default: the built-in 256-GPU day)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port for the API and dashboard."),
    speed: float = typer.Option(60.0, "--speed", help="Simulated seconds per wall second."),
    run_for: str | None = typer.Option(
        None, "--run-for", help="Stop after this much wall time (e.g. 30s); default runs until Ctrl-C."
    ),
    remediate: str = typer.Option(
        "dry-run", "--remediate", help="off, dry-run (decide and audit, change nothing) or on (act within budgets)."
    ),
) -> None:
    """Start the embedded default: the digital twin, the control plane and the dashboard on 127.0.0.1."""
    import threading

    import uvicorn

    from gpufleet.control.paths import data_dir
    from gpufleet.control.runner import TwinRunner
    from gpufleet.control.store import StateStore
    from gpufleet.server.app import create_app
    from gpufleet.sim.twin import Twin

    if speed <= 0:
        raise UserError("--speed must be positive")
    if remediate not in ("off", "dry-run", "on"):
        raise UserError(f"--remediate {remediate!r}", fix="use off, dry-run or on")
    path = scenario or builtin_example("scenarios/day-256gpu.yaml")
    twin, _ = Twin.from_scenario(path)
    home = data_dir()
    store = StateStore(home / "state.db")
    token = api_token(create=True)
    assert token is not None
    from gpufleet.control.loop import HealthLoop

    health = HealthLoop(twin, store, remediate, home)  # type: ignore[arg-type]  # checked above
    runner = TwinRunner(twin, store, speed=speed, on_tick=health.tick)
    runner.start()
    app = create_app(runner, token, health)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    url = f"http://{host}:{port}/"
    console.print(
        Panel(
            f"[bold]gpufleet is up[/bold]\n"
            f"dashboard  {url}\n"
            f"API        {url}api/v1/nodes\n"
            f"cluster    {twin.cluster.name}: {len(twin.cluster.nodes)} nodes, {twin.gpus.n} GPUs, speed {speed:g}x\n"
            f"state      {home / 'state.db'} (events kept across restarts: {store.count_events()})\n"
            f"token      {home / 'token'} (needed by cordon/uncordon/drain)\n"
            f"health     fault detection on; remediation {remediate}\n"
            "try        gpufleet get nodes   |   gpufleet get jobs   |   Ctrl-C to stop",
            expand=False,
        )
    )
    if run_for:
        timer = threading.Timer(parse_duration(run_for), lambda: setattr(server, "should_exit", True))
        timer.daemon = True
        timer.start()
    try:
        server.run()
    finally:
        runner.stop()
        store.close()


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(get)
    app.command()(describe)
    app.command()(validate)
    app.command()(cordon)
    app.command()(uncordon)
    app.command()(drain)
    app.add_typer(sim_app, name="sim")
