"""A node's BMC through ipmitool: its sensor list (`sdr`, `sdr elist`, `sdr type T`) and its event log (`sel
list`, `sel elist`)."""

from __future__ import annotations

from gpufleet.parsers.bmc.ipmitool import SdrReport, SelReport, parse_sdr, parse_sel
from gpufleet.triage.formats.registry import Format, Option, Table, View, cell
from gpufleet.triage.readers.bmc import read_sdr, read_sel


def _parse_sdr(text: str, source: str, sensor_type: str | None = None) -> SdrReport:
    return parse_sdr(text, source=source, sensor_type=sensor_type)


def _sdr_view(report: SdrReport, source: str) -> View:
    rows = [
        [s.name, cell(f"{s.number:02X}h" if s.number is not None else None), s.status, s.kind,
         cell(f"{s.reading:g} {s.unit}" if s.reading is not None else None), ", ".join(s.states) or "-"]
        for s in report.sensors
    ]  # fmt: skip
    table = Table(("SENSOR", "ID", "STATUS", "KIND", "READING", "STATES"), rows, f"{source}: ipmitool sdr")
    return View((table,), tuple(f"[yellow]unread[/yellow] {p}" for p in report.problems))


def _sel_view(report: SelReport, source: str) -> View:
    rows = [
        [f"{e.record:x}", cell(e.logged if e.logged else (f"pre-init +{e.pre_init}s" if e.pre_init else None)),
         e.sensor_type or "-", e.sensor or "-", e.event, "asserted" if e.asserted else "deasserted", e.detail or "-"]
        for e in report.entries
    ]  # fmt: skip
    table = Table(("ID", "LOGGED", "TYPE", "SENSOR", "EVENT", "DIRECTION", "DETAIL"), rows, f"{source}: ipmitool sel")
    return View((table,), tuple(f"[yellow]unread[/yellow] {p}" for p in report.problems))


_STATUS = r"(?:ok|ns|nc|cr|nr)"
_UNITS = r"(?:RPM|degrees [CFK]|Watts|Volts|Amps|percent)"

IPMITOOL_SDR = Format(
    name="ipmitool-sdr",
    summary="`ipmitool sdr` / `sdr elist` / `sdr type Fan`: the BMC's sensors (fans, power supplies, temperatures)",
    signs=(
        (rf"^[^|]{{1,30}}\|\s-?\d+(?:\.\d+)? {_UNITS}\s*\|\s{_STATUS}\s*$", 6),
        (rf"^[^|]{{1,30}}\|\s(?:0x[0-9a-f]{{2}}|no reading|disabled)\s+\|\s{_STATUS}\s*$", 3),
        (r"^[^|]{1,30}\|\s[0-9A-F]{2}h\s\|\s(?:ok|ns|lnc|unc|lcr|ucr|lnr|unr)\s*\|\s*\d+\.\d+\s*\|", 8),
    ),
    parse=_parse_sdr,
    judge=read_sdr,
    render=_sdr_view,
    options=(Option("sensor_type", str, "The type `sdr type` listed (Fan, Temperature, Power Supply)."),),
)
IPMITOOL_SEL = Format(
    name="ipmitool-sel",
    summary="`ipmitool sel list` / `sel elist`: the BMC's System Event Log",
    signs=(
        (r"^\s*[0-9a-f]{1,4} \| (?:\d\d/\d\d/\d{2,4}|\s?Pre-Init\s?) \|", 4),
        (r"\| (?:Asserted|Deasserted)\s*(?:\||$)", 4),
    ),
    parse=parse_sel,
    judge=read_sel,
    render=_sel_view,
)
