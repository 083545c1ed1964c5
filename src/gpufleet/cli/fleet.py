"""kubectl-like verbs on a control plane's API: get, describe, ack/mitigate/resolve, cordon/uncordon/drain,
reset, requeue, and `config` to remember which server and token to use. `get -w` follows the live stream.

`get` and `describe` also work without a server: `--scenario FILE [--at 2h]` runs the twin here first."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli import render
from gpufleet.cli.client import CONFIG_KEYS, Api, config_path, read_config, write_config
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, RowFollower, console, dump_yaml, emit, no_resources
from gpufleet.cli.progress import PROGRESS_OPT
from gpufleet.errors import UserError


class Resource(StrEnum):
    nodes = "nodes"
    gpus = "gpus"
    jobs = "jobs"
    services = "services"
    incidents = "incidents"
    events = "events"
    audit = "audit"
    actions = "actions"
    agents = "agents"
    clocks = "clocks"
    links = "links"
    switches = "switches"
    pending = "pending"
    queues = "queues"


SCENARIO_OPT = typer.Option(
    None, "--scenario", "-f", help="Build a twin from this scenario file instead of asking a running control plane."
)
AT_OPT = typer.Option("0s", "--at", help="With --scenario: simulate this long first (e.g. 2h).")
SERVER_OPT = typer.Option(
    None, "--server", help="Control plane URL (default: $GPUFLEET_SERVER, `gpufleet config`, or 127.0.0.1:8470)."
)
TOKEN_OPT = typer.Option(None, "--token-file", help="File holding the API token (default: $GPUFLEET_TOKEN, ...).")
SELECTOR_HELP = "Keep rows whose fields (or node labels) match: key=value, key!=value, comma-separated (AND)."


def _rows(resource: Resource, api: Api, node: str | None, limit: int) -> list[dict[str, Any]]:
    r = resource.value
    if r in ("nodes", "jobs", "services", "agents", "clocks"):
        return list(api.get(f"/api/v1/{r}"))
    if r == "gpus":
        return list(api.get("/api/v1/gpus", node=node))
    if r == "incidents":
        return list(api.get("/api/v1/incidents", node=node, limit=limit))
    if r == "events":
        return list(api.get("/api/v1/events", node=node, limit=limit))
    if r == "audit":
        return list(api.get("/api/v1/audit", limit=limit))
    if r == "actions":
        return list(api.get("/api/v1/actions", node=node, limit=limit))
    if r in ("pending", "queues"):
        return scheduler_rows(read_scheduler(api, every_page=r == "pending"), r)
    fabric = api.get("/api/v1/fabric")
    return list(fabric["links"] if r == "links" else fabric["switches"])


def _local_rows(
    resource: Resource, scenario: Path, at: str, node: str | None, progress: bool | None
) -> list[dict[str, Any]]:
    from gpufleet.cli.core import local_plane
    from gpufleet.control import views

    plane = local_plane(scenario, at, progress)
    r = resource.value
    if r == "incidents":
        return plane.incidents(node=node, limit=100_000)
    if r == "nodes":
        return views.node_rows(plane)
    if r == "gpus":
        return views.gpu_rows(plane, node)
    if r == "jobs":
        return views.job_rows(plane)
    if r == "services":
        return views.service_rows(plane)
    if r in ("links", "switches"):
        return list(views.fabric(plane)[r])
    if r == "events":
        return plane.store.events(None, node, 1000)
    if r == "clocks":
        return plane.clocks.view(plane.clock())
    if r in ("pending", "queues"):
        return scheduler_rows(views.scheduler(plane), r)
    raise UserError(f"--scenario cannot show {r}", fix="ask a running control plane (drop --scenario)")


SCHEDULER_PAGE = 5000  # pending rows a request: the API's most


def read_scheduler(api: Api, every_page: bool = True) -> dict[str, Any]:
    """The scheduler view with every page of its pending work (following `continue` as kubectl does), or only the
    first page's (counts and queues are on every page)."""
    view: dict[str, Any] = api.get("/api/v1/scheduler", limit=SCHEDULER_PAGE if every_page else 1)
    managers = {m["manager"]: m for m in view["managers"]}
    token = (view.get("metadata") or {}).get("continue") if every_page else None
    while token:
        more = api.get("/api/v1/scheduler", **{"limit": SCHEDULER_PAGE, "continue": token})
        for m in more["managers"]:
            managers.setdefault(m["manager"], {**m, "pending": []})["pending"].extend(m["pending"])
        token = (more.get("metadata") or {}).get("continue")
    view["managers"] = list(managers.values())
    return view


def scheduler_rows(view: dict[str, Any], which: str) -> list[dict[str, Any]]:
    """Every manager's pending work (longest-waiting first across them) or queues, each row naming its manager."""
    rows = [row for m in view["managers"] for row in m[which]]
    if which == "pending":
        rows.sort(key=lambda p: (p["since"] is None, p["since"] or 0.0))
    return rows


def parse_selector(text: str | None) -> list[tuple[str, bool, str]]:
    """`a=b,c!=d` -> [(a, True, b), (c, False, d)]."""
    out = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, eq, value = part.partition("!=") if "!=" in part else part.partition("=")
        if not eq or not key.strip():
            raise UserError(f"bad selector {part!r}", fix="use key=value or key!=value, e.g. -l severity=critical")
        out.append((key.strip(), "!=" not in part, value.strip()))
    return out


def _field(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is None and isinstance(row.get("labels"), dict):
        value = row["labels"].get(key)
    if value is None and key in ("node", "name") and isinstance(row.get("entity"), dict):
        value = row["entity"].get("node")
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return None if value is None else str(value)


def select(rows: list[dict[str, Any]], selector: list[tuple[str, bool, str]]) -> list[dict[str, Any]]:
    return [r for r in rows if all((_field(r, k) == v) == equal for k, equal, v in selector)]


def _where(node: str | None, selector: str | None) -> str:
    """What narrowed an empty list, for its message: `on node dgx-001 matching -l severity=critical`."""
    parts = ([f"on node {node}"] if node else []) + ([f"matching -l {selector}"] if selector else [])
    return " ".join(parts)


def _print_list(
    resource: Resource, rows: list[dict[str, Any]], output: OutputFormat, where: str = ""
) -> RowFollower | None:
    """The list as `kubectl get` prints it: JSON or YAML (an empty list too), or a table whose header is printed
    once; an empty table is `No <resource> found.` Returns the table's follower for `-w` to print changes under."""
    if output in (OutputFormat.json, OutputFormat.yaml):
        emit(rows, output, lambda wide: None)
        return None
    columns, cells = render.TABLES[resource.value](rows, output is OutputFormat.wide)
    follower = RowFollower(columns)
    if not rows:
        no_resources(resource.value, where)
    follower.print(cells)
    return follower


def get(
    resource: Resource = typer.Argument(
        ...,
        help="nodes, gpus, jobs, incidents, events, audit, actions (what nodes' agents were asked to do, and did), "
        "agents, clocks (each node's clock and how far it is off), links, switches, pending (work the workload "
        "manager has not placed, and why), queues (GPUs in use against quota)",
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    selector: str | None = typer.Option(None, "--selector", "-l", help=SELECTOR_HELP),
    node: str | None = typer.Option(None, "--node", help="gpus, incidents, events, actions: one node's."),
    limit: int = typer.Option(500, "--limit", min=1, max=100_000, help="incidents, events, audit, actions: how many."),
    watch: bool = typer.Option(False, "--watch", "-w", help="After the list, follow changes live (Ctrl-C stops)."),
    scenario: Path | None = SCENARIO_OPT,
    at: str = AT_OPT,
    progress: bool | None = PROGRESS_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """List resources, like `kubectl get`: nodes, GPUs, jobs, incidents, events, the audit log, agents, fabric
    links and switches, and the workload manager's pending work and queues."""
    sel = parse_selector(selector)
    if scenario is not None:
        if watch:
            raise UserError("--watch follows a running control plane", fix="drop --scenario or --watch")
        rows = select(_local_rows(resource, scenario, at, node, progress), sel)
        _print_list(resource, rows, output, _where(node, selector))
        return
    api = Api(server, token_file)
    rows = select(_rows(resource, api, node, limit), sel)
    follower = _print_list(resource, rows, output, _where(node, selector))
    if watch:
        _watch(api, resource, output, sel, node, limit, follower)


def _watch(
    api: Api,
    resource: Resource,
    output: OutputFormat,
    sel: list[tuple[str, bool, str]],
    node: str | None,
    limit: int,
    follower: RowFollower | None = None,
) -> None:
    """Print what changes, as `kubectl get -w` does: changed incidents and new events as they come, other resources'
    changed rows after each summary; in a table, under the header the list printed (never a header again)."""
    wide = output is OutputFormat.wide
    if follower is None and output not in (OutputFormat.json, OutputFormat.yaml):
        follower = RowFollower(render.TABLES[resource.value]([], wide)[0])
    seen = {_key(resource, r): r for r in select(_rows(resource, api, node, limit), sel)}
    try:
        for kind, data in api.stream():
            if resource is Resource.incidents and kind == "incident":
                changed = select([data], sel)
            elif resource is Resource.events and kind == "event":
                changed = select([data], sel) if node is None or data.get("node") == node else []
            elif kind == "summary" and resource not in (Resource.incidents, Resource.events):
                fresh = select(_rows(resource, api, node, limit), sel)
                changed = [r for r in fresh if seen.get(_key(resource, r)) != r]
                seen.update({_key(resource, r): r for r in fresh})
            else:
                continue
            if not changed:
                continue
            if follower is None:
                emit(changed, output, lambda wide: None)
            else:
                follower.print(render.TABLES[resource.value](changed, wide)[1])
    except KeyboardInterrupt:
        pass


def _key(resource: Resource, row: dict[str, Any]) -> str:
    for k in ("id", "seq", "name"):
        if k in row:
            return str(row[k])
    return f"{row.get('node')}/{row.get('gpu', row.get('hca'))}"


def describe(
    kind: str = typer.Argument(..., help="node, gpu or incident"),
    name: str = typer.Argument(..., help="node name, NODE/INDEX for a GPU, or incident id"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    scenario: Path | None = SCENARIO_OPT,
    at: str = AT_OPT,
    progress: bool | None = PROGRESS_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Everything about one node (GPUs, NICs, conditions, capacity, software, kernel log), one GPU, or one
    incident (evidence, effects, every action taken)."""
    kind = kind.rstrip("s")
    if kind not in ("node", "gpu", "incident"):
        raise UserError(f"cannot describe {kind!r}", fix="use node NAME, gpu NODE/INDEX or incident ID")
    if kind == "node":
        if scenario is not None:
            from gpufleet.cli.core import local_plane
            from gpufleet.control import views

            detail = views.describe_node(local_plane(scenario, at, progress), name)
        else:
            detail = Api(server, token_file).get(f"/api/v1/nodes/{name}")
        emit(detail, output, lambda wide: render.node_detail(detail))
        return
    if scenario is not None:
        raise UserError(f"--scenario describes nodes only; {kind}s come from a running control plane")
    api = Api(server, token_file)
    if kind == "incident":
        incident = api.get(f"/api/v1/incidents/{name}")
        emit(incident, output, lambda wide: render.incident_detail(incident))
        return
    node, _, index = name.partition("/")
    if not index.isdigit():
        raise UserError(f"bad GPU {name!r}", fix="name it NODE/INDEX, e.g. dgx-001/3")
    gpus = [g for g in api.get("/api/v1/gpus", node=node) if g["gpu"] == int(index)]
    if not gpus:
        raise UserError(f"{node} has no GPU {index}", fix=f"see `gpufleet get gpus --node {node}`")
    emit(gpus[0], output, lambda wide: render.gpu_detail(gpus[0]))


def _transition(verb: str, incident: str, note: str, server: str | None, token_file: Path | None) -> None:
    body = Api(server, token_file).post(f"/api/v1/incidents/{incident}/{verb}", {"note": note} if note else None)
    console.print(f"{body['id']} {body['state']}", markup=False, highlight=False)


NOTE_OPT = typer.Option("", "--note", help="Why, for the audit log.")


def _transition_command(verb: str, doc: str) -> Any:
    def command(
        incident: str = typer.Argument(..., help="Incident id, e.g. INC-000004."),
        note: str = NOTE_OPT,
        server: str | None = SERVER_OPT,
        token_file: Path | None = TOKEN_OPT,
    ) -> None:
        _transition(verb, incident, note, server, token_file)

    command.__doc__ = doc
    return command


ack = _transition_command("acknowledge", "Acknowledge an incident: someone is on it.")
mitigate = _transition_command("mitigate", "Mark an incident mitigated.")
resolve = _transition_command("resolve", "Resolve an incident.")


DRY_OPT = typer.Option(False, "--dry-run", help="Check everything and change nothing.")
REASON_OPT = typer.Option("", "--reason", help="Why (the audit log and the scheduler's reason field).")


def _act(path: str, body: dict[str, Any], server: str | None, token_file: Path | None) -> None:
    result = Api(server, token_file).post(path, body)
    prefix = "(dry run) " if result.get("dry_run") else ""
    console.print(f"{prefix}{result['target']}: {result['result']}", markup=False, highlight=False)


def cordon(
    name: str = typer.Argument(...),
    dry_run: bool = DRY_OPT,
    reason: str = REASON_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Mark a node unschedulable."""
    _act(f"/api/v1/nodes/{name}/cordon", {"dryRun": dry_run, "reason": reason}, server, token_file)


def uncordon(
    name: str = typer.Argument(...),
    dry_run: bool = DRY_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Mark a node schedulable again."""
    _act(f"/api/v1/nodes/{name}/uncordon", {"dryRun": dry_run}, server, token_file)


def drain(
    name: str = typer.Argument(...),
    dry_run: bool = DRY_OPT,
    reason: str = REASON_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Cordon a node and move its work away (its controller restarts it elsewhere)."""
    _act(f"/api/v1/nodes/{name}/drain", {"dryRun": dry_run, "reason": reason}, server, token_file)


def reset(
    gpu: str = typer.Argument(..., help="NODE/INDEX, e.g. dgx-001/3."),
    dry_run: bool = DRY_OPT,
    reason: str = REASON_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Reset one GPU (refused while work holds it)."""
    node, _, index = gpu.partition("/")
    if not index.isdigit():
        raise UserError(f"bad GPU {gpu!r}", fix="name it NODE/INDEX, e.g. dgx-001/3")
    _act(f"/api/v1/nodes/{node}/gpus/{index}/reset", {"dryRun": dry_run, "reason": reason}, server, token_file)


def requeue(
    job: str = typer.Argument(...),
    exclude: list[str] = typer.Option([], "--exclude", help="A node the job must not return to (repeatable)."),
    dry_run: bool = DRY_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """Requeue a job, keeping it off the nodes given."""
    _act(f"/api/v1/jobs/{job}/requeue", {"dryRun": dry_run, "exclude": exclude}, server, token_file)


config_app = typer.Typer(help="Which control plane and token the CLI uses, kept in $GPUFLEET_HOME/config.")


@config_app.command("set")
def config_set(
    key: str = typer.Argument(..., help=f"One of: {', '.join(CONFIG_KEYS)}."),
    value: str = typer.Argument(..., help="A URL for server, a path for token-file."),
) -> None:
    """Remember a setting (flags and environment variables still win)."""
    if key not in CONFIG_KEYS:
        raise UserError(f"unknown setting {key!r}", fix=f"use one of: {', '.join(CONFIG_KEYS)}")
    if key == "server" and not value.startswith(("http://", "https://")):
        raise UserError(f"{value!r} is not a URL", fix="e.g. https://gpufleet.example.com:8470")
    if key == "token-file":
        value = str(Path(value).expanduser().resolve())
    values = read_config()
    values[key] = value
    path = write_config(values)
    console.print(f"{key} = {value} (in {path})", markup=False, highlight=False)


@config_app.command("view")
def config_view() -> None:
    """Show the remembered settings and what the CLI would use now."""
    api = Api()
    console.print(dump_yaml({"file": str(config_path()), "saved": read_config(), "server": api.server}), end="")


def register(app: typer.Typer) -> None:
    for command in (get, describe, cordon, uncordon, drain, reset, requeue):
        app.command()(command)
    for name, command in (("ack", ack), ("mitigate", mitigate), ("resolve", resolve)):
        app.command(name)(command)
    app.add_typer(config_app, name="config")
