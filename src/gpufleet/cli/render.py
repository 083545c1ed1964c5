"""Tables and panels for the control plane's resources, as `kubectl get` and `describe` print them. Values are
shown as text, never as markup: a PCI id like 00000000:AB:00.0 must not become an emoji."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.panel import Panel
from rich.text import Text

from gpufleet.cli.output import console, make_table

Cells = tuple[list[str], list[list[Any]]]  # a table's column names and its rows of cells


def nodes_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
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
    return cols, out


def gpus_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["NODE", "GPU", "HEALTH", "UTIL", "TEMP", "POWER", "SM MHZ", "MEM USED", "CLOCK EVENTS"]
    if wide:
        cols += ["UUID", "PCI", "PCIE", "DBE", "XID", "MIG"]
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
            row += [r["uuid"], r["pci_bus_id"], r["pcie"], dbe, xid, mig_summary(r)]
        out.append(row)
    return cols, out


def mig_summary(g: dict[str, Any]) -> str:
    """A GPU's MIG layout in one cell, largest instances first: `3g.40gb,2g.20gb,1g.10gb x2`; `off`; `on, empty`;
    `-` for a GPU without MIG (or a control plane that does not say)."""
    mode = g.get("mig_mode")
    if mode is None:
        return "-"
    if not mode:
        return "off"
    counts = Counter(m["profile"] for m in sorted(g.get("mig", []), key=lambda m: (-m["size"], m["start"])))
    return ",".join(p if n == 1 else f"{p} x{n}" for p, n in counts.items()) or "on, empty"


def jobs_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
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
    return cols, out


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def services_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
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
    return cols, out


def incidents_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["ID", "CAUSE", "ENTITY", "SEVERITY", "STATE", "AGE", "COUNT", "ACTION", "SUMMARY"]
    if wide:
        cols += ["EFFECTS", "REFERENCE"]
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
            action_words(r)["action_title"] or "-",
            r["summary"],
        ]
        if wide:
            row.append("; ".join(r["effects"]) or "-")
            row.append(action_words(r)["action_reference"] or "-")
        out.append(row)
    return cols, out


def action_words(r: dict[str, Any]) -> dict[str, Any]:
    """An incident's recommended action in words (title, steps, catalog reference): the control plane's, else the
    catalog's own for a row without them (an older server, an incident file)."""
    if "action_title" in r:
        return {"action_title": r["action_title"], "action_steps": r.get("action_steps") or [],
                "action_reference": r.get("action_reference") or ""}  # fmt: skip
    from gpufleet.catalog.xid_actions import describe_action  # a data file: read only when incidents are shown

    return describe_action(str(r.get("action") or ""), r.get("xid"))


def ago(seconds: float | None) -> str:
    from gpufleet.spec.base import format_duration  # pydantic's models with it: not for every command

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


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def pending_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["NAME", "QUEUE", "GPUS", "WAITING", "REASON", "MESSAGE"]
    if wide:
        cols = ["MANAGER", "NAMESPACE", *cols, "PRIORITY", "SINCE"]
    out = []
    for r in rows:
        waiting = None if r["waiting_s"] is None else round(r["waiting_s"])
        row = [r["name"], r["queue"] or "-", r["gpus"], ago(waiting), r["reason"] or "-"]
        row.append(r["message"] if wide else _clip(r["message"], 80))
        if wide:
            priority = "-" if r["priority"] is None else r["priority"]
            row = [r["manager"], r["namespace"] or "-", *row, priority, clock(r["since"])]
        out.append(row)
    return cols, out


def queues_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["NAME", "GPUS USED", "QUOTA", "USE", "PENDING GPUS", "RUNNING", "PENDING"]
    if wide:
        cols = ["MANAGER", *cols, "BORROWING LIMIT"]
    out = []
    for r in rows:
        row = [
            r["name"],
            r["gpus_used"],
            "-" if r["quota"] is None else r["quota"],
            "-" if r["use_pct"] is None else f"{r['use_pct']:.0f}%",
            r["gpus_pending"],
            r["running"],
            r["pending"],
        ]
        if wide:
            row = [r["manager"], *row, count(r["borrowing_limit"])]
        out.append(row)
    return cols, out


def events_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["ID", "TIME", "NODE", "KIND", "ENTITY", "MESSAGE"]
    return cols, [[e["id"], clock(e["time"]), e["node"], e["kind"], e["entity"], e["message"]] for e in rows]


def audit_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["SEQ", "TIME", "ACTOR", "ACTION", "TARGET", "DECISION"] + (["INCIDENT", "DRY RUN"] if wide else [])
    out = [
        [a["seq"], clock(a["time"]), a["actor"], a["action"], a["target"], a["decision"]]
        + ([a["incident"], "yes" if a["dry_run"] else ""] if wide else [])
        for a in rows
    ]
    return cols, out


def agents_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["AGENT", "NODE", "INCARNATION", "LAST SEQ", "LAST PUSH"]
    return cols, [
        [a["agent"], a["node"], a.get("incarnation") or "-", a["last_seq"], clock(a["last_time"])] for a in rows
    ]


def clocks_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["NODE", "SOURCE", "SYNCED", "OFFSET", "ERROR BOUND", "SENT-RECEIVED"]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:+.3f} ms"

    out = [
        [c["node"], c["source"] or "-", {True: "yes", False: "NO", None: "-"}[c["synchronised"]], ms(c["offset_s"]),
         "-" if c["error_s"] is None else f"{c['error_s'] * 1e3:.3f} ms", ms(c["sent_minus_received_s"])]
        for c in rows
    ]  # fmt: skip
    return cols, out


def links_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["NODE", "HCA", "RAIL", "SWITCH", "STATE", "SPEED", "SYMBOL ERR", "LINK DOWNED", "RCV ERR", "INCIDENT"]
    out = [
        [
            x["node"], f"{x['hca']}/{x['port']}", x["rail"], x["switch"] or "-", x["state"],
            "-" if x["speed_gbps"] is None else f"{x['speed_gbps']:g}G",
            count(x["symbol_errors"]), count(x["link_downed"]), count(x["rcv_errors"]), x["incident"] or "-",
        ]
        for x in rows
    ]  # fmt: skip
    return cols, out


def switches_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    return ["SWITCH", "LINKS", "DOWN", "ERRING"], [[s["name"], s["links"], s["down"], s["erring"]] for s in rows]


def actions_cells(rows: list[dict[str, Any]], wide: bool) -> Cells:
    cols = ["ID", "NODE", "KIND", "GPU", "STATE", "REQUESTED", "DETAIL"] + (["BY", "INCIDENT"] if wide else [])
    out = [
        [a["id"], a["node"], a["kind"], "-" if a["gpu"] is None else a["gpu"], a["state"], clock(a["created"]),
         a["detail"] or a["reason"]]
        + ([a["requested_by"], a["incident"] or "-"] if wide else [])
        for a in rows
    ]  # fmt: skip
    return cols, out


# every resource `gpufleet get` lists: its columns and one row of cells a resource row
TABLES: dict[str, Callable[[list[dict[str, Any]], bool], Cells]] = {
    "nodes": nodes_cells,
    "gpus": gpus_cells,
    "jobs": jobs_cells,
    "services": services_cells,
    "incidents": incidents_cells,
    "events": events_cells,
    "audit": audit_cells,
    "actions": actions_cells,
    "agents": agents_cells,
    "clocks": clocks_cells,
    "links": links_cells,
    "switches": switches_cells,
    "pending": pending_cells,
    "queues": queues_cells,
}


def render_gpus(rows: list[dict[str, Any]], wide: bool) -> None:
    console.print(make_table(*gpus_cells(rows, wide)))


def render_incidents(rows: list[dict[str, Any]], wide: bool) -> None:
    console.print(make_table(*incidents_cells(rows, wide)))


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
    domains = nvlink_domains(d["gpus"])
    if domains:
        console.print(_line("NVLink domain", domains))
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
    affinity = d.get("affinity")
    if affinity and affinity["gpus"]:
        rows = [
            [
                g["gpu"],
                "-" if g["numa_node"] is None else g["numa_node"],
                g["cpus"] or "-",
                ",".join(f"{n} ({g['nic_links'][n]})" for n in g["nearest_nics"]) or "-",
            ]
            for g in affinity["gpus"]
        ]
        console.print(_line("Affinity", f"from {affinity['source']}"))
        console.print(make_table(["GPU", "NUMA", "CPUS", "NEAREST NIC"], rows))
    if d["incidents"]:
        render_incidents(d["incidents"], wide=False)
    if d["kernel_log"]:
        console.print(Panel(Text("\n".join(d["kernel_log"])), title="kernel log (recent GPU reports)", expand=False))


def nvlink_domains(gpus: list[dict[str, Any]]) -> str:
    """The NVLink domains a node's GPUs joined: `cluster <uuid> clique 2 (GPUs 0-3)`, one per domain; "" when no GPU
    joined one (no NVSwitch fabric, or a control plane that does not say)."""
    groups: dict[tuple[str, int], list[int]] = {}
    for g in gpus:
        if g.get("clique_id") is not None:
            groups.setdefault((g.get("cluster_uuid") or "-", g["clique_id"]), []).append(g["gpu"])
    return "; ".join(
        f"cluster {cluster} clique {clique} (GPU{'s' if len(idx) > 1 else ''} {','.join(map(str, idx))})"
        for (cluster, clique), idx in groups.items()
    )


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
    words = action_words(d)
    if not d.get("action"):
        console.print(_line("Recommended", "-"))
    else:
        console.print(_line("Recommended", f"{words['action_title']} ({words['action_reference']})"))
        for number, step in enumerate(words["action_steps"], 1):
            console.print(Text(f"  {number}. {step}"))
    if d["effects"]:
        console.print(_line("Caused", "; ".join(d["effects"])))
    radius = d.get("blast_radius")
    if radius:  # a leaf or spine at fault: who sits under it
        hosts = radius["hosts"]
        console.print(
            _line("Blast radius", f"{radius['tier']} {radius['switch']}: {len(hosts)} hosts ({', '.join(hosts)})")
        )
        for job in radius["jobs"]:
            console.print(Text(f"  job {job['job']}: {job['ranks_there']} ranks on {', '.join(job['nodes'])}"))
    if d["evidence"]:
        lines = "\n".join(f"{clock(e['time'])} [{e['source']}] {e['text']}" for e in d["evidence"])
        console.print(Panel(Text(lines), title="evidence", expand=False))
    actions = [
        [clock(a["time"]), a["actor"], a["action"], a["target"], a["decision"], "yes" if a["dry_run"] else ""]
        for a in d.get("actions", [])
    ]
    if actions:
        console.print(make_table(["TIME", "ACTOR", "ACTION", "TARGET", "DECISION", "DRY RUN"], actions))
    on_node = d.get("node_actions", [])
    if on_node:
        console.print(make_table(*actions_cells(on_node, False)))
        last = next((a for a in reversed(on_node) if a["output"].strip()), None)
        if last is not None:  # the command's own words: what a person checks first
            tail = "\n".join(last["output"].strip().splitlines()[-15:])
            console.print(Panel(Text(tail), title=f"{last['id']} output (its end)", expand=False))


def gpu_detail(g: dict[str, Any]) -> None:
    console.print(_line("GPU", f"{g['node']}/{g['gpu']}   {g['model']}   {g['health']}"))
    console.print(_line("UUID", g["uuid"]))
    console.print(_line("Serial", g["serial"] or "-"))
    console.print(_line("PCI", f"{g['pci_bus_id']}   link {g['pcie']}"))
    console.print(_line("Held by", g["held_by"] or "-"))
    limit = g.get("power_limit_w")
    console.print(_line("Power limit", "-" if limit is None else f"{limit:g} W"))
    console.print(_line("MIG", _mig_state(g)))
    if g.get("clique_id") is not None:
        console.print(_line("NVLink domain", f"cluster {g.get('cluster_uuid') or '-'} clique {g['clique_id']}"))
    render_gpus([g], wide=True)
    ci = lambda m: "-" if m["ci_id"] is None else m["ci_id"]  # noqa: E731
    instances = [
        [m["profile"], m["gi_id"], f"{m['start']}:{m['size']}", ci(m), m["uuid"] or "-"] for m in g.get("mig", [])
    ]
    if instances:
        console.print(make_table(["PROFILE", "GI", "PLACEMENT", "CI", "UUID"], instances))


def _mig_state(g: dict[str, Any]) -> str:
    """MIG mode, and on a MIG GPU how its memory slices are used: `on, 4 instances, slices 0-7 used`."""
    mode = g.get("mig_mode")
    if mode is None:
        return "not supported" if g.get("slices") is None else "unknown"
    if not mode:
        return "off"
    used = {s for m in g.get("mig", []) for s in range(m["start"], m["start"] + m["size"])}
    slices = g.get("slices")
    free = [s for s in range(slices) if s not in used] if slices else []
    count = len(g.get("mig", []))
    text = f"on, {count} instance{'s' if count != 1 else ''}"
    if slices:
        text += f" on {slices} memory slices, " + (f"free: {','.join(map(str, free))}" if free else "none free")
    return text
