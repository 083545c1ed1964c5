"""`gpufleet cost report`: what GPU time cost over a period, from a running control plane (or a scenario run here):
per team, namespace, workload and GPU model, the idle cost of allocated GPUs, unallocated capacity, the waste
report, and the settings that would scale idle node pools to zero. `--price-file` prices the report with your own
cost config instead of the control plane's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.fleet import AT_OPT, SCENARIO_OPT, SERVER_OPT, TOKEN_OPT
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table
from gpufleet.cli.progress import PROGRESS_OPT

cost_app = typer.Typer(help="What GPU time costs: per workload, team and model; idle GPUs; scale-to-zero.",
                       no_args_is_help=True)  # fmt: skip

TOP = 15  # rows of each list in the table view; -o wide shows all


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _hours(v: float) -> str:
    return f"{v:,.1f}"


def _h(v: float) -> str:
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


@cost_app.command("report")
def report(
    since: str = typer.Option("7d", "--since", help="The period, back from now: 90m, 24h, 7d."),
    price_file: Path | None = typer.Option(
        None,
        "--price-file",
        help="A cost config (prices, teams, thresholds: YAML) to price with instead of the control plane's.",
    ),
    idle_below: float | None = typer.Option(
        None, "--idle-below", min=0, max=100, help="Utilization (%) below which a held GPU is idle (default 10)."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    scenario: Path | None = SCENARIO_OPT,
    at: str = AT_OPT,
    progress: bool | None = PROGRESS_OPT,
    server: str | None = SERVER_OPT,
    token_file: Path | None = TOKEN_OPT,
) -> None:
    """GPU-hours and money per team, namespace, workload and GPU model; idle allocated and unallocated GPU-hours;
    nodes left idle, workloads holding many GPUs at low utilization, idle MIG slices; and the Karpenter or
    cluster-autoscaler settings that would scale idle pools to zero, with what that saves."""
    from gpufleet.cost.config import CostConfig
    from gpufleet.cost.report import build_report
    from gpufleet.cost.service import parse_since
    from gpufleet.cost.usage import Usage

    parse_since(since)  # a bad period is said before anything runs
    config = CostConfig.from_file(price_file) if price_file is not None else None
    if idle_below is None and config is not None and "idle_below_pct" in config.model_fields_set:
        idle_below = config.idle_below_pct
    if scenario is not None:
        from gpufleet.cli.core import local_plane
        from gpufleet.control.paths import data_dir
        from gpufleet.cost.service import CONFIG_NAME, CostService, load_config

        path = data_dir() / CONFIG_NAME
        # its idle-cost series priced alike
        plane = local_plane(scenario, at, progress, cost=config or load_config(path))
        service = CostService(plane, config, config_path=path)
        data: dict[str, Any] = service.report(since, idle_below).model_dump(mode="json")
    else:
        from gpufleet.cli.client import Api

        data = Api(server, token_file).get("/api/v1/cost", since=since, idle_below=idle_below)
        if config is not None:  # the control plane measured; price it here with this file
            usage = Usage.model_validate(data["usage"])
            data = build_report(usage, config).model_dump(mode="json")
    emit(data, output, lambda wide: render_report(data, wide))


def render_report(r: dict[str, Any], wide: bool) -> None:
    from gpufleet.cli.render import clock

    t = r["totals"]
    asked = r.get("asked_hours")
    covered = f"{_h(r['hours'])} h" + (f" of the {_h(asked)} h asked: the metric history begins there" if asked else "")
    console.print(
        f"[bold]GPU cost[/bold] {clock(r['start'])} – {clock(r['end'])} ({covered}, a point every "
        f"{r['step_s']:g} s); idle below {r['idle_below_pct']:g}% utilization; prices in {r['currency']}",
        highlight=False,
    )
    rows = [
        ["GPUs reporting", f"{t['gpus']:g}"],
        ["GPU-hours held", _hours(t["held_gpu_hours"]), _usd(t["cost_usd"])],
        ["  of which idle", _hours(t["idle_gpu_hours"]), _usd(t["idle_cost_usd"])],
        ["  no utilization reading", _hours(t["unknown_gpu_hours"])],
        ["GPU-hours unallocated", _hours(t["unallocated_gpu_hours"]), _usd(t["unallocated_cost_usd"])],
        ["utilization of held GPUs", _pct(t["util_avg_pct"])],
    ]
    if t["unpriced_gpu_hours"]:
        rows.append(["GPU-hours without a price", _hours(t["unpriced_gpu_hours"])])
    console.print(make_table(["TOTALS", "GPU-HOURS", "COST"], rows))
    _groups("TEAM", r["by_team"], wide)
    _groups("NAMESPACE", r["by_namespace"], wide)
    console.print(make_table(
        ["MODEL", "PROVIDER", "OFFERING", "$/GPU-H", "GPUS", "HELD GPU-H", "IDLE GPU-H", "UNALLOC GPU-H", "COST",
         "IDLE COST", "UNALLOC COST"],
        [[m["model"], m["provider"], m["offering"], _usd(m["usd_per_gpu_hour"]), f"{m['gpus']:g}",
          _hours(m["held_gpu_hours"]), _hours(m["idle_gpu_hours"]), _hours(m["unallocated_gpu_hours"]),
          _usd(m["cost_usd"]), _usd(m["idle_cost_usd"]), _usd(m["unallocated_cost_usd"])] for m in r["by_model"]],
        title="By GPU model"))  # fmt: skip
    workloads = r["by_workload"] if wide else r["by_workload"][:TOP]
    console.print(make_table(
        ["WORKLOAD", "NAMESPACE", "TEAM", "KIND", "PEAK GPUS", "GPU-H", "IDLE GPU-H", "UTIL", "COST", "IDLE COST"],
        [[w["workload"], w["namespace"], w["team"], w["kind"], f"{w['peak_gpus']:g}", _hours(w["gpu_hours"]),
          _hours(w["idle_gpu_hours"]), _pct(w["util_avg_pct"]), _usd(w["cost_usd"]), _usd(w["idle_cost_usd"])]
         for w in workloads],
        title=_title("Workloads, costliest first", r["by_workload"], wide)))  # fmt: skip
    _waste(r["waste"], wide)
    _recommendations(r["recommendations"], wide)
    for note in r["notes"]:
        console.print(f"note: {note}", highlight=False, markup=False)


def _title(text: str, rows: list[Any], wide: bool) -> str:
    return text if wide or len(rows) <= TOP else f"{text} (top {TOP} of {len(rows)}; -o wide for all)"


def _groups(label: str, rows: list[dict[str, Any]], wide: bool) -> None:
    extra = ["NAMESPACES"] if label == "TEAM" else ["TEAM"]
    console.print(make_table(
        [label, *extra, "WORKLOADS", "GPU-H", "IDLE GPU-H", "UTIL", "COST", "IDLE COST"],
        [[g["name"], ",".join(g["namespaces"]) if label == "TEAM" else g["team"], g["workloads"],
          _hours(g["gpu_hours"]), _hours(g["idle_gpu_hours"]), _pct(g["util_avg_pct"]), _usd(g["cost_usd"]),
          _usd(g["idle_cost_usd"])] for g in (rows if wide else rows[:TOP])],
        title=_title(f"By {label.lower()}", rows, wide)))  # fmt: skip


def _waste(w: dict[str, Any], wide: bool) -> None:
    console.print(
        f"[bold]Waste[/bold]: {_hours(w['idle_allocated_gpu_hours'])} idle allocated GPU-hours "
        f"({_usd(w['idle_allocated_cost_usd'])}), {_hours(w['unallocated_gpu_hours'])} unallocated "
        f"({_usd(w['unallocated_cost_usd'])})",
        highlight=False,
    )
    if w["idle_nodes"]:
        console.print(make_table(
            ["NODE", "POOL", "GPUS", "REPORTED H", "IDLE H", "EMPTY H", "LONGEST IDLE H", "IDLE COST"],
            [[n["node"], n["pool"], f"{n['gpus']:g}", _hours(n["covered_hours"]), _hours(n["idle_hours"]),
              _hours(n["empty_hours"]), _hours(n["longest_idle_h"]), _usd(n["idle_cost_usd"])]
             for n in (w["idle_nodes"] if wide else w["idle_nodes"][:TOP])],
            title=_title("Nodes left idle", w["idle_nodes"], wide)))  # fmt: skip
    if w["low_util_workloads"]:
        console.print(make_table(
            ["WORKLOAD", "NAMESPACE", "TEAM", "PEAK GPUS", "UTIL", "GPU-H", "COST", "WASTED"],
            [[x["workload"], x["namespace"], x["team"], f"{x['peak_gpus']:g}", _pct(x["util_avg_pct"]),
              _hours(x["gpu_hours"]), _usd(x["cost_usd"]), _usd(x["wasted_usd"])] for x in w["low_util_workloads"]],
            title="Workloads holding many GPUs at low utilization"))  # fmt: skip
    if w["idle_mig_slices"]:
        console.print(make_table(
            ["NODE", "GPU", "GI", "PROFILE", "WORKLOAD", "NAMESPACE", "HELD H", "IDLE", "IDLE COST"],
            [[s["node"], s["gpu"], s["gi_id"], s["profile"], s["workload"] or "-", s["namespace"] or "-",
              _hours(s["held_hours"]), f"{100 * s['idle_share']:.0f}%", _usd(s["idle_cost_usd"])]
             for s in w["idle_mig_slices"]],
            title="MIG slices held and unused"))  # fmt: skip


def _recommendations(recs: list[dict[str, Any]], wide: bool) -> None:
    if not recs:
        console.print("No node pool sat empty long enough to scale down.")
        return
    for rec in recs:
        nodes = rec["removable_nodes"] if wide else rec["removable_nodes"][:8]
        more = len(rec["removable_nodes"]) - len(nodes)
        console.print(
            f"\n[bold]Scale pool {rec['pool']} to zero when idle[/bold]: saves {_hours(rec['saved_gpu_hours'])} "
            f"GPU-hours ({_usd(rec['saved_usd'])}) over the period",
            highlight=False,
        )
        console.print(rec["why"], highlight=False, markup=False)
        console.print(f"nodes: {', '.join(nodes)}{f' and {more} more' if more else ''}", highlight=False,
                      markup=False)  # fmt: skip
        console.print("Karpenter NodePool:", highlight=False)
        console.print(rec["karpenter"].rstrip(), highlight=False, markup=False)
        console.print("cluster-autoscaler:", highlight=False)
        console.print(rec["cluster_autoscaler"].rstrip(), highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(cost_app, name="cost")
