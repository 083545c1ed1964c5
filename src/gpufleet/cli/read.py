"""`gpufleet read TOOL FILE`: parse what a node's tools printed (a saved file, or - for stdin) into gpufleet's
records, to check a capture by eye or hand it to a script as JSON. The same parsers the agent runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, make_table

if TYPE_CHECKING:
    from gpufleet.parsers.amd.amd_smi import AmdSmiReport

read_app = typer.Typer(
    help="Parse a saved tool output (nvidia-smi, amd-smi, rocm-smi, hl-smi, infiniband-diags, NHC health log, link "
    "syslog) into records.",
    no_args_is_help=True,
)

FILE_ARG = typer.Argument(..., help="The saved output, or - to read stdin.")
OUTPUT_OPT = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP)


def _text(path: Path) -> tuple[str, str]:
    """The file's text and the name to cite in errors."""
    text, cited = read_input_text(path)
    return text, Path(cited).name


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


@read_app.command("nvidia-smi")
def nvidia_smi_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`nvidia-smi` (the table), `nvidia-smi -q` or `nvidia-smi -q -x`: one record per GPU, told apart by shape."""
    from gpufleet.parsers.nvidia.smi import parse_query
    from gpufleet.parsers.nvidia.smi_table import parse_table

    text, source = _text(file)
    table = re.search(r"^[|+][-=+ ]", text, re.MULTILINE) is not None  # the boxed table; -q is indented text
    report = parse_table(text, source=source) if table else parse_query(text, source=source)

    def render(wide: bool) -> None:
        rows = [
            [
                _cell(g.index), _cell(g.pci), _cell(g.product_name), _cell(g.temp_c), _cell(g.power_draw_w),
                _cell(g.gpu_util_pct), f"{_cell(g.memory_used_mib)} / {_cell(g.memory_total_mib)}",
            ]
            for g in report.gpus
        ]  # fmt: skip
        title = f"{source}: driver {_cell(report.driver_version)}, CUDA {_cell(report.cuda_version)}"
        console.print(make_table(["GPU", "PCI", "PRODUCT", "TEMP C", "POWER W", "UTIL %", "MEMORY MiB"], rows, title))
        for pci, why in report.unreachable.items():
            console.print(f"[red]unreachable[/red] {pci}: {why}", highlight=False)
        for error in report.errors:
            console.print(f"[red]error[/red] {error}", highlight=False)

    emit(report, output, render)


@read_app.command("nvidia-smi-processes")
def nvidia_smi_processes_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """The processes on each GPU: plain `nvidia-smi` (its Processes: table), `--query-compute-apps ... --format=csv`
    or `nvidia-smi pmon`, told apart by shape."""
    from gpufleet.parsers.nvidia.smi_processes import parse_processes

    text, source = _text(file)
    report = parse_processes(text, source=source)

    def render(wide: bool) -> None:
        if report.format == "table":
            rows = [
                [_cell(p.gpu), _cell(p.gpu_instance_id), _cell(p.compute_instance_id), p.pid, p.type, p.name,
                 _cell(p.used_memory_mib)]
                for p in report.processes
            ]  # fmt: skip
            columns = ["GPU", "GI", "CI", "PID", "TYPE", "NAME", "MEMORY MiB"]
        elif report.format == "pmon":
            rows = [
                [s.cycle, s.gpu, s.pid, s.type, _cell(s.sm_util), _cell(s.mem_util), _cell(s.fb_mib), s.name]
                for s in report.pmon
            ]
            columns = ["CYCLE", "GPU", "PID", "TYPE", "SM %", "MEM %", "FB MiB", "NAME"]
        else:
            rows = [[a.gpu_uuid or "-", a.pid, a.name or "-", _cell(a.used_memory_mib)] for a in report.compute_apps]
            columns = ["GPU UUID", "PID", "NAME", "MEMORY MiB"]
        console.print(make_table(columns, rows, f"{source}: {report.format}"))

    emit(report, output, render)


def _amd_rows(report: AmdSmiReport) -> list[list[str]]:
    return [
        [
            _cell(g.index), _cell(g.bdf), _cell(g.market_name), _cell(g.model), _cell(g.partition or None),
            _cell(g.gfx_activity_pct), _cell(g.vram_used_mib if g.vram_used_mib is not None else g.vram_used_pct),
            _cell(g.temp_hotspot_c if g.temp_hotspot_c is not None else g.temp_edge_c), _cell(g.power_w),
            _cell(g.ecc.uncorrectable),
        ]
        for g in report.gpus
    ]  # fmt: skip


_AMD_COLUMNS = ["GPU", "BDF", "NAME", "MODEL", "PARTITION", "GFX %", "VRAM MiB|%", "TEMP C", "POWER W", "ECC UE"]


def _render_amd(report: AmdSmiReport, source: str) -> None:
    title = f"{source}: {report.tool} {report.format}" + (
        f", driver {report.driver_version}" if report.driver_version else ""
    )
    console.print(make_table(_AMD_COLUMNS, _amd_rows(report), title))
    for problem in report.problems:
        console.print(f"[yellow]unread[/yellow] {problem}", highlight=False)


@read_app.command("amd-smi")
def amd_smi_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`amd-smi list`, `static`, `metric` or `partition`, as text or --json (several may be concatenated): one
    record per GPU or partition."""
    from gpufleet.parsers.amd.amd_smi import parse_amd_smi

    text, source = _text(file)
    report = parse_amd_smi(text, source=source)
    emit(report, output, lambda wide: _render_amd(report, source))


@read_app.command("rocm-smi")
def rocm_smi_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """Plain `rocm-smi` (Concise Info, any release), `rocm-smi -a --json` or `rocm-smi --showmetrics`."""
    from gpufleet.parsers.amd.rocm_smi import parse_rocm_smi

    text, source = _text(file)
    report = parse_rocm_smi(text, source=source)
    emit(report, output, lambda wide: _render_amd(report, source))


@read_app.command("hl-smi")
def hl_smi_cmd(
    file: Path = FILE_ARG,
    fields: str | None = typer.Option(
        None, "--fields", help="With `-Q ... -f csv,noheader` output: the -Q field list, in order (index,bus_id,...)."
    ),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """Plain `hl-smi`, `hl-smi -q` / `-L`, or `hl-smi -Q <fields> -f csv`: one record per Gaudi device (AIP)."""
    from gpufleet.parsers.gaudi.hl_smi import parse_hl_smi

    text, source = _text(file)
    report = parse_hl_smi(text, source=source, fields=fields.split(",") if fields else None)

    def render(wide: bool) -> None:
        rows = [
            [
                _cell(a.index), _cell(a.module_id), _cell(a.bus_id), _cell(a.product_name), _cell(a.model),
                _cell(a.temp_c), _cell(a.power_w), _cell(a.utilization_pct),
                f"{_cell(a.memory_used_mib)} / {_cell(a.memory_total_mib)}", _cell(a.replaced_rows_dbe),
            ]
            for a in report.aips
        ]  # fmt: skip
        title = f"{source}: hl-smi {report.format}" + (
            f", driver {report.driver_version}" if report.driver_version else ""
        )
        columns = ["AIP", "MODULE", "BUS", "NAME", "MODEL", "TEMP C", "POWER W", "UTIL %", "MEMORY MiB", "ROWS DBE"]
        console.print(make_table(columns, rows, title))
        for problem in report.problems:
            console.print(f"[yellow]unread[/yellow] {problem}", highlight=False)

    emit(report, output, render)


@read_app.command("perfquery")
def perfquery_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`perfquery` or `perfquery -x`: the port counters, by the PMA names the catalog uses."""
    from gpufleet.parsers.infiniband.diags import parse_perfquery

    text, source = _text(file)
    ports = parse_perfquery(text, source=source)

    def render(wide: bool) -> None:
        rows = [[p.lid, p.port, "yes" if p.extended else "no", k, v] for p in ports for k, v in p.counters.items()]
        console.print(make_table(["LID", "PORT", "EXTENDED", "COUNTER", "VALUE"], rows, source))

    emit(ports, output, render)


@read_app.command("ibqueryerrors")
def ibqueryerrors_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`ibqueryerrors`: the ports whose error counters are over threshold."""
    from gpufleet.parsers.infiniband.diags import parse_ibqueryerrors

    text, source = _text(file)
    report = parse_ibqueryerrors(text, source=source)

    def render(wide: bool) -> None:
        rows = [
            [p.node, p.guid, "ALL" if p.port is None else p.port, ", ".join(f"{k}={v}" for k, v in p.counters.items())]
            for p in report.ports
        ]
        console.print(make_table(["NODE", "GUID", "PORT", "ERRORS"], rows, source))
        console.print(f"bad ports: {_cell(report.bad_ports)} of {_cell(report.ports_checked)} checked")

    emit(report, output, render)


@read_app.command("iblinkinfo")
def iblinkinfo_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`iblinkinfo`: every port with its state, width, speed and the far end."""
    from gpufleet.parsers.infiniband.diags import parse_iblinkinfo

    text, source = _text(file)
    links = parse_iblinkinfo(text, source=source)

    def render(wide: bool) -> None:
        rows = [
            [
                link.node, link.port, link.state, link.phys_state, _cell(link.width), _cell(link.speed_gbps),
                f"{link.remote_name} [{_cell(link.remote_port)}]" if link.remote_lid is not None else "-", link.note,
            ]
            for link in links
        ]  # fmt: skip
        console.print(
            make_table(["NODE", "PORT", "STATE", "PHYSICAL", "WIDTH", "GBPS", "REMOTE", "NOTE"], rows, source)
        )

    emit(links, output, render)


@read_app.command("ibnetdiscover")
def ibnetdiscover_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """`ibnetdiscover`: the fabric's nodes (switches and HCAs) and the links between them."""
    from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover

    text, source = _text(file)
    fabric = parse_ibnetdiscover(text, source=source)

    def render(wide: bool) -> None:
        rows = [[n.id, n.type, n.ports, n.description, _cell(n.lid)] for n in fabric.nodes.values()]
        console.print(make_table(["ID", "TYPE", "PORTS", "DESCRIPTION", "LID"], rows, source))
        console.print(f"{len(fabric.links)} links")

    emit(fabric, output, render)


@read_app.command("link-events")
def link_events_cmd(
    file: Path = FILE_ARG,
    year: int | None = typer.Option(None, "--year", help="Year of syslog stamps that carry none (default: this year)."),
    output: OutputFormat = OUTPUT_OPT,
) -> None:
    """A syslog or kernel log: IB/RoCE link down and up events, and the flaps (downs) per interface."""
    from gpufleet.parsers.infiniband.diags import count_flaps, parse_link_events

    text, _ = _text(file)
    events = parse_link_events(text, year=year)
    data: dict[str, Any] = {"flaps": count_flaps(events), "events": events}

    def render(wide: bool) -> None:
        rows = [[e.line, _cell(e.wall_time), _cell(e.host), e.interface, e.state] for e in events]
        console.print(make_table(["LINE", "TIME", "HOST", "INTERFACE", "STATE"], rows))
        for interface, downs in sorted(data["flaps"].items()):
            console.print(f"{interface}: {downs} flap(s)")

    emit(data, output, render)


@read_app.command("nhc")
def nhc_cmd(file: Path = FILE_ARG, output: OutputFormat = OUTPUT_OPT) -> None:
    """An NHC / Azure HPC node health check `.health.log`: each node's verdict, and the Xids a failed check quotes."""
    from gpufleet.parsers.nhc import parse_health_log

    text, source = _text(file)
    nodes = parse_health_log(text, source=source)

    def render(wide: bool) -> None:
        rows = [
            [n.node, "Healthy" if n.healthy else "ERROR", _cell(n.check), n.message,
             ", ".join(str(e.xid) for e in n.kernel_events if e.xid is not None)]
            for n in nodes
        ]  # fmt: skip
        console.print(make_table(["NODE", "STATUS", "CHECK", "MESSAGE", "XIDS"], rows, source))

    emit(nodes, output, render)


def register(app: typer.Typer) -> None:
    app.add_typer(read_app, name="read")
