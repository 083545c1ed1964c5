"""`nvidia-smi -q` (text), `nvidia-smi -q -x` (XML) and the plain `nvidia-smi` table, as per-GPU records.

Both query formats carry the same facts under different names; `nvidia_smi_fields` lists, per record field,
where the text report puts it (section/key path, as printed) and where the XML puts it (element path under
`<gpu>`, nvidia-smi's `nvsmi_device_v12.dtd` names). Older and newer drivers rename some of them (Clocks
Throttle Reasons -> Clocks Event Reasons, Power Readings -> GPU Power Readings, absolute temperature
thresholds -> T.Limit offsets), so each field may have several paths; the first one present wins.

Values nvidia-smi could not read (`ERR!`, `[Unknown Error]`, `[GPU requires reset]`, `[GPU is lost]`) are kept
on the record as `unreadable`, with the line they were printed on; `smi_values` says what each means.

Pasted excerpts are read for what they hold: a redacted PCI id (`GPU 00000000:...`), an excerpt that starts
inside a section (a key is placed by the unique tail of its path) or that lost its indentation. With
`strict=False` a value that does not read is noted in `problems` instead of failing the whole report.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.nvidia.smi_fields import (
    CLOCK_REASONS,
    ECC_COUNTERS,
    FIELDS,
    GPU_SECTIONS,
    HISTOGRAM_LEVELS,
    REASON_SECTIONS,
    text_paths,
)
from gpufleet.parsers.nvidia.smi_values import Unreadable, is_fault, unreadable

_NUMBER = re.compile(r"^(?P<num>[-+]?\d{1,18}(?:\.\d{1,12})?)\s*(?P<unit>[A-Za-z%/()]*)$")
_TRUE = {"yes", "active", "enabled", "true", "on"}
_FALSE = {"no", "not active", "disabled", "false", "off"}
MAX_PROBLEMS = 50  # values noted as unreadable per report; more are counted, not listed


@dataclass
class EccCounts:
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None  # parity + SEC-DED where the driver splits them
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    sbe_total: int | None = None  # Volta and older report single/double-bit totals instead of SRAM/DRAM
    dbe_total: int | None = None


@dataclass(frozen=True)
class UnreadableValue:
    """A value nvidia-smi printed an error marker for instead of a reading."""

    name: str  # where: the -q section/key path, the XML element path, or the table column
    printed: str  # as printed: ERR!, [Unknown Error], [GPU requires reset]
    line: str = ""  # the line it was printed on

    @property
    def kind(self) -> Unreadable:
        return unreadable(self.printed) or "read-error"


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
    ecc_mode_pending: bool | None = None  # differs from current until the next reboot
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
    recovery_action: str | None = None  # NVML's GPU recovery action as printed: None, Reset, Reboot, Drain P2P, ...
    unreadable: list[UnreadableValue] = field(default_factory=list)  # values printed as an error, in order

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
    problems: list[str] = field(default_factory=list)  # values that did not read (strict=False only)
    cut_short: str | None = None  # why the text surely ends inside a GPU's record
    partial: str | None = None  # why the text may not hold every GPU or section (an excerpt, or a cut)
    notes: list[str] = field(default_factory=list)  # what a reader should know about the text as given


# -- value conversion ----------------------------------------------------------------------------------------
_STRING_FIELDS = {
    "product_name",
    "uuid",
    "serial",
    "pci_bus_id",
    "performance_state",
    "mig_mode_current",
    "mig_mode_pending",
    "recovery_action",
}
_BOOL_FIELDS = {"retired_pending", "remap_pending", "remap_failure", "ecc_mode_current", "ecc_mode_pending"}
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


def _na(text: str) -> bool:
    """Not a reading: N/A, or any value nvidia-smi printed in place of one (`ERR!`, `[Unknown Error]`)."""
    return unreadable(text) is not None


def _bad(message: str, problems: list[str] | None, fix: str = "is this nvidia-smi output?") -> None:
    """Strict parsing (problems is None) fails on a value that does not read; lenient parsing notes it."""
    if problems is None:
        raise ParseError(message, fix=fix)
    if len(problems) < MAX_PROBLEMS:
        problems.append(message)


def _number(text: str, where: str, problems: list[str] | None = None) -> float | None:
    if _na(text):
        return None
    match = _NUMBER.match(text.strip())
    if match is None:
        _bad(f"{where}: expected a number, got {text.strip()[:40]!r}", problems)
        return None
    return float(match.group("num"))


def _integer(text: str, where: str, problems: list[str] | None = None) -> int | None:
    value = _number(text, where, problems)
    return None if value is None else int(value)


def _flag(text: str, where: str, problems: list[str] | None = None) -> bool | None:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    if _na(text):
        return None
    _bad(f"{where}: expected Yes/No, Active/Not Active or Enabled/Disabled, got {text.strip()[:40]!r}", problems)
    return None


def _string(text: str) -> str | None:
    return None if _na(text) else text.strip()


def _fill(gpu: GpuRecord, values: dict[str, tuple[str, str]], problems: list[str] | None) -> None:
    """Set record fields from raw text values; `values` maps field -> (text, where-for-errors)."""
    for name, (text, where) in values.items():
        if name in _STRING_FIELDS:
            setattr(gpu, name, _string(text))
        elif name in _BOOL_FIELDS:
            setattr(gpu, name, _flag(text, where, problems))
        elif name in _INT_FIELDS:
            setattr(gpu, name, _integer(text, where, problems))
        else:
            setattr(gpu, name, _number(text, where, problems))
    if gpu.pci_bus_id:
        gpu.pci = normalise_pci(gpu.pci_bus_id)


def _ecc(raw: dict[str, tuple[str, str]], problems: list[str] | None) -> EccCounts:
    def get(name: str) -> int | None:
        return _integer(*raw[name], problems) if name in raw else None

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


def _key_value(line: str) -> tuple[str, str] | None:
    """`Key<padding>: value` -> (key, value); None for a heading. (A scan, not a regex: a long line of spaces
    must not cost quadratic time.)"""
    at = line.find(" :")
    if at < 0:
        return None
    key, rest = line[:at].strip(), line[at + 2 :]
    if not key or (rest and not rest.startswith(" ")):
        return None
    return key, rest[1:]


UNREACHABLE = re.compile(
    r"^Unable to determine the device handle for (?:GPU|gpu)\s*"
    r"(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?):\s*(?P<why>.*)$"
)
# whole-report failures nvidia-smi prints instead of GPUs
FAILURES = ("NVIDIA-SMI has failed", "No devices were found", "Failed to initialize NVML", "GPU is lost")
# `GPU 00000000:10:1C.0`, or the same with the id redacted (`GPU 00000000:...`, `GPU XXXXXXXX:XX:XX.X`, `GPU <id>`)
_GPU_HEADER = re.compile(
    r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
    r"|[0-9A-Fa-fXx:.]*(?:\.\.\.|…)[0-9A-Fa-fXx:.…]*"
    r"|[0-9A-Fa-fXx]{4,8}:[0-9A-Fa-fXx]{2}:[0-9A-Fa-fXx]{2}\.[0-7Xx]"
    r"|<[^<>]{0,40}>)\s*$"
)
_HEADER_KEYS = {"Timestamp", "Driver Version", "CUDA Version", "Attached GPUs", "NVML Version", "HIC Info"}
_MAX_DEPTH = 8  # -q nests five deep; deeper indentation is read as a sibling, so paths stay short
_MAX_NAME = 120  # a key or section name longer than this is not nvidia-smi's

_KNOWN_PATHS = text_paths()
_BY_TAIL: dict[str, list[str]] = {}
for _path in _KNOWN_PATHS:
    _BY_TAIL.setdefault(_path.rsplit("/", 1)[-1], []).append(_path)
_SECTION_NAMES = set(GPU_SECTIONS) | {part for path in _KNOWN_PATHS for part in path.split("/")[:-1]}


def _resolve(path: str) -> str | None:
    """The known path a key stands for when its enclosing sections were cut off (`Aggregate/SRAM Correctable`
    -> `ECC Errors/Aggregate/SRAM Correctable`); None when its tail is not unique."""
    meant = {_KNOWN_PATHS[p] for p in _BY_TAIL.get(path.rsplit("/", 1)[-1], ()) if p.endswith("/" + path)}
    return meant.pop() if len(meant) == 1 else None


@dataclass
class _Block:
    """One GPU's lines of `-q` text, flattened into section/key paths."""

    bus: str | None
    lines: list[tuple[int, str]] = field(default_factory=list)
    values: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # path -> (value, where, line)
    order: list[str] = field(default_factory=list)  # paths as they came (resolved), the first of each
    ends_at_heading: str | None = None  # the last line is a section heading with nothing under it

    def flatten(self, source: str) -> None:
        """Indented `-q` sections -> {"Section/Sub/Key": ...}. A key-value line's deeper-indented children
        (HW Thermal Slowdown under HW Slowdown) belong to the section."""
        stack: list[tuple[int, str]] = []  # (indent, section name)
        heading: str | None = None
        for lineno, line in self.lines:
            indent = len(line) - len(line.lstrip(" "))
            kv = _key_value(line)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            names = [name for _, name in stack]
            if kv is None:
                heading = line.strip()[:_MAX_NAME]
                if len(stack) < _MAX_DEPTH:
                    stack.append((indent, heading))
                continue
            heading = None
            key = kv[0][:_MAX_NAME]
            path = "/".join([*names, key])
            resolved = path if path in _KNOWN_PATHS else (_resolve(path) or path)
            if resolved not in self.values:
                self.values[resolved] = (kv[1], f"{source}:{lineno}: {key}", line.strip())
                self.order.append(resolved)
        self.ends_at_heading = heading


def _section_is_cut(section: str, keys: set[str]) -> bool:
    """A section triage judges lacks the keys nvidia-smi always prints at its end (`keys` are relative)."""
    if section == "ECC Errors":
        if not any(k.startswith("Volatile/") for k in keys):
            return False
        return not ({"Aggregate/DRAM Uncorrectable", "Aggregate/Double Bit/Total"} & keys)
    if section == "Retired Pages":
        return not ({"Pending Page Blacklist", "Pending Page Retirement", "Pending"} & keys)
    if section == "Remapped Rows":
        if any(k.startswith("Bank Remap Availability Histogram/") for k in keys):
            return "Bank Remap Availability Histogram/None" not in keys
        return "Remapping Failure Occurred" not in keys
    if section in REASON_SECTIONS:
        return "HW Slowdown" not in keys or not ({"SW Thermal Slowdown", "Display Clock Setting", "Unknown"} & keys)
    return False


def _top_sections(block: _Block) -> list[str]:
    tops: list[str] = []
    for path in block.order:
        top = path.split("/", 1)[0] if "/" in path else ""
        if top and (not tops or tops[-1] != top):
            tops.append(top)
    return tops


def _has_processes(block: _Block) -> bool:
    return any(p == "Processes" or p.startswith("Processes/") for p in block.values) or any(
        line.strip() == "Processes" for _, line in block.lines
    )


def _cut_short(blocks: list[_Block]) -> str | None:
    """Why the last GPU's record surely ends early, or None."""
    if not blocks:
        return None
    last = blocks[-1]
    if not last.lines:
        return f"the input ends right after the header of GPU {last.bus or '(unnamed)'}"
    if last.ends_at_heading is not None:
        return f"the input ends at the {last.ends_at_heading!r} heading with nothing under it"
    tops = _top_sections(last)
    if last.order and "/" in last.order[-1]:
        section = last.order[-1].split("/", 1)[0]
        keys = {p[len(section) + 1 :] for p in last.values if p.startswith(section + "/")}
        if _section_is_cut(section, keys):
            return f"the input ends inside the {section!r} section"
    if len(blocks) > 1:
        before = blocks[-2]
        same_model = before.values.get("Product Name", ("",))[0] == last.values.get("Product Name", ("",))[0]
        earlier = [t for t in _top_sections(before) if t not in ("Processes", "MIG Devices", "Capabilities")]
        if same_model and tops and len(tops) < len(earlier) and earlier[: len(tops)] == tops:
            return f"the last GPU's record stops after its {tops[-1]!r} section, where the one before goes on"
        if same_model and tops and earlier[: len(tops)] == tops:
            section = tops[-1]
            count = sum(1 for p in last.values if p.startswith(section + "/"))
            if count < sum(1 for p in before.values if p.startswith(section + "/")):
                return f"the input ends inside the last GPU's {section!r} section"
    return None


def _unreadable_values(values: dict[str, tuple[str, str, str]]) -> list[UnreadableValue]:
    found = []
    for path, (value, _, line) in values.items():
        if is_fault(unreadable(value)):
            found.append(UnreadableValue(path, value.strip(), line))
    return found


def _gpu_from_block(block: _Block, problems: list[str] | None) -> GpuRecord:
    flat = {path: (value, where) for path, (value, where, _) in block.values.items()}
    bus_id = block.bus
    gpu = GpuRecord(pci_bus_id=bus_id)
    values: dict[str, tuple[str, str]] = {}
    for name, (text_paths_, _) in FIELDS.items():
        for path in text_paths_:
            if path in flat and (name not in values or _na(values[name][0])):
                values[name] = flat[path]
    if bus_id is not None and ("pci_bus_id" not in values or _na(values["pci_bus_id"][0])):
        values["pci_bus_id"] = (bus_id, "GPU header")
    _fill(gpu, values, problems)
    for scope, target in (("Volatile", "ecc_volatile"), ("Aggregate", "ecc_aggregate")):
        raw = {
            n: flat[f"ECC Errors/{scope}/{k}"]
            for n, (k, _) in ECC_COUNTERS.items()
            if f"ECC Errors/{scope}/{k}" in flat
        }
        setattr(gpu, target, _ecc(raw, problems))
    for name, (key, _) in CLOCK_REASONS.items():
        for section in REASON_SECTIONS:
            if f"{section}/{key}" in flat:
                value = _flag(*flat[f"{section}/{key}"], problems)
                if value is not None:
                    gpu.clock_event_reasons[name] = value
    for level in HISTOGRAM_LEVELS:
        path = f"Remapped Rows/Bank Remap Availability Histogram/{level.capitalize()}"
        if path in flat:
            banks = _integer(flat[path][0].replace("bank(s)", ""), flat[path][1], problems)
            if banks is not None:
                gpu.remap_histogram[level] = banks
    gpu.unreadable = _unreadable_values(block.values)
    return gpu


def parse_query_text(text: str, *, source: str = "nvidia-smi -q", strict: bool = True) -> NvidiaSmiReport:
    """Parse `nvidia-smi -q` text (whole or `-d` sections, excerpts with `[...]` elisions included).

    `strict=False` reads what is there: a value or line that does not read is listed in `problems`."""
    problems: list[str] | None = None if strict else []
    header: dict[str, str] = {}
    blocks: list[_Block] = []
    unreachable: dict[str, str] = {}
    errors: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip().expandtabs(4)
        stripped = line.strip()
        if not stripped or stripped.startswith("=") or stripped == "[...]" or stripped.startswith("$ "):
            continue
        lost = UNREACHABLE.match(stripped)
        if lost is not None:
            unreachable[normalise_pci(lost.group("bus")) or lost.group("bus")] = lost.group("why").strip()
            continue
        if stripped.startswith(FAILURES):
            errors.append(stripped)
            continue
        gpu_header = _GPU_HEADER.match(line)
        if gpu_header is not None:
            blocks.append(_Block(gpu_header.group("bus")))
            continue
        kv = _key_value(line)
        at_margin = not line.startswith(" ")
        if at_margin and kv is not None and kv[0] in _HEADER_KEYS:
            header[kv[0]] = kv[1].strip()
            continue
        if not at_margin or kv is not None or stripped in _SECTION_NAMES:
            if not blocks:
                blocks.append(_Block(None))  # an excerpt with no GPU header: one unnamed GPU
            blocks[-1].lines.append((lineno, line))
            continue
        _bad(
            f"{source}:{lineno}: not an nvidia-smi -q line: {stripped[:60]!r}",
            problems,
            fix="pass the output of `nvidia-smi -q`",
        )
    if not blocks and not header and not unreachable and not errors:
        raise ParseError(f"{source}: no nvidia-smi -q content", fix="pass the output of `nvidia-smi -q`")
    for block in blocks:
        block.flatten(source)
    gpus = [_gpu_from_block(block, problems) for block in blocks]
    driver = _string(header.get("Driver Version", ""))
    cuda = _string(header.get("CUDA Version", ""))
    for index, gpu in enumerate(gpus):
        gpu.index = index
        gpu.driver_version, gpu.cuda_version = driver, cuda
    attached = header.get("Attached GPUs", "")
    report = NvidiaSmiReport(
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda,
        timestamp=_string(header.get("Timestamp", "")),
        attached_gpus=int(attached) if attached.isdigit() and len(attached) < 6 else None,
        unreachable=unreachable,
        errors=errors,
        problems=problems or [],
    )
    cut = _cut_short(blocks)
    if cut and not header and len(blocks) == 1 and blocks[0].bus is None:
        # no GPU header and no log header: lines picked out of a record (an excerpt), whose last section may stop
        # where the person stopped copying; what it shows is judged, and nothing wrong in it is not called healthy
        report.partial = f"an excerpt without its GPU header: {cut}"
    else:
        report.cut_short = cut
    shown = len(gpus) + len(unreachable)
    if report.attached_gpus is not None and shown < report.attached_gpus:
        report.partial = f"it shows {shown} of the {report.attached_gpus} attached GPUs"
    elif blocks and "Product Name" in blocks[-1].values and not _has_processes(blocks[-1]):
        report.partial = "the last GPU's record stops before its Processes entry, where a full `nvidia-smi -q` ends"
    return report


# -- XML (-q -x) ---------------------------------------------------------------------------------------------
def _xml_text(gpu: ET.Element, path: str) -> str | None:
    node = gpu.find(path)
    return None if node is None or node.text is None else node.text


def _xml_unreadable(node: ET.Element, limit: int = 200) -> list[UnreadableValue]:
    """Every element under a `<gpu>` whose text is an error marker, by element path (walked without recursion)."""
    found: list[UnreadableValue] = []
    todo: list[tuple[str, ET.Element]] = [(child.tag, child) for child in reversed(list(node))]
    while todo and len(found) < limit:
        path, element = todo.pop()
        text = (element.text or "").strip()
        if text and is_fault(unreadable(text)):
            found.append(UnreadableValue(path, text, f"<{element.tag}>{text}</{element.tag}>"))
        if path.count("/") < _MAX_DEPTH:
            todo.extend((f"{path}/{child.tag}", child) for child in reversed(list(element)))
    return found


def _gpu_from_xml(node: ET.Element, index: int, source: str, problems: list[str] | None) -> GpuRecord:
    bus = node.get("id")
    where = f"{source}: gpu {bus or index}"
    gpu = GpuRecord(pci_bus_id=bus, index=index)
    values: dict[str, tuple[str, str]] = {}
    for name, (_, xml_paths) in FIELDS.items():
        for path in xml_paths:
            text = _xml_text(node, path)
            if text is not None and (name not in values or _na(values[name][0])):
                values[name] = (text, f"{where}: <{path}>")
    _fill(gpu, values, problems)
    for scope, target in (("volatile", "ecc_volatile"), ("aggregate", "ecc_aggregate")):
        raw = {}
        for name, (_, element) in ECC_COUNTERS.items():
            text = _xml_text(node, f"ecc_errors/{scope}/{element}")
            if text is not None:
                raw[name] = (text, f"{where}: <ecc_errors/{scope}/{element}>")
        setattr(gpu, target, _ecc(raw, problems))
    for name, (_, suffix) in CLOCK_REASONS.items():
        for section, prefix in (
            ("clocks_event_reasons", "clocks_event_reason_"),
            ("clocks_throttle_reasons", "clocks_throttle_reason_"),
        ):
            text = _xml_text(node, f"{section}/{prefix}{suffix}")
            if text is not None:
                value = _flag(text, f"{where}: <{section}/{prefix}{suffix}>", problems)
                if value is not None:
                    gpu.clock_event_reasons[name] = value
    for level in HISTOGRAM_LEVELS:
        text = _xml_text(node, f"remapped_rows/row_remapper_histogram/row_remapper_histogram_{level}")
        if text is not None:
            banks = _integer(text.replace("bank(s)", ""), f"{where}: row_remapper_histogram_{level}", problems)
            if banks is not None:
                gpu.remap_histogram[level] = banks
    gpu.unreadable = _xml_unreadable(node)
    return gpu


def parse_query_xml(text: str, *, source: str = "nvidia-smi -q -x", strict: bool = True) -> NvidiaSmiReport:
    """Parse `nvidia-smi -q -x` XML (root `<nvidia_smi_log>`, one `<gpu id="...">` per GPU)."""
    problems: list[str] | None = None if strict else []
    try:
        root = ET.fromstring(text)
    except (ET.ParseError, ValueError) as exc:
        raise ParseError(f"{source}: not well-formed XML ({exc})", fix="pass the output of `nvidia-smi -q -x`") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(
            f"{source}: root element is <{root.tag[:40]}>, not <nvidia_smi_log>",
            fix="pass the output of `nvidia-smi -q -x`",
        )
    driver = _string(root.findtext("driver_version") or "")
    cuda = _string(root.findtext("cuda_version") or "")
    gpus = [_gpu_from_xml(node, i, source, problems) for i, node in enumerate(root.findall("gpu"))]
    for gpu in gpus:
        gpu.driver_version, gpu.cuda_version = driver, cuda
    attached = (root.findtext("attached_gpus") or "").strip()
    report = NvidiaSmiReport(
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda,
        timestamp=_string(root.findtext("timestamp") or ""),
        attached_gpus=int(attached) if attached.isdigit() and len(attached) < 6 else None,
        problems=problems or [],
    )
    if report.attached_gpus is not None and len(gpus) < report.attached_gpus:
        report.partial = f"it shows {len(gpus)} of the {report.attached_gpus} attached GPUs"
    return report


def parse_query(text: str, *, source: str = "nvidia-smi", strict: bool = True) -> NvidiaSmiReport:
    """Either query format, told apart by its first character."""
    if text.lstrip().startswith("<"):
        return parse_query_xml(text, source=source, strict=strict)
    return parse_query_text(text, source=source, strict=strict)
