"""Legacy `rocm-smi`: the "Concise Info" table, `--json` reports and the `GPU[N] : key: value` sections.

Three table layouts have shipped (each has a real capture under tests/captures/amd):
- ROCm 6.1 and later: `Device Node IDs (DID, GUID) Temp Power Partitions (Mem, Compute, ID) SCLK MCLK Fan Perf
  PwrCap VRAM% GPU%`, one line per GPU or partition (MI300X in CPX prints 8 lines per GPU, partition id 0-7);
- ROCm 6.0: `Device [Model : Revision] Temp Power Partitions (Mem, Compute) ...` with the name, cut at 20
  characters, on a second line;
- ROCm 5.x and older: `GPU Temp (DieEdge) AvgPwr SCLK MCLK Fan Perf PwrCap VRAM% GPU%`.
The second header line says which temperature (Edge or Junction) and power (Avg or Socket) a column holds.

`--json` (`-a`, `--showallinfo`, `--showmetrics`, ...) prints `{"card0": {...}, "system": {...}}` with every
value a string; key spellings vary by release ("Card series" / "Card Series"), so keys match case-insensitively.
The text sections print `GPU[0]\t\t: key: value` lines; `--showmetrics` uses the GPU metrics table's own names
(`temperature_hotspot (C)`, `average_socket_power (W)`), which map like their JSON spellings.

`--showrasinfo` (and `-a` in releases that included it) prints a RAS table per GPU (rocm_smi_lib
python_smi_tools/rocm_smi.py showRasInfo and printTableLog, ROCm 5.x-6.3): `GPU[0]:\tRAS INFO`, the header `Block
Status Correctable Error Uncorrectable Error`, then a row per RAS block (UMC, SDMA, GFX, MMHUB, ... FUSE) with its ECC
state (rsmi_ras_err_stale_machine: NONE, DISABLED, UNKNOWN ERROR, SING, MULT, POSITION, ENABLED) and, where the
library returned them, the block's correctable and uncorrectable counts. The counts are kept only for a block whose
ECC is on: the tool prints whatever the library left in them for a DISABLED block. The tables are read beside any of
the outputs above, or alone (format "ras").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.amd.amd_smi import AmdGpuRecord, AmdSmiReport, EccCount
from gpufleet.parsers.amd_gaudi_values import (
    add_problem,
    catalog_model,
    find,
    integer,
    load_json,
    missing,
    number,
    text_of,
    to_mib,
)

FIX = "pass the unedited output of plain `rocm-smi`, `rocm-smi --showallinfo --json` or `rocm-smi --showmetrics`"

_CELL = r"(\S+)"
# data rows of the three layouts; cells may be N/A, None or Unsupported where a reading is missing
_ROW_61 = re.compile(
    r"^(?P<index>\d+)\s+(?P<node>\d+)\s+(?P<did>[^,\s]+),\s*(?P<guid>\S+)\s+(?P<temp>\S+)\s+(?P<power>\S+)\s+"
    r"(?P<mem>[^,\s]+),\s*(?P<compute>[^,\s]+),\s*(?P<pid>\S+)\s+(?P<sclk>\S+)\s+(?P<mclk>\S+)\s+(?P<fan>\S+)\s+"
    r"(?P<perf>\S+)\s+(?P<cap>\S+)\s+(?P<vram>\S+)\s+(?P<gpu>\S+)\s*$"
)
_ROW_60 = re.compile(
    r"^(?P<index>\d+)\s+\[(?P<did>\S+)\s*:\s*(?P<rev>\S+)\]\s+(?P<temp>\S+)\s+(?P<power>\S+)\s+"
    r"(?P<mem>[^,\s]+),\s*(?P<compute>\S+)\s+(?P<sclk>\S+)\s+(?P<mclk>\S+)\s+(?P<fan>\S+)\s+(?P<perf>\S+)\s+"
    r"(?P<cap>\S+)\s+(?P<vram>\S+)\s+(?P<gpu>\S+)\s*$"
)
_ROW_5 = re.compile(
    r"^(?P<index>\d+)\s+(?P<temp>\S+)\s+(?P<power>\S+)\s+(?P<sclk>\S+)\s+(?P<mclk>\S+)\s+(?P<fan>\S+)\s+"
    r"(?P<perf>\S+)\s+(?P<cap>\S+)\s+(?P<vram>\S+)\s+(?P<gpu>\S+)\s*$"
)
_LAYOUTS = (("Device  Node", _ROW_61), ("Device  [Model", _ROW_60), ("GPU  Temp", _ROW_5))
_RAS_HEAD = re.compile(r"^GPU\[(?P<index>\d+)\]\s*:\s*RAS INFO\s*$")
_RAS_ROW = re.compile(
    r"^(?P<block>[A-Z][A-Z0-9_]*)\s+(?P<state>NONE|DISABLED|UNKNOWN ERROR|SING|MULT|POSITION|ENABLED|PARITY|POISON)"
    r"(?:\s+(?P<ce>\d+)\s+(?P<ue>\d+))?\s*$"
)
_RAS_OFF = ("NONE", "DISABLED", "UNKNOWN ERROR")
_SECTION_LINE = re.compile(r"^GPU\[(?P<index>\d+)\]\s*:\s*(?P<key>[^:]+?):\s*(?P<value>.*)$")

# JSON / section key (lower case) -> record field; the first present wins, so newer names come first
_KEYS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("market_name", ("card series", "device name", "card sku"), "text"),
    ("device_id", ("device id", "gpu id", "card model"), "text"),
    ("serial", ("serial number", "unique id"), "text"),
    ("uuid", ("unique id",), "text"),
    ("bdf", ("pci bus",), "text"),
    ("node_id", ("node id",), "int"),
    ("guid", ("guid",), "text"),
    ("gfx_target", ("gfx version",), "text"),
    ("compute_partition", ("compute partition",), "text"),
    ("memory_partition", ("memory partition",), "text"),
    ("temp_edge_c", ("temperature (sensor edge) (c)", "temperature_edge (c)"), "num"),
    ("temp_hotspot_c", ("temperature (sensor junction) (c)", "temperature_hotspot (c)"), "num"),
    ("temp_mem_c", ("temperature (sensor memory) (c)", "temperature_mem (c)"), "num"),
    (
        "power_w",
        (
            "current socket graphics package power (w)",
            "average graphics package power (w)",
            "current_socket_power (w)",
            "average_socket_power (w)",
        ),
        "num",
    ),
    ("power_cap_w", ("max graphics package power (w)",), "num"),
    ("gfx_activity_pct", ("gpu use (%)", "average_gfx_activity (%)"), "num"),
    ("umc_activity_pct", ("gpu memory read/write activity (%)", "average_umc_activity (%)"), "num"),
    ("mm_activity_pct", ("average_mm_activity (%)",), "num"),
    ("vram_used_pct", ("gpu memory allocated (vram%)", "gpu memory use (%)"), "num"),
    ("vram_total_mib", ("vram total memory (b)",), "bytes"),
    ("vram_used_mib", ("vram total used memory (b)",), "bytes"),
    ("gfx_clock_mhz", ("sclk clock speed:", "current_gfxclk (mhz)", "average_gfxclk_frequency (mhz)"), "num"),
    ("mem_clock_mhz", ("mclk clock speed:", "current_uclk (mhz)", "average_uclk_frequency (mhz)"), "num"),
    ("pcie_replay_count", ("pcie replay count", "pcie_replay_count_acc"), "int"),
    ("pcie_width", ("pcie_link_width (lanes)",), "int"),
    ("energy_j", ("accumulated energy (uj)",), "uj"),
)


def parse_rocm_smi(text: str, source: str = "rocm-smi") -> AmdSmiReport:
    """The Concise Info table, a `--json` report or `GPU[N] : key: value` sections, told apart by shape."""
    stripped = text.strip()
    if not stripped:
        raise ParseError(f"{source} is empty", fix=FIX)
    if stripped.startswith(("{", "[")):
        return _from_json(stripped, source)
    ras = ras_tables(text)
    for marker, row in _LAYOUTS:
        for number_, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith(marker):
                return _with_ras(_from_table(text.splitlines()[number_ - 1 :], row, source, number_), ras)
    sections = _sections(text)
    if sections or ras:
        return _with_ras(_report(sections, "metrics" if sections else "ras", None, source), ras)
    if "No AMD GPUs specified" in text or "Unable to detect any GPU" in text:
        raise ParseError(
            f"{source}: rocm-smi found no AMD GPU", fix="check that amdgpu is loaded (`lsmod | grep amdgpu`)"
        )
    raise ParseError(f"{source}: neither a Concise Info table, nor JSON, nor `GPU[N] : key: value` lines", fix=FIX)


def _from_table(lines: list[str], row: re.Pattern[str], source: str, first: int) -> AmdSmiReport:
    header = " ".join(lines[:2])
    junction = "(Junction)" in header
    report = AmdSmiReport(gpus=[], tool="rocm-smi", format="table")
    current: AmdGpuRecord | None = None
    for offset, raw in enumerate(lines[1:], first + 1):
        line = raw.strip()
        if not line or line.startswith("=") or line.startswith(("Name (20", "(DID", "(Edge", "(Junction")):
            continue
        if line.startswith(("End of ROCm SMI", "WARNING", "ERROR")):
            continue
        if line.startswith("GPU["):
            break  # another report's sections after the table (`rocm-smi; rocm-smi --showrasinfo`)
        match = row.match(line)
        if match is None:
            if row is _ROW_60 and current is not None and not line[0].isdigit():
                current.market_name = line  # the name line under a [Model : Revision] row
                continue
            raise ParseError(f"{source}:{offset}: not a Concise Info row: {line[:70]!r}", fix=FIX)
        current = _table_record(match.groupdict(), junction, report.problems, source)
        report.gpus.append(current)
    if not report.gpus:
        raise ParseError(f"{source}: the Concise Info table lists no GPU (rocm-smi found none)", fix=FIX)
    for gpu in report.gpus:
        spec = catalog_model(gpu.market_name, gpu.device_id)
        gpu.model = spec.name if spec else None
    return report


def _table_record(cells: dict[str, str], junction: bool, problems: list[str], source: str) -> AmdGpuRecord:
    record = AmdGpuRecord(index=int(cells["index"]))
    record.node_id = integer(cells.get("node"))
    record.device_id = text_of(cells.get("did"))
    record.guid = text_of(cells.get("guid"))
    record.memory_partition = text_of(cells.get("mem"))
    record.compute_partition = text_of(cells.get("compute"))
    record.partition_id = integer(cells.get("pid"))
    readings = {
        "temp_hotspot_c" if junction else "temp_edge_c": cells["temp"],
        "power_w": cells["power"],
        "gfx_clock_mhz": cells["sclk"],
        "mem_clock_mhz": cells["mclk"],
        "power_cap_w": cells["cap"],
        "vram_used_pct": cells["vram"],
        "gfx_activity_pct": cells["gpu"],
    }
    for name, printed in readings.items():
        value = number(printed)
        if value is None and not missing(printed):
            add_problem(problems, f"{source}: GPU {record.index}: {name} {printed!r} does not read")
        setattr(record, name, value)
    if record.power_cap_w == 0.0:
        record.power_cap_w = None  # the second GCD of an MI250X: its package's cap is on the first
    return record


def _from_json(text: str, source: str) -> AmdSmiReport:
    data = load_json(text, source, FIX)
    if not isinstance(data, dict):
        raise ParseError(f'{source}: expected {{"card0": {{...}}}}, got {type(data).__name__}', fix=FIX)
    cards: dict[int, dict[str, Any]] = {}
    for key, value in data.items():
        match = re.fullmatch(r"card(\d+)", str(key))
        if match is None:
            continue  # "system": the driver version, read below
        if not isinstance(value, dict):
            raise ParseError(f"{source}: {key} is {type(value).__name__}, not an object", fix=FIX)
        cards[int(match.group(1))] = value
    if not cards:
        raise ParseError(f'{source}: no "cardN" object in the JSON (rocm-smi printed no GPU data)', fix=FIX)
    driver = text_of(find(data, "system.Driver version")) if isinstance(data.get("system"), dict) else None
    return _report(cards, "json", driver, source)


def _sections(text: str) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        match = _SECTION_LINE.match(line.strip())
        if match:
            out.setdefault(int(match.group("index")), {})[match.group("key").strip()] = match.group("value").strip()
    return out


def _report(cards: Mapping[int, Mapping[str, Any]], fmt: str, driver: str | None, source: str) -> AmdSmiReport:
    report = AmdSmiReport(gpus=[], tool="rocm-smi", format=fmt, driver_version=driver)
    for index, values in sorted(cards.items()):
        lowered = {str(k).strip().lower(): v for k, v in values.items()}
        record = AmdGpuRecord(index=index, driver_version=driver)
        for name, keys, kind in _KEYS:
            raw = next((lowered[k] for k in keys if k in lowered and not missing(lowered[k])), None)
            if raw is None:
                continue
            value = _convert(kind, raw)
            if value is None:
                add_problem(report.problems, f"{source}: GPU {index}: {name} {raw!r} does not read")
                continue
            setattr(record, name, value)
        speed = number(lowered.get("pcie_link_speed (0.1 gt/s)"))
        record.pcie_speed_gts = None if speed is None else speed / 10
        record.temp_hbm_c = [
            t
            for k, v in sorted(lowered.items())
            if k.startswith("temperature (sensor hbm") and (t := number(v)) is not None
        ]
        record.pci = normalise_pci(record.bdf) if record.bdf else None
        spec = catalog_model(record.market_name, record.device_id)
        record.model = spec.name if spec else None
        report.gpus.append(record)
    return report


def _convert(kind: str, raw: Any) -> Any:
    if kind == "text":
        return text_of(raw)
    if kind == "int":
        return integer(raw)
    if kind == "bytes":
        return to_mib(raw, "B")
    if kind == "uj":
        value = number(raw)
        return None if value is None else value / 1e6
    return number(raw)


def ras_tables(text: str) -> dict[int, dict[str, EccCount | None]]:
    """Each GPU's RAS blocks: their counts where the block's ECC is on, None where it is off."""
    out: dict[int, dict[str, EccCount | None]] = {}
    current: dict[str, EccCount | None] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        head = _RAS_HEAD.match(line)
        if head:
            current = out.setdefault(int(head.group("index")), {})
            continue
        if current is None:
            continue
        row = _RAS_ROW.match(line)
        if row is None:
            if line and not line.startswith("Block"):
                current = None  # the table's closing rule, an elision, the next report
            continue
        on = row.group("state") not in _RAS_OFF and row.group("ce") is not None
        current[row.group("block")] = EccCount(int(row.group("ce")), int(row.group("ue"))) if on else None
    return out


def _with_ras(report: AmdSmiReport, ras: dict[int, dict[str, EccCount | None]]) -> AmdSmiReport:
    by_index = {g.index: g for g in report.gpus}
    for index, blocks in sorted(ras.items()):
        gpu = by_index.get(index)
        if gpu is None:
            gpu = by_index[index] = AmdGpuRecord(index=index)
            report.gpus.append(gpu)
        gpu.ecc_blocks.update({name: counts for name, counts in blocks.items() if counts is not None})
        gpu.ecc_blocks_off.extend(name for name, counts in blocks.items() if counts is None)
    report.gpus.sort(key=lambda g: g.index)
    return report
