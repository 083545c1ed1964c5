"""`nvidia-smi --query-gpu=PROPERTY,... --format=csv[,noheader][,nounits]`: one GpuRecord per row, the same record
`-q` gives, so the same values are judged the same way whichever view printed them.

    index, pci.bus_id, temperature.gpu, remapped_rows.pending, gpu_recovery_action
    0, 00000000:18:00.0, 34, No, None

The header names each column by its property (`nvidia-smi --help-query-gpu`, drivers 418-580), with its unit in
brackets unless `nounits` (`memory.used [MiB]`); values carry their unit unless `nounits` (`300.00 W`). With
`noheader` the columns are known only from the command line (`--query-gpu=...`) when it was pasted with the output.
A value nvidia-smi could not read is printed as NVML's error (`[Unknown Error]`, `[GPU requires reset]`, `[N/A]`,
`[Not Supported]`; smi_values says what each means) and kept on the record as unreadable.

Properties and their record fields (`nvidia-smi --help-query-gpu`): index, pci.bus_id (gpu_bus_id), name, uuid,
serial, temperature.gpu, temperature.memory, power.draw, power.limit, enforced.power.limit, utilization.gpu,
utilization.memory, memory.total, memory.used, fan.speed, pstate, clocks.sm / clocks.current.sm (and gr, mem,
video), clocks.max.*, pcie.link.gen.current / .gpucurrent / .max, pcie.link.width.current / .max, ecc.mode.current /
.pending, ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.{total,dram,sram,device_memory},
retired_pages.single_bit_ecc.count / .double_bit.count / .pending (retired_pages.sbe / .dbe on older drivers),
remapped_rows.correctable / .uncorrectable / .pending / .failure, clocks_event_reasons.* (clocks_throttle_reasons.*
before R535), including `.active`, the bitmask of nvml.h's nvmlClocksEventReason* (0x1 idle, 0x2 applications
clocks, 0x4 SW power cap, 0x8 HW slowdown, 0x10 sync boost, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power
brake, 0x100 display clocks), mig.mode.current / .pending, gpu_recovery_action (R550+, NVML
nvmlDeviceGetGpuRecoveryAction: None, Reset, Reboot, Drain P2P, Drain and Reset).
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.nvidia.smi import EccCounts, GpuRecord, NvidiaSmiReport, UnreadableValue
from gpufleet.parsers.nvidia.smi_fields import FIELDS
from gpufleet.parsers.nvidia.smi_values import unreadable

# property -> record field
PROPERTIES: dict[str, str] = {
    "index": "index", "pci.bus_id": "pci_bus_id", "gpu_bus_id": "pci_bus_id", "name": "product_name",
    "gpu_name": "product_name", "uuid": "uuid", "gpu_uuid": "uuid", "serial": "serial",
    "driver_version": "driver_version", "temperature.gpu": "temp_c", "temperature.memory": "memory_temp_c",
    "power.draw": "power_draw_w", "power.draw.instant": "power_draw_w", "power.limit": "power_limit_w",
    "enforced.power.limit": "power_limit_enforced_w", "power.max_limit": "power_limit_max_w",
    "utilization.gpu": "gpu_util_pct", "utilization.memory": "memory_util_pct", "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib", "fan.speed": "fan_speed_pct", "pstate": "performance_state",
    "clocks.gr": "clock_graphics_mhz", "clocks.current.graphics": "clock_graphics_mhz", "clocks.sm": "clock_sm_mhz",
    "clocks.current.sm": "clock_sm_mhz", "clocks.mem": "clock_memory_mhz", "clocks.current.memory": "clock_memory_mhz",
    "clocks.video": "clock_video_mhz", "clocks.current.video": "clock_video_mhz",
    "clocks.max.gr": "max_clock_graphics_mhz", "clocks.max.graphics": "max_clock_graphics_mhz",
    "clocks.max.sm": "max_clock_sm_mhz", "clocks.max.mem": "max_clock_memory_mhz",
    "clocks.max.memory": "max_clock_memory_mhz", "pcie.link.gen.current": "pcie_gen_current",
    "pcie.link.gen.gpucurrent": "pcie_gen_current", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.gen.gpumax": "pcie_gen_max", "pcie.link.width.current": "pcie_width_current",
    "pcie.link.width.max": "pcie_width_max", "ecc.mode.current": "ecc_mode_current",
    "ecc.mode.pending": "ecc_mode_pending", "retired_pages.single_bit_ecc.count": "retired_sbe",
    "retired_pages.sbe": "retired_sbe", "retired_pages.double_bit.count": "retired_dbe",
    "retired_pages.double_bit_ecc.count": "retired_dbe", "retired_pages.dbe": "retired_dbe",
    "retired_pages.pending": "retired_pending", "remapped_rows.correctable": "remap_correctable",
    "remapped_rows.uncorrectable": "remap_uncorrectable", "remapped_rows.pending": "remap_pending",
    "remapped_rows.failure": "remap_failure", "mig.mode.current": "mig_mode_current",
    "mig.mode.pending": "mig_mode_pending", "gpu_recovery_action": "recovery_action",
}  # fmt: skip
# ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.<memory> -> EccCounts field
_ECC = re.compile(r"^ecc\.errors\.(?P<kind>corrected|uncorrected)\.(?P<scope>volatile|aggregate)\.(?P<memory>[\w.]+)$")
_ECC_FIELDS = {
    ("uncorrected", "total"): "dbe_total", ("corrected", "total"): "sbe_total",
    ("uncorrected", "dram"): "dram_uncorrectable", ("corrected", "dram"): "dram_correctable",
    ("uncorrected", "device_memory"): "dram_uncorrectable", ("corrected", "device_memory"): "dram_correctable",
    ("uncorrected", "sram"): "sram_uncorrectable", ("corrected", "sram"): "sram_correctable",
}  # fmt: skip
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_REASON_ALIASES = {"gpu_idle": "gpu_idle", "idle": "gpu_idle",
                   "applications_clocks_setting": "applications_clocks_setting",
                   "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
                   "hw_thermal_slowdown": "hw_thermal_slowdown", "hw_power_brake_slowdown": "hw_power_brake_slowdown",
                   "sw_thermal_slowdown": "sw_thermal_slowdown", "sync_boost": "sync_boost",
                   "display_clocks_setting": "display_clocks_setting"}  # fmt: skip
# nvml.h nvmlClocksEventReason* bits, in the names of CLOCK_REASONS
_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                0x80: "hw_power_brake_slowdown", 0x100: "display_clocks_setting"}  # fmt: skip
_INT_FIELDS = {"index", "retired_sbe", "retired_dbe", "remap_correctable", "remap_uncorrectable", "pcie_gen_current",
               "pcie_gen_max", "pcie_width_current", "pcie_width_max"}  # fmt: skip
_BOOL_FIELDS = {"retired_pending", "remap_pending", "remap_failure", "ecc_mode_current", "ecc_mode_pending"}
_STR_FIELDS = {"pci_bus_id", "product_name", "uuid", "serial", "driver_version", "performance_state",
               "mig_mode_current", "mig_mode_pending", "recovery_action"}  # fmt: skip
_TRUE = {"yes", "enabled", "active", "true", "on"}
_FALSE = {"no", "disabled", "not active", "false", "off"}
_NUMBER = re.compile(r"^[-+]?\d{1,18}(?:\.\d{1,12})?")
_HEADER_CELL = re.compile(r"^(?P<name>[a-z][a-z0-9_.]{0,80})(?:\s*\[[^\]]{0,16}\])?$")
_COMMAND = re.compile(r"--query-gpu[= ](?P<props>[\w.,]+)")
MAX_PROBLEMS = 50


def _known(prop: str) -> bool:
    return prop in PROPERTIES or _ECC.match(prop) is not None or prop.startswith(_REASON_PREFIXES)


def header_properties(line: str) -> list[str] | None:
    """The properties a header line names, or None when the line is not a --query-gpu header."""
    cells = [c.strip() for c in line.split(",")]
    names = []
    for cell in cells:
        match = _HEADER_CELL.match(cell)
        if match is None:
            return None
        names.append(match["name"])
    return names if any(_known(n) for n in names) else None


def _where(prop: str) -> str:
    """An unreadable value's name: the record field's -q -x path when there is one (so the reader knows the
    GPU's own state from the rest), else the property."""
    field = PROPERTIES.get(prop)
    if field is not None and field in FIELDS:
        return FIELDS[field][1][0]
    return prop.replace(".", "/")


def _value(prop: str, text: str, gpu: GpuRecord, problems: list[str], where: str, line: str) -> None:
    kind = unreadable(text)
    if prop == "gpu_recovery_action" and text.strip().lower() == "none":
        kind = None  # NVML_GPU_RECOVERY_ACTION_NONE: a reading, not a missing value
    if kind is not None:
        if kind != "not-available":
            gpu.unreadable.append(UnreadableValue(_where(prop), text.strip(), line))
        return
    value = text.strip()
    low = value.lower()
    if prop.startswith(_REASON_PREFIXES):
        reason = prop.split(".", 1)[1]
        if reason == "active":
            try:
                mask = int(value, 0)
            except ValueError:
                problems.append(f"{where}: {prop} is not a bitmask: {value[:40]!r}")
                return
            for bit, name in _REASON_BITS.items():
                gpu.clock_event_reasons[name] = bool(mask & bit)
        elif reason in _REASON_ALIASES and (low in _TRUE or low in _FALSE):
            gpu.clock_event_reasons[_REASON_ALIASES[reason]] = low in _TRUE
        return
    ecc = _ECC.match(prop)
    if ecc is not None:
        counter = _ECC_FIELDS.get((ecc["kind"], ecc["memory"]))
        number = _NUMBER.match(value)
        if counter is None or number is None:
            return
        counts: EccCounts = gpu.ecc_volatile if ecc["scope"] == "volatile" else gpu.ecc_aggregate
        setattr(counts, counter, int(float(number.group())))
        return
    field = PROPERTIES.get(prop)
    if field is None:
        return
    if field in _STR_FIELDS:
        setattr(gpu, field, value)
    elif field in _BOOL_FIELDS:
        if low in _TRUE or low in _FALSE:
            setattr(gpu, field, low in _TRUE)
        else:
            problems.append(f"{where}: {prop} expected Yes/No or Enabled/Disabled, got {value[:40]!r}")
    else:
        number = _NUMBER.match(value)
        if number is None:
            problems.append(f"{where}: {prop} expected a number, got {value[:40]!r}")
            return
        setattr(gpu, field, int(float(number.group())) if field in _INT_FIELDS else float(number.group()))


def parse_query_gpu(text: str, *, source: str = "nvidia-smi --query-gpu", strict: bool = True) -> NvidiaSmiReport:
    """One record per data row. `strict=False` lists a value that does not read in `problems` instead of failing;
    a text whose columns cannot be named (no header, no command line) fails either way."""
    columns: list[str] | None = None
    gpus: list[GpuRecord] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        command = _COMMAND.search(line)
        if command is not None:
            columns = [p for p in command["props"].split(",") if p]
            continue
        header = header_properties(line)
        if header is not None:
            columns = header
            continue
        cells = [c.strip() for c in line.split(",")]
        if columns is None:
            raise ParseError(
                f"{source}: line {number} is a row, but no header or --query-gpu= command names its columns",
                fix="paste the output with its header (`--format=csv`), or the command line with it",
            )
        if len(cells) != len(columns):
            problems.append(f"{source}:{number}: {len(cells)} values for {len(columns)} columns: {line[:80]!r}")
            if strict:
                raise ParseError(problems[-1], fix="is this `nvidia-smi --query-gpu` output?")
            continue
        gpu = GpuRecord()
        for prop, cell in zip(columns, cells, strict=True):
            _value(prop, cell, gpu, problems, f"{source}:{number}", line)
        if strict and problems:
            raise ParseError(problems[0], fix="is this `nvidia-smi --query-gpu` output?")
        if gpu.pci_bus_id:
            gpu.pci = normalise_pci(gpu.pci_bus_id)
        gpus.append(gpu)
    if columns is None:
        raise ParseError(f"{source}: no --query-gpu header", fix="paste the output of `nvidia-smi --query-gpu=... "
                         "--format=csv`")  # fmt: skip
    report = NvidiaSmiReport(gpus=gpus, problems=problems[:MAX_PROBLEMS])
    drivers = {g.driver_version for g in gpus if g.driver_version}
    report.driver_version = drivers.pop() if len(drivers) == 1 else None
    if not any(_known(c) for c in columns):
        report.notes.append("none of the columns is a property this reader knows")
    return report
