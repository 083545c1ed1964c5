"""`nvidia-smi -q` (text), `nvidia-smi -q -x` (XML) and the plain `nvidia-smi` table, as per-GPU records.

Both query formats carry the same facts under different names; `nvidia_smi_fields` lists, per record field,
where the text report puts it (section/key path, as printed) and where the XML puts it (element path under
`<gpu>`, nvidia-smi's `nvsmi_device_v12.dtd` names). Older and newer drivers rename some of them (Clocks
Throttle Reasons -> Clocks Event Reasons, Power Readings -> GPU Power Readings, absolute temperature
thresholds -> T.Limit offsets), so each field may have several paths; the first one present wins.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.sources.nvidia_smi_fields import (
    CLOCK_REASONS,
    ECC_COUNTERS,
    FIELDS,
    HISTOGRAM_LEVELS,
    REASON_SECTIONS,
)

_NOT_AVAILABLE = {
    "",
    "n/a",
    "[n/a]",
    "none",
    "unknown",
    "unknown error",
    "[unknown error]",
    "not supported",
    "[not supported]",
    "requested functionality has been deprecated",
    "[requested functionality has been deprecated]",
    "insufficient permissions",
    "[insufficient permissions]",
}
_NUMBER = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%/()]*)$")
_TRUE = {"yes", "active", "enabled", "true"}
_FALSE = {"no", "not active", "disabled", "false"}


@dataclass
class EccCounts:
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None  # parity + SEC-DED where the driver splits them
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    sbe_total: int | None = None  # Volta and older report single/double-bit totals instead of SRAM/DRAM
    dbe_total: int | None = None


@dataclass
class GpuRecord:
    """One GPU as nvidia-smi reports it. Fields the report did not carry are None."""

    pci_bus_id: str | None = None  # as printed, e.g. 00000000:10:1C.0
    pci: str | None = None  # normalised domain:bus:device, joins with kernel events
    index: int | None = None
    product_name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    fan_speed_pct: float | None = None
    performance_state: str | None = None
    gpu_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_total_mib: float | None = None
    memory_used_mib: float | None = None
    temp_c: float | None = None
    temp_shutdown_c: float | None = None
    temp_slowdown_c: float | None = None
    temp_max_operating_c: float | None = None
    temp_tlimit_c: float | None = None  # newer drivers: degrees below the T.Limit, and thresholds relative to it
    temp_shutdown_tlimit_c: float | None = None
    temp_slowdown_tlimit_c: float | None = None
    memory_temp_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    power_limit_enforced_w: float | None = None
    power_limit_max_w: float | None = None
    clock_graphics_mhz: float | None = None
    clock_sm_mhz: float | None = None
    clock_memory_mhz: float | None = None
    clock_video_mhz: float | None = None
    max_clock_graphics_mhz: float | None = None
    max_clock_sm_mhz: float | None = None
    max_clock_memory_mhz: float | None = None
    clock_event_reasons: dict[str, bool] = field(default_factory=dict)
    ecc_mode_current: bool | None = None
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    ecc_volatile_uncorrected_total: int | None = None  # the plain table's "Volatile Uncorr. ECC" (SRAM + DRAM)
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_histogram: dict[str, int] = field(default_factory=dict)  # banks per availability level
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_counter: int | None = None
    pcie_replay_rollovers: int | None = None
    mig_mode_current: str | None = None
    mig_mode_pending: str | None = None

    @property
    def active_clock_event_reasons(self) -> list[str]:
        return [name for name, active in self.clock_event_reasons.items() if active]

    @property
    def pcie_degraded(self) -> bool | None:
        """The link runs below its maximum generation or width (idle GPUs may lower the generation)."""
        gen, gen_max = self.pcie_gen_current, self.pcie_gen_max
        width, width_max = self.pcie_width_current, self.pcie_width_max
        if gen is None or gen_max is None or width is None or width_max is None:
            return None
        return gen < gen_max or width < width_max


@dataclass
class NvidiaSmiReport:
    gpus: list[GpuRecord]
    driver_version: str | None = None
    cuda_version: str | None = None
    timestamp: str | None = None
    attached_gpus: int | None = None
    # GPUs nvidia-smi could not reach (`Unable to determine the device handle ...`): normalised PCI -> why
    unreachable: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # whole-report failures, e.g. the driver is not loaded


# -- value conversion ----------------------------------------------------------------------------------------
_STRING_FIELDS = {
    "product_name",
    "uuid",
    "serial",
    "pci_bus_id",
    "performance_state",
    "mig_mode_current",
    "mig_mode_pending",
}
_BOOL_FIELDS = {"retired_pending", "remap_pending", "remap_failure", "ecc_mode_current"}


def _na(text: str) -> bool:
    return text.strip().lower() in _NOT_AVAILABLE


def _number(text: str, where: str) -> float | None:
    if _na(text):
        return None
    match = _NUMBER.match(text.strip())
    if match is None:
        raise ParseError(f"{where}: expected a number, got {text.strip()!r}", fix="is this nvidia-smi output?")
    return float(match.group("num"))


def _integer(text: str, where: str) -> int | None:
    value = _number(text, where)
    return None if value is None else int(value)


def _flag(text: str, where: str) -> bool | None:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    if _na(text):
        return None
    raise ParseError(f"{where}: expected Yes/No or Active/Not Active, got {text.strip()!r}")


def _string(text: str) -> str | None:
    return None if _na(text) else text.strip()


_INT_FIELDS = {
    "retired_sbe",
    "retired_dbe",
    "remap_correctable",
    "remap_uncorrectable",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "pcie_replay_counter",
    "pcie_replay_rollovers",
}


def _fill(gpu: GpuRecord, values: dict[str, tuple[str, str]]) -> None:
    """Set record fields from raw text values; `values` maps field -> (text, where-for-errors)."""
    for name, (text, where) in values.items():
        if name in _STRING_FIELDS:
            setattr(gpu, name, _string(text))
        elif name in _BOOL_FIELDS:
            setattr(gpu, name, _flag(text, where))
        elif name in _INT_FIELDS:
            setattr(gpu, name, _integer(text, where))
        else:
            setattr(gpu, name, _number(text, where))
    if gpu.pci_bus_id:
        gpu.pci = normalise_pci(gpu.pci_bus_id)


def _ecc(raw: dict[str, tuple[str, str]]) -> EccCounts:
    def get(name: str) -> int | None:
        return _integer(*raw[name]) if name in raw else None

    sram_unc = get("sram_uncorrectable")
    if sram_unc is None:
        parts = [v for v in (get("sram_uncorrectable_parity"), get("sram_uncorrectable_secded")) if v is not None]
        sram_unc = sum(parts) if parts else None
    dram_correctable = get("dram_correctable")
    dram_uncorrectable = get("dram_uncorrectable")
    return EccCounts(
        sram_correctable=get("sram_correctable"),
        sram_uncorrectable=sram_unc,
        dram_correctable=dram_correctable if dram_correctable is not None else get("sbe_device_memory"),
        dram_uncorrectable=dram_uncorrectable if dram_uncorrectable is not None else get("dbe_device_memory"),
        sbe_total=get("sbe_total"),
        dbe_total=get("dbe_total"),
    )


# -- text (-q) -----------------------------------------------------------------------------------------------
_KV = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)\s+:(?: (?P<value>.*))?$")
_UNREACHABLE = re.compile(
    r"^Unable to determine the device handle for (?:GPU|gpu)\s*"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?):\s*(?P<why>.*)$"
)
# whole-report failures nvidia-smi prints instead of GPUs
_FAILURES = ("NVIDIA-SMI has failed", "No devices were found", "Failed to initialize NVML")
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _flatten_sections(lines: list[tuple[int, str]], source: str) -> dict[str, tuple[str, str]]:
    """Indented `-q` sections -> {"Section/Sub/Key": (value, where)}.

    A key-value line's deeper-indented children (e.g. HW Thermal Slowdown under HW Slowdown) belong to the
    section.
    """
    flat: dict[str, tuple[str, str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, section name)
    for lineno, line in lines:
        indent = len(line) - len(line.lstrip(" "))
        kv = _KV.match(line)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join(name for _, name in stack)
        if kv is None:
            stack.append((indent, line.strip()))
            continue
        key = kv.group("key").strip()
        flat.setdefault(f"{path}/{key}" if path else key, (kv.group("value") or "", f"{source}:{lineno}: {key}"))
    return flat


def _gpu_from_sections(flat: dict[str, tuple[str, str]], bus_id: str | None) -> GpuRecord:
    gpu = GpuRecord(pci_bus_id=bus_id)
    values: dict[str, tuple[str, str]] = {}
    for name, (text_paths, _) in FIELDS.items():
        for path in text_paths:
            if path in flat and (name not in values or _na(values[name][0])):
                values[name] = flat[path]
    if bus_id is not None and "pci_bus_id" not in values:
        values["pci_bus_id"] = (bus_id, "GPU header")
    _fill(gpu, values)
    for scope, target in (("Volatile", "ecc_volatile"), ("Aggregate", "ecc_aggregate")):
        raw = {
            n: flat[f"ECC Errors/{scope}/{k}"]
            for n, (k, _) in ECC_COUNTERS.items()
            if f"ECC Errors/{scope}/{k}" in flat
        }
        setattr(gpu, target, _ecc(raw))
    for name, (key, _) in CLOCK_REASONS.items():
        for section in REASON_SECTIONS:
            if f"{section}/{key}" in flat:
                value = _flag(*flat[f"{section}/{key}"])
                if value is not None:
                    gpu.clock_event_reasons[name] = value
    for level in HISTOGRAM_LEVELS:
        path = f"Remapped Rows/Bank Remap Availability Histogram/{level.capitalize()}"
        if path in flat:
            banks = _integer(flat[path][0].replace("bank(s)", ""), flat[path][1])
            if banks is not None:
                gpu.remap_histogram[level] = banks
    return gpu


def parse_query_text(text: str, *, source: str = "nvidia-smi -q") -> NvidiaSmiReport:
    """Parse `nvidia-smi -q` text (whole or `-d` sections, excerpts with `[...]` elisions included)."""
    header: dict[str, str] = {}
    blocks: list[tuple[str | None, list[tuple[int, str]]]] = []
    unreachable: dict[str, str] = {}
    errors: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("=") or stripped == "[...]" or stripped.startswith("$ "):
            continue
        lost = _UNREACHABLE.match(stripped)
        if lost is not None:
            unreachable[normalise_pci(lost.group("bus")) or lost.group("bus")] = lost.group("why").strip()
            continue
        if stripped.startswith(_FAILURES):
            errors.append(stripped)
            continue
        gpu_header = _GPU_HEADER.match(line)
        if gpu_header is not None:
            blocks.append((gpu_header.group("bus"), []))
            continue
        if line.startswith(" "):
            if not blocks:
                blocks.append((None, []))  # a section excerpt with no GPU header: one unnamed GPU
            blocks[-1][1].append((lineno, line[4:] if line.startswith("    ") else line.lstrip()))
            continue
        kv = _KV.match(line)
        if kv is None:
            raise ParseError(
                f"{source}:{lineno}: not an nvidia-smi -q line: {stripped[:60]!r}",
                fix="pass the output of `nvidia-smi -q`",
            )
        header[kv.group("key").strip()] = (kv.group("value") or "").strip()
    if not blocks and not header and not unreachable and not errors:
        raise ParseError(f"{source}: no nvidia-smi -q content", fix="pass the output of `nvidia-smi -q`")
    gpus = [_gpu_from_sections(_flatten_sections(lines, source), bus) for bus, lines in blocks]
    for index, gpu in enumerate(gpus):
        gpu.index = index
        gpu.driver_version = _string(header.get("Driver Version", ""))
        gpu.cuda_version = _string(header.get("CUDA Version", ""))
    attached = header.get("Attached GPUs")
    return NvidiaSmiReport(
        gpus=gpus,
        driver_version=_string(header.get("Driver Version", "")),
        cuda_version=_string(header.get("CUDA Version", "")),
        timestamp=_string(header.get("Timestamp", "")),
        attached_gpus=int(attached) if attached and attached.isdigit() else None,
        unreachable=unreachable,
        errors=errors,
    )


# -- XML (-q -x) ---------------------------------------------------------------------------------------------
def _xml_text(gpu: ET.Element, path: str) -> str | None:
    node = gpu.find(path)
    return None if node is None or node.text is None else node.text


def _gpu_from_xml(node: ET.Element, index: int, source: str) -> GpuRecord:
    bus = node.get("id")
    where = f"{source}: gpu {bus or index}"
    gpu = GpuRecord(pci_bus_id=bus, index=index)
    values: dict[str, tuple[str, str]] = {}
    for name, (_, xml_paths) in FIELDS.items():
        for path in xml_paths:
            text = _xml_text(node, path)
            if text is not None and (name not in values or _na(values[name][0])):
                values[name] = (text, f"{where}: <{path}>")
    _fill(gpu, values)
    for scope, target in (("volatile", "ecc_volatile"), ("aggregate", "ecc_aggregate")):
        raw = {}
        for name, (_, element) in ECC_COUNTERS.items():
            text = _xml_text(node, f"ecc_errors/{scope}/{element}")
            if text is not None:
                raw[name] = (text, f"{where}: <ecc_errors/{scope}/{element}>")
        setattr(gpu, target, _ecc(raw))
    for name, (_, suffix) in CLOCK_REASONS.items():
        for section, prefix in (
            ("clocks_event_reasons", "clocks_event_reason_"),
            ("clocks_throttle_reasons", "clocks_throttle_reason_"),
        ):
            text = _xml_text(node, f"{section}/{prefix}{suffix}")
            if text is not None:
                value = _flag(text, f"{where}: <{section}/{prefix}{suffix}>")
                if value is not None:
                    gpu.clock_event_reasons[name] = value
    for level in HISTOGRAM_LEVELS:
        text = _xml_text(node, f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{level}")
        if text is not None:
            banks = _integer(text.replace("bank(s)", ""), f"{where}: row_remapper_histogram_{level}")
            if banks is not None:
                gpu.remap_histogram[level] = banks
    return gpu


def parse_query_xml(text: str, *, source: str = "nvidia-smi -q -x") -> NvidiaSmiReport:
    """Parse `nvidia-smi -q -x` XML (root `<nvidia_smi_log>`, one `<gpu id="...">` per GPU)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"{source}: not well-formed XML ({exc})", fix="pass the output of `nvidia-smi -q -x`") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(
            f"{source}: root element is <{root.tag}>, not <nvidia_smi_log>",
            fix="pass the output of `nvidia-smi -q -x`",
        )
    driver = _string(root.findtext("driver_version") or "")
    cuda = _string(root.findtext("cuda_version") or "")
    gpus = [_gpu_from_xml(node, i, source) for i, node in enumerate(root.findall("gpu"))]
    for gpu in gpus:
        gpu.driver_version, gpu.cuda_version = driver, cuda
    attached = (root.findtext("attached_gpus") or "").strip()
    return NvidiaSmiReport(
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda,
        timestamp=_string(root.findtext("timestamp") or ""),
        attached_gpus=int(attached) if attached.isdigit() else None,
    )


def parse_query(text: str, *, source: str = "nvidia-smi") -> NvidiaSmiReport:
    """Either query format, told apart by its first character."""
    if text.lstrip().startswith("<"):
        return parse_query_xml(text, source=source)
    return parse_query_text(text, source=source)
