"""`hl-smi` (the boxed table), `hl-smi -q` / `-L` and `hl-smi -Q <fields> -f csv`, into per-AIP records.

The table (docs.habana.ai "System Management Interface Tool") is nvidia-smi's shape: a version header, then two
lines per AIP between `|---+---|` rules: `index name persistence | bus-id disp | uncorrected`, then
`fan temp perf draw / cap | used / total | AIP-Util compute-mode`. 1.20 and later add a `Nic Driver Version` line
and title the third column `Volatile Uncor-Events`; Gaudi 1 releases print memory as `Mib`. The `Compute Processes`
table after the AIPs (`AIP PID Type Process-name Usage`, N/A everywhere on an idle device) is read row by row into
`processes`; a line of it that does not start with an AIP index is the rest of the process name above it, which a
long command line wraps onto.

`-q` prints `Attached AIPs : N` (kept as `attached`), then an `[i] AIP (accelN) <bdf>` block per AIP: keys and
values split by " : ", headings without one (`PCI`, `Temperature`, `Power Readings (54V PSU)`), and a few headings
whose value sits alone on the next line
(`Fan Speed` then `: N/A`). Gaudi 2 reports two power rails (54 V and 12 V); the table's Pwr:Usage is their sum,
so `power_w` sums every `Power Readings` block. The on-chip temperature is the hottest `On Chip N` sensor (not
the `On Chip TD` thermal diodes), the memory temperature the hottest `HBM N`.

`-Q` CSV has a header naming the fields (`memory.used [MiB]`) unless `noheader` was given, and values carrying
units (`768 MiB`, `36 C`) unless `nounits` was; without a header the fields must be passed in.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.amd_gaudi_values import (
    add_problem,
    catalog_model,
    find,
    indented_tree,
    integer,
    missing,
    number,
    split_number,
    text_of,
    to_mib,
)

FIX = "pass the unedited output of plain `hl-smi`, `hl-smi -q` or `hl-smi -Q <fields> -f csv`"
_AIP = re.compile(r"^\[(?P<index>\d+)\]\s+AIP\s+\((?P<device>[^)]*)\)\s+(?P<bdf>\S+)\s*$")
_VERSION = re.compile(r"^\|\s*(?P<key>HL-SMI Version|Driver Version|Nic Driver Version):\s*(?P<value>\S+)\s*\|")
_MEMORY = re.compile(r"^(?P<used>\S+)\s*/\s*(?P<total>\S+)$")
_POWER = re.compile(r"^(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<draw>\S+)\s*/\s*(?P<cap>\S+)$")
_SENSOR = re.compile(r"^\[\s*\d+\]\s+(?P<name>.+?)$")
_PROCESS = re.compile(
    r"^(?P<aip>\d+)\s+(?P<pid>\d+|N/A)\s+(?P<type>\S+)\s+(?P<name>.*?)\s+(?P<usage>N/A|\d+(?:\.\d+)?\s*[KMGT]i?B|\S+)$"
)


@dataclass
class AipRecord:
    """One Gaudi device (AIP) as hl-smi reports it. Fields not reported are None."""

    index: int | None = None
    module_id: int | None = None  # the OAM slot; differs from the index
    device: str | None = None  # accelN
    bus_id: str | None = None  # as printed, 0000:19:00.0
    pci: str | None = None  # normalised domain:bus:device
    product_name: str | None = None  # HL-225, HL-325L
    model: str | None = None  # the catalog model (gaudi2), when the name is known to it
    serial: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    status: str | None = None  # Module status: Operational
    persistence_mode: str | None = None
    performance_state: str | None = None
    fan: str | None = None
    temp_c: float | None = None  # on chip
    temp_hbm_c: float | None = None
    temperatures_c: dict[str, float] = field(default_factory=dict)  # every sensor -q lists
    power_w: float | None = None
    power_cap_w: float | None = None
    power_rails_w: dict[str, float] = field(default_factory=dict)  # "54V PSU": 50.0
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    memory_free_mib: float | None = None
    utilization_pct: float | None = None
    compute_mode: str | None = None
    uncorrected_events: int | None = None  # the table's "Volatile Uncorr. ECC" / "Volatile Uncor-Events"
    ecc_errors: dict[str, int] = field(default_factory=dict)  # -Q ecc.errors.* fields, by field name
    pcie_link_speed: str | None = None  # 16GT/s
    pcie_link_speed_max: str | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    clocks_mhz: dict[str, float] = field(default_factory=dict)  # soc, tpc, ...
    throttle_reasons: dict[str, bool] = field(default_factory=dict)  # "Thermal Slowdown": False
    nic_count: int | None = None  # MAC addresses -q lists (the on-chip RoCE ports)
    replaced_rows_sbe: int | None = None
    replaced_rows_dbe: int | None = None
    replaced_rows_pending: bool | None = None
    firmware: dict[str, str] = field(default_factory=dict)


@dataclass
class HlSmiReport:
    aips: list[AipRecord]
    format: str  # table, query, csv
    hl_smi_version: str | None = None
    driver_version: str | None = None
    nic_driver_version: str | None = None
    attached: int | None = None  # -q's "Attached AIPs"
    processes: list[AipProcess] = field(default_factory=list)  # the table's Compute Processes rows
    problems: list[str] = field(default_factory=list)


@dataclass
class AipProcess:
    aip: int
    pid: int | None  # None: N/A (no process on the AIP)
    type: str | None
    name: str | None
    usage: str | None  # AIP memory as printed


def parse_hl_smi(text: str, source: str = "hl-smi", fields: Sequence[str] | None = None) -> HlSmiReport:
    """The table, the -q report or -Q CSV, told apart by shape. `fields` names the CSV columns when the output
    was printed with `noheader`."""
    stripped = text.strip()
    if not stripped:
        raise ParseError(f"{source} is empty", fix=FIX)
    lines = stripped.splitlines()
    if any(_AIP.match(line.strip()) for line in lines):
        report = _query(text, source)
    elif lines[0].startswith(("+", "|")):
        report = _table(lines, source)
    else:
        report = parse_hl_smi_csv(text, source, fields)
    for aip in report.aips:
        aip.pci = normalise_pci(aip.bus_id) if aip.bus_id else None
        spec = catalog_model(aip.product_name)
        aip.model = spec.name if spec else None
        aip.driver_version = aip.driver_version or report.driver_version
    return report


def _cells(line: str) -> list[str] | None:
    line = line.rstrip()
    if not line.startswith("|") or not line.endswith("|"):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def _table(lines: list[str], source: str) -> HlSmiReport:
    report = HlSmiReport(aips=[], format="table")
    pending: AipRecord | None = None
    for number_, line in enumerate(lines, 1):
        version = _VERSION.match(line.strip())
        if version:
            name = {"HL-SMI Version": "hl_smi_version", "Driver Version": "driver_version"}.get(
                version.group("key"), "nic_driver_version"
            )
            setattr(report, name, version.group("value"))
            continue
        if "Compute Processes" in line:
            _processes(lines[number_:], report)
            break
        cells = _cells(line)
        if cells is None or len(cells) != 3 or all(set(c) <= {"-", "=", "+"} for c in cells):
            continue
        if cells[0].startswith(("AIP ", "Fan ")):
            continue  # the column titles
        if pending is None:
            pending = _first_row(cells, number_, source)
            continue
        _second_row(pending, cells, number_, source, report.problems)
        report.aips.append(pending)
        pending = None
    if pending is not None:
        raise ParseError(f"{source}: AIP {pending.index} has its first row but not its second", fix=FIX)
    if not report.aips:
        raise ParseError(f"{source}: the table lists no AIP", fix=FIX)
    return report


def _processes(lines: list[str], report: HlSmiReport) -> None:
    for line in lines:
        cells = _cells(line)
        if cells is None or len(cells) != 1 or set(cells[0]) <= {"-", "=", "+"} or cells[0].startswith("AIP "):
            continue
        text = cells[0]
        row = _PROCESS.match(text)
        if row is not None:
            pid = integer(row.group("pid"))
            report.processes.append(
                AipProcess(int(row.group("aip")), pid, text_of(row.group("type")), text_of(row.group("name")),
                           text_of(row.group("usage")))
            )  # fmt: skip
        elif report.processes and text and not text.startswith(("No ", "Usage")):
            last = report.processes[-1]  # a wrapped process name goes on here
            last.name = f"{last.name or ''}{text}"


def _first_row(cells: list[str], number_: int, source: str) -> AipRecord:
    tokens = cells[0].split()
    if len(tokens) < 3 or not tokens[0].isdigit():
        raise ParseError(f"{source}:{number_}: not an AIP's first row: {cells[0][:70]!r}", fix=FIX)
    bus = cells[1].split()
    return AipRecord(
        index=int(tokens[0]),
        product_name=" ".join(tokens[1:-1]),
        persistence_mode=text_of(tokens[-1]),
        bus_id=bus[0] if bus else None,
        uncorrected_events=integer(cells[2]),
    )


def _second_row(aip: AipRecord, cells: list[str], number_: int, source: str, problems: list[str]) -> None:
    power = _POWER.match(cells[0])
    memory = _MEMORY.match(cells[1])
    if power is None or memory is None:
        raise ParseError(f"{source}:{number_}: not an AIP's second row: {' | '.join(cells)[:70]!r}", fix=FIX)
    aip.fan = text_of(power.group("fan"))
    aip.temp_c = number(power.group("temp"))
    aip.performance_state = text_of(power.group("perf"))
    aip.power_w = number(power.group("draw"))
    aip.power_cap_w = number(power.group("cap"))
    aip.memory_used_mib = to_mib(memory.group("used"))
    aip.memory_total_mib = to_mib(memory.group("total"))
    util = cells[2].split()
    aip.utilization_pct = number(util[0]) if util else None
    aip.compute_mode = text_of(" ".join(util[1:]))
    for name in ("temp_c", "power_w", "memory_used_mib", "memory_total_mib"):
        if getattr(aip, name) is None:
            add_problem(problems, f"{source}:{number_}: AIP {aip.index}: {name} does not read")


def _query(text: str, source: str) -> HlSmiReport:
    report = HlSmiReport(aips=[], format="query")
    for line, tree in indented_tree(text, source, separator=" : ", fix=FIX):
        if line.key == "Driver Version":
            report.driver_version = line.value
        elif line.key == "Attached AIPs":
            report.attached = integer(line.value)
        elif line.key == "HL-SMI Version":
            report.hl_smi_version = (line.value or "").split(" ")[0] or None
        match = _AIP.match(line.key)
        if match:
            report.aips.append(_aip_block(match, tree, report.problems, source))
    if not report.aips:
        raise ParseError(f"{source}: no `[i] AIP (accelN) <bdf>` block", fix=FIX)
    return report


def _aip_block(match: re.Match[str], tree: dict[str, Any], problems: list[str], source: str) -> AipRecord:
    aip = AipRecord(index=int(match.group("index")), device=match.group("device"), bus_id=match.group("bdf"))
    aip.product_name = text_of(find(tree, "Product Name"))
    aip.serial = text_of(find(tree, "Serial Number"))
    aip.uuid = text_of(find(tree, "AIP UUID"))
    aip.module_id = integer(find(tree, "Module ID"))
    aip.status = text_of(find(tree, "Module status"))
    aip.fan = text_of(find(tree, "Fan Speed"))
    aip.firmware = {k: v for k, v in tree.items() if k.startswith("Firmware") and isinstance(v, str)}
    link = find(tree, "PCI.AIP Link Info")
    if isinstance(link, Mapping):
        aip.pcie_link_speed = text_of(find(link, "Link Speed.Current"))
        aip.pcie_link_speed_max = text_of(find(link, "Link Speed.Max"))
        aip.pcie_link_width = integer(find(link, "Link Width.Current"))
        aip.pcie_link_width_max = integer(find(link, "Link Width.Max"))
    aip.memory_total_mib = to_mib(find(tree, "Memory Usage.Total"), "MiB")
    aip.memory_used_mib = to_mib(find(tree, "Memory Usage.Used"), "MiB")
    aip.memory_free_mib = to_mib(find(tree, "Memory Usage.Free"), "MiB")
    _temperatures(aip, find(tree, "Temperature"))
    _power(aip, tree)
    clocks = find(tree, "Clocks")
    if isinstance(clocks, Mapping):
        aip.clocks_mhz = {_sensor(k): v for k, raw in clocks.items() if (v := number(raw)) is not None}
    aip.throttle_reasons = {
        k: not str(v).lower().startswith("not") for k, v in _flat(find(tree, "Clocks Throttle Reasons"))
    }
    macs = find(tree, "Network Information")
    aip.nic_count = len(macs) if isinstance(macs, Mapping) else None
    rows = find(tree, "Replaced Rows")
    if isinstance(rows, Mapping):
        aip.replaced_rows_sbe = integer(find(rows, "Single Bit ECC"))
        aip.replaced_rows_dbe = integer(find(rows, "Double Bit ECC"))
        pending = text_of(find(rows, "Pending"))
        aip.replaced_rows_pending = None if pending is None else pending.lower() in ("yes", "true", "1")
    for name in ("memory_used_mib", "temp_c", "power_w"):
        if getattr(aip, name) is None:
            add_problem(problems, f"{source}: AIP {aip.index}: no {name} in its -q block")
    return aip


def _sensor(key: str) -> str:
    match = _SENSOR.match(key.strip())
    return match.group("name").strip() if match else key.strip()


def _flat(node: Any) -> list[tuple[str, str]]:
    """Every `name : value` under a heading, however hl-smi indented it ("" is a heading's own value)."""
    if not isinstance(node, Mapping):
        return []
    out = []
    for key, value in node.items():
        if isinstance(value, Mapping):
            if "" in value:
                out.append((key, str(value[""])))
            out.extend(_flat({k: v for k, v in value.items() if k != ""}))
        elif key:
            out.append((key, str(value)))
    return out


def _temperatures(aip: AipRecord, node: Any) -> None:
    if not isinstance(node, Mapping):
        return
    for key, raw in node.items():
        value = number(raw)
        if value is not None:
            aip.temperatures_c[_sensor(key)] = value
    on_chip = [v for k, v in aip.temperatures_c.items() if re.fullmatch(r"On Chip \d+", k)]
    hbm = [v for k, v in aip.temperatures_c.items() if k.startswith("HBM")]
    aip.temp_c = max(on_chip) if on_chip else None
    aip.temp_hbm_c = max(hbm) if hbm else None


def _power(aip: AipRecord, tree: Mapping[str, Any]) -> None:
    caps = []
    for key, node in tree.items():
        if not key.startswith("Power Readings") or not isinstance(node, Mapping):
            continue
        rail = key.removeprefix("Power Readings").strip(" ()") or "total"
        draw = number(find(node, "Power Draw"))
        if draw is not None:
            aip.power_rails_w[rail] = draw
        cap = number(find(node, "Power Limit", "Power Max"))
        if cap is not None:
            caps.append(cap)
    if aip.power_rails_w:
        aip.power_w = sum(aip.power_rails_w.values())
    aip.power_cap_w = caps[0] if caps else None  # the main (first) rail's limit, as the table's cap shows it


# -Q field name -> (record field, how to read it); the docs' list of possible queries
CSV_FIELDS: dict[str, tuple[str, str]] = {
    "index": ("index", "int"),
    "module_id": ("module_id", "int"),
    "bus_id": ("bus_id", "text"),
    "name": ("product_name", "text"),
    "serial": ("serial", "text"),
    "uuid": ("uuid", "text"),
    "driver_version": ("driver_version", "text"),
    "temperature.aip": ("temp_c", "num"),
    "utilization.aip": ("utilization_pct", "num"),
    "memory.total": ("memory_total_mib", "mib"),
    "memory.used": ("memory_used_mib", "mib"),
    "memory.free": ("memory_free_mib", "mib"),
    "power.draw": ("power_w", "num"),
    "power.max": ("power_cap_w", "num"),
}


def parse_hl_smi_csv(text: str, source: str = "hl-smi", fields: Sequence[str] | None = None) -> HlSmiReport:
    try:
        rows = [
            [c.strip() for c in row] for row in csv.reader(io.StringIO(text.strip())) if any(c.strip() for c in row)
        ]
    except csv.Error as exc:
        raise ParseError(f"{source}: not CSV hl-smi would print ({exc})", fix=FIX) from None
    if not rows:
        raise ParseError(f"{source} is empty", fix=FIX)
    header = [re.sub(r"\s*\[.*\]$", "", c).lower() for c in rows[0]]
    if any(name in CSV_FIELDS or name.startswith("ecc.") for name in header) and fields is None:
        names, body = header, rows[1:]
    elif fields is not None:
        names, body = [f.strip().lower() for f in fields], rows[header == [f.strip().lower() for f in fields] :]
    else:
        raise ParseError(
            f"{source}: CSV with no header line: {','.join(rows[0])[:60]!r}",
            fix="name the -Q fields in order (e.g. --fields index,module_id,bus_id), or run hl-smi without noheader",
        )
    report = HlSmiReport(aips=[], format="csv")
    for number_, row in enumerate(body, 2 if names is header else 1):
        if len(row) != len(names):
            raise ParseError(f"{source}:{number_}: {len(row)} values for {len(names)} fields: {row!r}"[:160], fix=FIX)
        aip = AipRecord()
        for name, raw in zip(names, row, strict=True):
            _csv_value(aip, name, raw, report.problems, f"{source}:{number_}")
        report.aips.append(aip)
    if not report.aips:
        raise ParseError(f"{source}: the CSV has a header but no AIP rows", fix=FIX)
    return report


def _csv_value(aip: AipRecord, name: str, raw: str, problems: list[str], where: str) -> None:
    if name.startswith("ecc.errors."):
        if (count := integer(raw)) is not None:
            aip.ecc_errors[name.removeprefix("ecc.errors.")] = count
        return
    target = CSV_FIELDS.get(name)
    if target is None or missing(raw):
        return  # a field this module does not map (timestamp, ecc.mode.*, stats.violation.*)
    attr, kind = target
    value: Any
    if kind == "text":
        value = raw
    elif kind == "mib":
        value = to_mib(raw, "MiB")
    elif kind == "int":
        value = integer(raw)
    else:
        value = number(raw) if split_number(raw) is not None else None
    if value is None:
        add_problem(problems, f"{where}: {name} {raw!r} does not read")
        return
    setattr(aip, attr, value)
