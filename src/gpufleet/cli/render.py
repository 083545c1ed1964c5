"""Tables and panels for the control plane's resources, as `kubectl get` and `describe` print them. Values are
shown as text, never as markup: a PCI id like 00000000:AB:00.0 must not become an emoji."""

from __future__ import annotations

from typing import Any

from rich.panel import Panel
from rich.text import Text

from gpufleet.cli.output import console, make_table
from gpufleet.spec.base import format_duration


def render_nodes(rows: list[dict[str, Any]], wide: bool) -> None:
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
            row += [r["pool"], r["gpu_model"] or "-", r["rack"], r["driver"], r["cuda"], ago(seen)]
        out.append(row)
    console.print(make_table(cols, out))


def render_gpus(rows: list[dict[str, Any]], wide: bool) -> None:
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


def render_jobs(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["NAME", "STATE", "NODES", "RANKS", "STEP", "STEP TIME", "LAST STEP", "RESTARTS", "CAUSE"]
    if wide:
        cols += ["STRAGGLERS", "NODE LIST"]
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
            slow = r.get("stragglers") or []
            row.append(", ".join(f"{x['rank']} ({x['node']}/{x['gpu']} x{x['ratio']})" for x in slow[:3]) or "-")
            row.append(",".join(r["node_list"]))
        out.append(row)
    console.print(make_table(cols, out))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def render_services(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["NAME", "STATE", "REPLICAS", "REQ/S", "P50", "P95", "P99", "SLO P99", "ERRORS"]
    if wide:
        cols += ["GPUS", "WINDOW"]
    out = []
    for r in rows:
        row = [
            r["name"],
            r["state"],
            r["replicas"],
            f"{r['requests_per_s']:g}",
            _seconds(r["p50_s"]),
            _seconds(r["p95_s"]),
            _seconds(r["p99_s"]),
            _seconds(r["slo_p99_s"]),
            "-" if r["error_ratio"] is None else f"{r['errors']} ({r['error_ratio']:.2%})",
        ]
        if wide:
            row += [",".join(r["gpus"]) or "-", f"{r['window_s']:.0f}s"]
        out.append(row)
    console.print(make_table(cols, out))


def render_incidents(rows: list[dict[str, Any]], wide: bool) -> None:
    cols = ["ID", "CAUSE", "ENTITY", "SEVERITY", "STATE", "AGE", "COUNT", "ACTION", "SUMMARY"]
    if wide:
        cols.append("EFFECTS")
    out = []
    for r in rows:
        row = [
            r["id"],
            r["cause"],
            entity(r["entity"]),
            r["severity"],
            r["state"],
            ago(r.get("age_s")),
            r["count"],
            r["action"] or "-",
            r["summary"],
        ]
        if wide:
            row.append("; ".join(r["effects"]) or "-")
        out.append(row)
    console.print(make_table(cols, out))


def ago(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(max(0.0, float(seconds)))


def entity(e: dict[str, Any] | str) -> str:
    if isinstance(e, str):
        return e
    parts = [e.get("kind", ""), e.get("node") or e.get("name", "")]
    if e.get("index") is not None:
        parts.append(str(e["index"]))
    if e.get("name") and e.get("node"):
        parts.append(e["name"])
    return "/".join(str(p) for p in parts if p)


RENDERERS = {
    "nodes": render_nodes,
    "gpus": render_gpus,
    "jobs": render_jobs,
    "services": render_services,
    "incidents": render_incidents,
}


def node_detail(d: dict[str, Any]) -> None:
    console.print(_line("Name", f"{d['name']}   Status: {d['status']}   Agent: {d['agent']}"))
    console.print(_line("Labels", ", ".join(f"{k}={v}" for k, v in d["labels"].items()) or "<none>"))
    gpus = d["gpus"]
    allocatable = sum(1 for g in gpus if g["health"] in ("healthy", "degraded"))
    console.print(_line("Capacity", f"{len(gpus)} GPUs   Allocatable: {allocatable} GPUs"))
    conds = ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in d["conditions"])
    console.print(_line("Conditions", conds))
    sw = d["software"]
    console.print(
        _line(
            "Software",
            f"driver {sw['driver'] or '?'}, CUDA {sw['cuda'] or '?'}, kernel {sw['kernel'] or '?'}"
            + (f", fabric manager {sw['fabric_manager']}" if sw.get("fabric_manager") else ""),
        )
    )
    render_gpus(d["gpus"], wide=False)
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
        render_incidents(d["incidents"], wide=False)
    if d["kernel_log"]:
        console.print(Panel(Text("\n".join(d["kernel_log"])), title="kernel log (recent GPU reports)", expand=False))


def _line(label: str, value: str) -> Text:
    """`Label: value` with the label bold and the value as plain text (no markup, no emoji)."""
    text = Text(f"{label}: ", style="bold")
    text.append(value)
    return text


def clock(t: float | None) -> str:
    """An epoch time as UTC, e.g. 2026-01-01 12:00:00Z."""
    from datetime import UTC, datetime

    return "-" if t is None else datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def incident_detail(d: dict[str, Any]) -> None:
    console.print(_line("Incident", f"{d['id']}   {d['severity']}   {d['state']}"))
    console.print(_line("Cause", f"{d['cause']} on {entity(d['entity'])}"))
    console.print(_line("Summary", d["summary"]))
    console.print(_line("Seen", f"{clock(d['first_seen'])} to {clock(d['last_seen'])} ({d['count']} times)"))
    console.print(_line("Recommended", d["action"] or "-"))
    if d["effects"]:
        console.print(_line("Caused", "; ".join(d["effects"])))
    if d["evidence"]:
        lines = "\n".join(f"{clock(e['time'])} [{e['source']}] {e['text']}" for e in d["evidence"])
        console.print(Panel(Text(lines), title="evidence", expand=False))
    actions = [
        [clock(a["time"]), a["actor"], a["action"], a["target"], a["decision"], "yes" if a["dry_run"] else ""]
        for a in d.get("actions", [])
    ]
    if actions:
        console.print(make_table(["TIME", "ACTOR", "ACTION", "TARGET", "DECISION", "DRY RUN"], actions))


def gpu_detail(g: dict[str, Any]) -> None:
    console.print(_line("GPU", f"{g['node']}/{g['gpu']}   {g['model']}   {g['health']}"))
    console.print(_line("UUID", g["uuid"]))
    console.print(_line("Serial", g["serial"] or "-"))
    console.print(_line("PCI", f"{g['pci_bus_id']}   link {g['pcie']}"))
    console.print(_line("Held by", g["held_by"] or "-"))
    render_gpus([g], wide=True)
