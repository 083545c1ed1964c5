"""`gpufleet xid`: classify kernel-log GPU faults and explain Xid codes."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from gpufleet.catalog import load_xid_catalog
from gpufleet.catalog._files import read_text
from gpufleet.catalog.xid import load_nvl5_decode
from gpufleet.catalog.xid_actions import describe_action
from gpufleet.cli.inputs import open_input
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, err_console, make_table
from gpufleet.errors import NotFoundError, UserError
from gpufleet.health.xid_policy import (
    XidPolicy,
    classify,
    default_policy_text,
    load_policy,
    recovery_verdicts,
)
from gpufleet.model.kernel import NVL5_XIDS, RECOVERY_XID, KernelEvent
from gpufleet.parsers.kernel.kmsg import KmsgScan
from gpufleet.sources.node.kernel_log import KernelLogFollower, dmesg_events
from gpufleet.triage.paste import Paste
from gpufleet.triage.readers.kernel import kernel_events, streaming_parser
from gpufleet.triage.run import kernel_log_lines

sub = typer.Typer(
    help="Kernel-log GPU faults: classify Xid/SXid/fallen-off-the-bus lines, explain Xid codes.",
    no_args_is_help=True,
)

PEER_COLUMNS = (
    ("nvsentinel_action", "NVIDIA NVSentinel action"),
    ("nvsentinel_fatality", "NVIDIA NVSentinel severity"),
    ("dcgm_healthwatch", "DCGM health watch"),
    ("gpud_event_type", "leptonai/gpud event type"),
    ("gpud_repair_actions", "leptonai/gpud repair actions"),
    ("gcm_class", "facebookresearch/gcm class"),
    ("k8s_device_plugin", "k8s-device-plugin"),
    ("aznhc_checked", "Azure aznhc fails the node"),
    ("aws_eks_nma_wellknown", "AWS EKS node-monitoring-agent well-known"),
    ("dcgm_exporter_text", "dcgm-exporter name"),
)


def _table(columns: list[str], rows: list[list[Any]], title: str | None = None) -> Table:
    """A table of plain-text cells: log text must not be read as Rich markup or emoji codes (`:ab:`)."""
    table = make_table(columns, [], title=title)
    for row in rows:
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    return table


def _time_text(event: KernelEvent) -> str | float | None:
    value = event.time
    return value.isoformat() if isinstance(value, datetime) else value


def _detail(event: KernelEvent) -> dict[str, Any]:
    """The decoded parts of the line, for programs (only what this event has)."""
    detail: dict[str, Any] = {
        "gpu_uuid": event.gpu_uuid,
        "gpu_instance": event.gpu_instance,
        "compute_instance": event.compute_instance,
        "pci_device_id": event.pci_device_id,
        "gpc_tpc_sm": list(event.gpc_tpc_sm) if event.gpc_tpc_sm else None,
    }
    if event.nvl5 is not None:
        detail["nvlink5"] = {
            "unit": event.nvl5.unit,
            "driver_says_fatal": event.nvl5.fatal,
            "link": event.nvl5.link,
            "intrinfo": f"{event.nvl5.intrinfo:#010x}",
            "error_status": f"{event.nvl5.error_status:#010x}",
        }
    if event.recovery is not None:
        detail["recovery_action"] = {
            "from": f"{event.recovery.from_code:#x} ({event.recovery.from_name})",
            "to": f"{event.recovery.to_code:#x} ({event.recovery.to_name})",
        }
    if event.sxid_detail is not None:
        detail["nvswitch"] = {
            "switch": event.sxid_detail.switch,
            "link": event.sxid_detail.link,
            "continues_line": event.sxid_detail.continues_line,
        }
    return {key: value for key, value in detail.items() if value is not None}


def event_record(file: str, event: KernelEvent, policy: XidPolicy) -> dict[str, Any]:
    verdict = classify(event, policy)
    return {
        "file": file,
        "line": event.line,
        "kind": event.kind,
        "xid": event.xid,
        "sxid": event.sxid,
        "pci": event.pci,
        "severity": verdict.severity.value,
        "action": verdict.action.value,
        "investigatory": verdict.investigatory,
        "bucket": verdict.bucket,
        "rule": verdict.rule,
        "root_xid": event.root_xid,
        "known": event.known,
        "time": _time_text(event),
        "host": event.host,
        "pid": event.pid,
        "process": event.process,
        "message": event.message,
        "raw": event.raw,
        "reason": verdict.reason,
        "detail": _detail(event),
    }


def _scan_file(name: str, host: str | None, year: int | None) -> tuple[str, KmsgScan]:
    """A kernel log read as triage reads one: streamed, pasted-text hazards taken off, and past the first lines
    only the lines that can hold a GPU report parsed."""
    with open_input(name) as (stream, cited):
        parser = streaming_parser(host=host, year=year)
        events = list(kernel_events(kernel_log_lines(stream, Paste()), parser))
    if parser.rejected_unlisted:
        err_console.print(f"warning: {cited}: {parser.rejected_unlisted} more unreadable GPU lines not listed")
    return cited, KmsgScan(sorted(events, key=lambda e: e.line), parser.scan.rejected)


@sub.command("classify")
def classify_cmd(
    files: list[str] = typer.Argument(
        None, help="Kernel log files (dmesg, syslog, journalctl, /dev/kmsg dumps); '-' reads stdin."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
    policy_file: Path | None = typer.Option(None, "--policy", help="Policy YAML merged over the default policy."),
    from_dmesg: bool = typer.Option(False, "--dmesg", help="Read this machine's kernel log by running dmesg."),
    host: str | None = typer.Option(None, "--host", help="Host name for lines whose framing carries none."),
    year: int | None = typer.Option(None, "--year", help="Year for syslog stamps that carry none (`Jun  5 10:11:12`)."),
) -> None:
    """Print one record per GPU fault event: Xid, NVSwitch SXid, GPU fallen off the bus, reset required.

    Severity (FATAL/NONFATAL) and action (NVIDIA's buckets: IGNORE, RESTART_APP, RESET_GPU, RESTART_BM, ...)
    come from the Xid catalog through the policy; lines that look like fault reports but cannot be read are
    listed on stderr.
    """
    policy = load_policy(policy_file)
    scans: list[tuple[str, KmsgScan]] = []
    if from_dmesg:
        scans.append(("dmesg", dmesg_events()))
    for name in files or []:
        scans.append(_scan_file(name, host, year))
    if not scans:
        raise UserError("nothing to classify", fix="give one or more log files, '-' for stdin, or --dmesg")
    records = [event_record(name, event, policy) for name, scan in scans for event in scan.events]
    for name, scan in scans:
        for bad in scan.rejected:
            err_console.print(f"warning: {name}:{bad.line}: {bad.reason}", highlight=False, soft_wrap=True)

    def render(wide: bool) -> None:
        columns = ["FILE:LINE", "KIND", "CODE", "PCI", "SEVERITY", "ACTION"]
        if wide:
            columns += ["ROOT", "TIME", "HOST", "PROCESS", "RULE"]
        columns.append("MESSAGE")
        rows = []
        for rec in records:
            code = rec["xid"] if rec["kind"] == "xid" else rec["sxid"]
            row = [
                f"{Path(rec['file']).name}:{rec['line']}",
                rec["kind"],
                code,
                rec["pci"],
                rec["severity"],
                rec["action"],
            ]
            if wide:
                row += [rec["root_xid"], rec["time"], rec["host"], rec["process"], rec["rule"]]
            message = rec["message"] if wide or len(rec["message"]) <= 70 else rec["message"][:67] + "..."
            row.append(message if rec["known"] else f"[unknown Xid] {message}")
            rows.append(row)
        console.print(_table(columns, rows))
        if not records:
            console.print("no GPU fault events found")
            return
        by_action: dict[str, int] = {}
        for rec in records:
            key = f"{rec['severity']} {rec['action']}"
            by_action[key] = by_action.get(key, 0) + 1
        summary = ", ".join(f"{count} {key}" for key, count in sorted(by_action.items()))
        console.print(Text(f"{len(records)} events: {summary}"))

    emit(records, output, render)


def explain_record(code: int, policy: XidPolicy) -> dict[str, Any]:
    catalog = load_xid_catalog()
    info = catalog.get(code)
    if info is None:
        raise NotFoundError(f"Xid {code} is not in the catalog (1-{max(catalog)})", fix="check the code")
    raw = next(r for r in csv.DictReader(io.StringIO(read_text("xid_catalog.csv"))) if int(r["code"]) == code)
    event = KernelEvent(kind="xid", line=0, raw="", message="", xid=code)
    verdict = classify(event, policy)
    record: dict[str, Any] = {
        "code": code,
        "mnemonic": info.mnemonic,
        "description": info.description,
        "nvidia_immediate_action": info.nvidia_immediate_action or None,
        "nvidia_investigatory_action": info.nvidia_investigatory_action or None,
        "peers": {label: (raw.get(column) or None) for column, label in PEER_COLUMNS},
        "gpufleet": {
            "severity": verdict.severity.value,
            "action": verdict.action.value,
            "investigatory": verdict.investigatory,
            "rule": verdict.rule,
            "reason": verdict.reason,
            **describe_action(verdict.action.value, code),  # the action in words, with its catalog reference
        },
    }
    if code in NVL5_XIDS:
        record["nvlink5_decode"] = [
            {
                "unit": r.unit,
                "error_status": f"{r.error_status:#010x}",
                "severity": r.severity,
                "action": r.resolution,
                "investigatory": r.investigatory,
            }
            for r in load_nvl5_decode()
            if r.xid == code
        ]
        record["gpufleet"]["note"] = "the line's unit and status words decide; the table below is what applies"
    if code == RECOVERY_XID:  # each announced state's verdict, as the policy gives it (severity included)
        record["recovery_actions"] = {
            (f"{state:#x}" if state is not None else "other"): {
                "severity": verdict.severity.value,
                "action": verdict.action.value,
                "reason": verdict.reason,
            }
            for state, verdict in recovery_verdicts(policy)
        }
    return record


@sub.command("explain")
def explain_cmd(
    code: int = typer.Argument(..., help="Xid code, e.g. 79."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
    policy_file: Path | None = typer.Option(None, "--policy", help="Policy YAML merged over the default policy."),
) -> None:
    """Show the catalog entry for an Xid and what NVIDIA, peer tools and gpufleet's policy do with it."""
    record = explain_record(code, load_policy(policy_file))

    def render(wide: bool) -> None:
        console.print(f"[bold]Xid {code}[/bold] {record['mnemonic']}: {record['description']}", highlight=False)
        ours = record["gpufleet"]
        rows = [
            ["NVIDIA catalog", record["nvidia_immediate_action"], record["nvidia_investigatory_action"]],
            [
                "gpufleet policy",
                f"{ours['action']} ({ours['severity']})",
                f"{ours['rule']}: {ours['reason']}",
            ],
        ]
        rows += [[label, value, ""] for label, value in record["peers"].items()]
        console.print(_table(["WHO", "SAYS", "DETAIL"], rows))
        if ours["action_steps"]:
            console.print(
                Text.assemble(("What to do: ", "bold"), f"{ours['action_title']} ({ours['action_reference']})")
            )
            for number, step in enumerate(ours["action_steps"], 1):
                console.print(Text(f"  {number}. {step}"))
        if "nvlink5_decode" in record:
            decode = [
                [d["unit"], d["error_status"], d["severity"], d["action"], d["investigatory"]]
                for d in record["nvlink5_decode"]
            ]
            console.print(
                _table(
                    ["UNIT", "STATUS", "SEVERITY", "ACTION", "INVESTIGATORY"],
                    decode,
                    title="NVLink5 decode (NVIDIA)",
                )
            )
        if "recovery_actions" in record:
            rec = [[state, v["severity"], v["action"], v["reason"]] for state, v in record["recovery_actions"].items()]
            console.print(_table(["ANNOUNCED", "SEVERITY", "ACTION", "WHY"], rec, title="Xid 154 recovery actions"))

    emit(record, output, render)


@sub.command("watch")
def watch_cmd(
    path: str = typer.Argument("/dev/kmsg", help="A log file to follow (like tail -F), or /dev/kmsg."),
    policy_file: Path | None = typer.Option(None, "--policy", help="Policy YAML merged over the default policy."),
    from_start: bool = typer.Option(False, "--from-start", help="Read what the file already holds first."),
    once: bool = typer.Option(False, "--once", help="Stop at the current end instead of waiting for more."),
    json_lines: bool = typer.Option(False, "--json", help="One JSON record per line instead of text."),
    host: str | None = typer.Option(None, "--host", help="Host name for lines whose framing carries none."),
) -> None:
    """Follow a kernel log and print each GPU fault event as it arrives (Ctrl-C stops)."""
    policy = load_policy(policy_file)

    def stop() -> bool:
        return once

    follower = KernelLogFollower(path, from_start=from_start or once, host=host)
    if not follower.kmsg and not Path(path).exists():
        if once:
            raise NotFoundError(f"{path}: no such file", fix="check the path (without --once, watch waits for it)")
        err_console.print(f"waiting for {path} to appear (Ctrl-C stops)")
    for event in follower.events(stop):
        rec = event_record(path, event, policy)
        if json_lines:
            sys.stdout.write(json.dumps(rec) + "\n")
        else:
            code = rec["xid"] if rec["kind"] == "xid" else rec["sxid"]
            fields = (rec["time"], rec["host"], rec["pci"], rec["kind"], code, rec["severity"], rec["action"])
            head = " ".join("-" if value is None else str(value) for value in fields)
            sys.stdout.write(f"{head} {rec['message']}\n")
        sys.stdout.flush()


@sub.command("policy")
def policy_cmd() -> None:
    """Print the default policy document (the choices and why), a starting point for --policy files."""
    sys.stdout.write(default_policy_text())


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="xid")
