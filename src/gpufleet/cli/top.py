"""`gpufleet top`: the fleet live in a terminal (works over SSH): headline figures, every node with its GPUs'
utilization as a bar, and the open incidents; redrawn every few seconds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpufleet.cli.client import Api
from gpufleet.cli.fleet import SERVER_OPT, TOKEN_OPT
from gpufleet.cli.output import console, err_console
from gpufleet.cli.render import ago, entity

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}


def bar(value: float | None, width: int = 10) -> Text:
    if value is None:
        return Text("-".ljust(width), style="dim")
    filled = max(0, min(width, round(value / 100 * width)))
    style = "green" if value >= 50 else "yellow" if value >= 10 else "red"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def frame(summary: dict[str, Any], nodes: list[dict[str, Any]], rows: int) -> Group:
    head = Text()
    head.append(f"{summary['nodes']} nodes  {summary['gpus']} GPUs  ", style="bold")
    head.append(f"util {summary['util_mean']:.0f}%  ")
    head.append(f"hottest {summary['temp_max'] or 0:.0f}°C  ")
    head.append(f"{summary['power_kw']:.1f} kW  ")
    for label, key, style in (
        ("lost", "gpus_lost", "red"),
        ("throttled", "gpus_throttled", "yellow"),
        ("idle held", "gpus_idle_held", "yellow"),
        ("links down", "links_down", "red"),
        ("nodes lost", "nodes_lost", "red"),
    ):
        head.append(f"{label} {summary[key]}  ", style=style if summary[key] else "dim")
    jobs = summary["jobs"]
    head.append(f"jobs {jobs.get('Running', 0)} running", style="green")
    if jobs.get("Stalled"):
        head.append(f", {jobs['Stalled']} stalled", style="bold red")
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    for col in ("NODE", "STATUS", "GPUS", "UTIL", "", "TEMP", "POWER", "LINKS", "JOBS"):
        table.add_column(col)

    def trouble(n: dict[str, Any]) -> tuple[int, str]:
        bad = (
            n["status"] != "Ready"
            or n["gpus_allocatable"] < n["gpus"]
            or ("/" in n["links_up"] and (n["links_up"].split("/")[0] != n["links_up"].split("/")[1]))
        )
        return (0 if bad else 1, n["name"])

    shown = sorted(nodes, key=trouble)[:rows]
    for n in shown:
        status_style = "green" if n["status"] == "Ready" else "bold red"
        util = n["gpu_util_pct"]
        table.add_row(
            Text(n["name"]),
            Text(n["status"], style=status_style),
            Text(f"{n['gpus_allocatable']}/{n['gpus']}", style="" if n["gpus_allocatable"] == n["gpus"] else "red"),
            bar(util),
            Text("-" if util is None else f"{util:.0f}%"),
            Text("-" if n["gpu_temp_max_c"] is None else f"{n['gpu_temp_max_c']:.0f}°C"),
            Text(f"{n['power_kw']:.1f} kW"),
            Text(n["links_up"]),
            Text(",".join(n["jobs"]) or "-", style="dim"),
        )
    hidden = len(nodes) - len(shown)
    incidents = Table(box=None, header_style="bold", pad_edge=False, title=None)
    for col in ("ID", "SEVERITY", "CAUSE", "ENTITY", "STATE", "AGE", "SUMMARY"):
        incidents.add_column(col)
    for inc in summary["incidents"][:8]:
        incidents.add_row(
            Text(inc["id"]),
            Text(inc["severity"], style=SEVERITY_STYLE.get(inc["severity"], "")),
            Text(inc["cause"]),
            Text(entity(inc["entity"])),
            Text(inc["state"]),
            Text(ago(inc.get("age_s"))),
            Text(inc["summary"][:80]),
        )
    parts: list[Any] = [head, Text(""), table]
    if hidden > 0:
        parts.append(Text(f"... and {hidden} more nodes (all Ready); widen the terminal or use --rows", style="dim"))
    parts += [Text(""), Text(f"open incidents: {summary['incidents_open']}", style="bold"), incidents]
    return Group(*parts)


def top(
    interval: float = typer.Option(2.0, "--interval", min=0.5, help="Seconds between redraws."),
    rows: int = typer.Option(
        0, "--rows", min=0, help="Nodes to show (default: what fits the terminal; every node when printed once)."
    ),
    once: bool = typer.Option(False, "--once", help="Print one frame and exit (for scripts and logs)."),
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """The fleet live in the terminal, like `top`: figures, nodes (troubled first), open incidents.

    A live redraw needs a terminal. When standard output is not one (a pipe, a file, a CI log) top prints one
    frame and exits, as `--once` does, and says so on stderr: a redraw there would print nothing readable until
    it was stopped. To follow changes in a log, use `gpufleet get nodes -w`."""
    api = Api(server, token_file)
    live = console.is_terminal and not once
    fit = rows or (max(5, console.size.height - 16) if live else 1_000_000)

    def draw() -> Group:
        return frame(api.get("/api/v1/summary"), api.get("/api/v1/nodes"), fit)

    if not live:
        console.print(draw())
        if not once:
            err_console.print(
                "top: standard output is not a terminal, so one frame was printed (--once does this without this"
                " note); to follow changes in a log, use `gpufleet get nodes -w`",
                markup=False,
                highlight=False,
            )
        return
    try:
        with Live(draw(), console=console, screen=True, auto_refresh=False) as screen:
            while True:
                time.sleep(interval)
                screen.update(draw(), refresh=True)
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command()(top)
