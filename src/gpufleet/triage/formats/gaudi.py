"""Intel Gaudi's hl-smi: the boxed table, -q / -L, and -Q ... -f csv."""

from __future__ import annotations

from gpufleet.parsers.gaudi.hl_smi import HlSmiReport, parse_hl_smi
from gpufleet.triage.formats.registry import Format, Option, Table, View, cell
from gpufleet.triage.readers.vendor_smi import read_hl_smi


def _parse(text: str, source: str, fields: str | None = None) -> HlSmiReport:
    return parse_hl_smi(text, source=source, fields=fields.split(",") if fields else None)


def _view(report: HlSmiReport, source: str) -> View:
    rows = [
        [
            cell(a.index), cell(a.module_id), cell(a.bus_id), cell(a.product_name), cell(a.model),
            cell(a.temp_c), cell(a.power_w), cell(a.utilization_pct),
            f"{cell(a.memory_used_mib)} / {cell(a.memory_total_mib)}", cell(a.replaced_rows_dbe),
        ]
        for a in report.aips
    ]  # fmt: skip
    title = f"{source}: hl-smi {report.format}" + (f", driver {report.driver_version}" if report.driver_version else "")
    columns = ("AIP", "MODULE", "BUS", "NAME", "MODEL", "TEMP C", "POWER W", "UTIL %", "MEMORY MiB", "ROWS DBE")
    return View((Table(columns, rows, title),), tuple(f"[yellow]unread[/yellow] {p}" for p in report.problems))


_CSV_FIELD = r"[\w.]+(?: \[[^\]]*\])?"

HL_SMI = Format(
    name="hl-smi",
    summary="Plain `hl-smi`, `hl-smi -q` / `-L` or `hl-smi -Q <fields> -f csv`: one record per Gaudi device (AIP)",
    signs=(
        (r"^\|\s*HL-SMI Version:", 10),
        (r"^\|\s*AIP\s+Name\s+Persistence-M", 10),
        (r"AIP-Util", 4),
        (r"^=+ HL-SMI LOG =+", 10),
        (r"^Attached AIPs\s+:", 8),
        (r"^\[\d+\]\s+AIP\s+\(accel\d+\)", 8),
        # -Q CSV's header: field names of its own (module_id, temperature.aip, utilization.aip, ...)
        (rf"^(?:{_CSV_FIELD}, )*(?:module_id|\w+\.aip)(?: \[[^\]]*\])?(?:, {_CSV_FIELD})*\s*$", 8),
    ),
    parse=_parse,
    judge=read_hl_smi,
    render=_view,
    options=(
        Option("fields", str, "With `-Q ... -f csv,noheader` output: the -Q field list, in order (index,bus_id,...)."),
    ),
)
