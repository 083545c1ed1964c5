"""`amd-smi list`, `static`, `metric` and `partition`, as text or `--json`, into per-GPU records.

amd-smi prints each GPU as an indented `KEY: value` tree under `GPU: N` (its text mode is a YAML dump of the same
dict its `--json` mode prints, keys upper-cased), so both forms are read into one lower-case tree and mapped by
the same table of paths. JSON values are `{"value": x, "unit": "W"}` or the bare string "N/A"; newer releases
wrap the list in `{"gpu_data": [...]}`. Key names move between ROCm releases (`num_compute_units` /
`num_of_compute_units`, `vbios` / `ifwi`, `socket_power` / `average_socket_power`): every field lists the paths
it has been seen under, the first present wins, and keys this module does not know are ignored.

Units, as amd-smi's own CLI (amdsmi_cli/amdsmi_commands.py) computes them: memory "MB" is bytes // 2**20 (MiB);
PCIe speed is the library's MT/s / 1000 (GT/s); energy is accumulator x resolution (uJ) / 1e6, printed in J.
Several invocations' outputs may be concatenated (list + static + metric): their trees are merged per GPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    load_json,
    missing,
    number,
    partition_mode,
    text_of,
    to_mib,
    unit_of,
)

FIX = (
    "pass the unedited output of `amd-smi list`, `amd-smi static`, `amd-smi metric` or `amd-smi partition` "
    "(text or --json)"
)
_LOG_PREFIXES = ("DEBUG:", "INFO:", "WARNING:", "ERROR:", "CRITICAL:")
# PCIe generation by per-lane rate in GT/s (amd-smi prints the rate, DCGM counts generations)
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_ENERGY_TO_J = {"j": 1.0, "mj": 1e-3, "uj": 1e-6, "µj": 1e-6}


@dataclass
class EccCount:
    correctable: int | None = None
    uncorrectable: int | None = None
    deferred: int | None = None


@dataclass
class AmdGpuRecord:
    """One AMD GPU (or one partition of one) as amd-smi or rocm-smi reports it. Fields not reported are None."""

    index: int
    bdf: str | None = None  # as printed, e.g. 0000:05:00.0 (partitions of one GPU end .1, .2, ...)
    pci: str | None = None  # normalised domain:bus:device, joins with kernel events
    uuid: str | None = None
    guid: str | None = None  # rocm-smi's KFD GUID: unique per GPU or partition, stable across reboots
    serial: str | None = None
    kfd_id: int | None = None
    node_id: int | None = None
    market_name: str | None = None
    device_id: str | None = None
    model: str | None = None  # the catalog model (mi300x), when the name or device id is known to it
    gfx_target: str | None = None
    compute_units: int | None = None
    driver_version: str | None = None
    compute_partition: str | None = None  # SPX, DPX, QPX, CPX
    memory_partition: str | None = None  # NPS1, NPS4
    partition_id: int | None = None
    gfx_activity_pct: float | None = None
    umc_activity_pct: float | None = None
    mm_activity_pct: float | None = None
    vram_total_mib: float | None = None
    vram_used_mib: float | None = None
    vram_used_pct: float | None = None  # rocm-smi's VRAM% where it gives no sizes
    temp_edge_c: float | None = None
    temp_hotspot_c: float | None = None  # the junction temperature
    temp_mem_c: float | None = None
    temp_hbm_c: list[float] = field(default_factory=list)
    temp_c: float | None = None  # the one temperature the default view (`amd-smi` alone) prints
    # the limits `amd-smi static --limit` prints (amdsmi_get_temp_metric CRITICAL = slowdown, EMERGENCY = shutdown)
    hotspot_slowdown_c: float | None = None
    hotspot_shutdown_c: float | None = None
    mem_slowdown_c: float | None = None
    mem_shutdown_c: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    gfx_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    energy_j: float | None = None
    pcie_width: int | None = None
    pcie_speed_gts: float | None = None
    pcie_max_width: int | None = None
    pcie_max_speed_gts: float | None = None
    pcie_replay_count: int | None = None
    pcie_recovery_count: int | None = None
    ecc: EccCount = field(default_factory=EccCount)
    ecc_blocks: dict[str, EccCount] = field(default_factory=dict)
    ecc_blocks_off: list[str] = field(default_factory=list)  # RAS blocks whose ECC is off (rocm-smi --showrasinfo)
    throttle_status: str | None = None

    @property
    def partition(self) -> str:
        """The mode as device plugins name it ("CPX_NPS4"); "" when neither mode is known."""
        return partition_mode(self.compute_partition, self.memory_partition)

    @property
    def pcie_gen(self) -> int | None:
        return None if self.pcie_speed_gts is None else PCIE_GEN_BY_GTS.get(self.pcie_speed_gts)

    @property
    def pcie_max_gen(self) -> int | None:
        return None if self.pcie_max_speed_gts is None else PCIE_GEN_BY_GTS.get(self.pcie_max_speed_gts)

    @property
    def vram_free_mib(self) -> float | None:
        if self.vram_total_mib is None or self.vram_used_mib is None:
            return None
        return self.vram_total_mib - self.vram_used_mib


@dataclass
class AmdSmiReport:
    gpus: list[AmdGpuRecord]
    tool: str = "amd-smi"
    format: str = "text"  # text, json, partition (amd-smi); table, json, metrics (rocm-smi)
    driver_version: str | None = None
    problems: list[str] = field(default_factory=list)  # values that did not read, noted rather than fatal


# (record field, paths in the lower-cased tree, how to read it)
_TEXT, _INT, _NUM, _MIB, _GTS = "text", "int", "num", "mib", "gts"
FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bdf", ("bdf", "bus.bdf"), _TEXT),
    ("uuid", ("uuid",), _TEXT),
    ("kfd_id", ("kfd_id",), _INT),
    ("node_id", ("node_id",), _INT),
    ("partition_id", ("partition_id", "partition.partition_id"), _INT),
    ("market_name", ("asic.market_name", "market_name"), _TEXT),
    ("device_id", ("asic.device_id",), _TEXT),
    ("serial", ("asic.asic_serial", "board.product_serial"), _TEXT),
    ("gfx_target", ("asic.target_graphics_version",), _TEXT),
    ("compute_units", ("asic.num_compute_units", "asic.num_of_compute_units"), _INT),
    ("driver_version", ("driver.version", "driver.driver_version"), _TEXT),
    ("compute_partition", ("partition.compute_partition", "partition.accelerator_partition"), _TEXT),
    ("memory_partition", ("partition.memory_partition",), _TEXT),
    ("pcie_max_width", ("bus.max_pcie_width",), _INT),
    ("pcie_max_speed_gts", ("bus.max_pcie_speed",), _GTS),
    ("power_cap_w", ("limit.socket_power", "limit.ppt0.socket_power_limit", "limit.max_power"), _NUM),
    ("vram_total_mib", ("mem_usage.total_vram", "vram.size", "vram.vram_size"), _MIB),
    ("vram_used_mib", ("mem_usage.used_vram",), _MIB),
    ("gfx_activity_pct", ("usage.gfx_activity",), _NUM),
    ("umc_activity_pct", ("usage.umc_activity",), _NUM),
    ("mm_activity_pct", ("usage.mm_activity",), _NUM),
    ("power_w", ("power.socket_power", "power.current_socket_power", "power.average_socket_power"), _NUM),
    ("throttle_status", ("power.throttle_status",), _TEXT),
    ("temp_edge_c", ("temperature.edge",), _NUM),
    ("hotspot_slowdown_c", ("limit.slowdown_hotspot_temperature",), _NUM),
    ("hotspot_shutdown_c", ("limit.shutdown_hotspot_temperature",), _NUM),
    ("mem_slowdown_c", ("limit.slowdown_vram_temperature", "limit.slowdown_mem_temperature"), _NUM),
    ("mem_shutdown_c", ("limit.shutdown_vram_temperature", "limit.shutdown_mem_temperature"), _NUM),
    ("temp_hotspot_c", ("temperature.hotspot", "temperature.junction"), _NUM),
    ("temp_mem_c", ("temperature.mem", "temperature.vram"), _NUM),
    ("pcie_width", ("pcie.width",), _INT),
    ("pcie_speed_gts", ("pcie.speed",), _GTS),
    ("pcie_replay_count", ("pcie.replay_count",), _INT),
    ("pcie_recovery_count", ("pcie.l0_to_recovery_count",), _INT),
)


def parse_amd_smi(text: str, source: str = "amd-smi") -> AmdSmiReport:
    """Any of amd-smi's per-GPU reports, told apart by shape: JSON, the `partition` tables, or indented text."""
    stripped = text.strip()
    if not stripped:
        raise ParseError(f"{source} is empty", fix=FIX)
    if stripped.startswith(("[", "{")):
        entries, fmt = _json_entries(stripped, source), "json"
    elif any(line.strip() == "CURRENT_PARTITION:" for line in stripped.splitlines()):
        return parse_amd_smi_partition(text, source)
    else:
        entries, fmt = _text_entries(text, source), "text"
    report = AmdSmiReport(gpus=[], format=fmt)
    for index, tree in sorted(entries.items()):
        report.gpus.append(_record(index, tree, report.problems, source))
    drivers = {g.driver_version for g in report.gpus if g.driver_version}
    report.driver_version = drivers.pop() if len(drivers) == 1 else None
    return report


def _json_entries(text: str, source: str) -> dict[int, dict[str, Any]]:
    data = load_json(text, source, FIX)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    if not isinstance(data, list):
        raise ParseError(f"{source}: expected a list of per-GPU objects, got {type(data).__name__}", fix=FIX)
    entries: dict[int, dict[str, Any]] = {}
    for item in data:
        if not isinstance(item, dict):
            raise ParseError(f"{source}: a GPU entry is {type(item).__name__}, not an object", fix=FIX)
        gpu = item.get("gpu")
        if gpu is None:
            continue  # a CPU or core entry of `amd-smi static` on an APU host
        if isinstance(gpu, bool) or not isinstance(gpu, int):
            raise ParseError(f'{source}: a GPU entry\'s "gpu" is {gpu!r}, not an index', fix=FIX)
        _merge(entries.setdefault(gpu, {}), _lower(item))
    if not entries:
        raise ParseError(f'{source}: no GPU entry (an object with "gpu": N) in the JSON', fix=FIX)
    return entries


def _text_entries(text: str, source: str) -> dict[int, dict[str, Any]]:
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("ERROR:")]
    entries: dict[int, dict[str, Any]] = {}
    for line, tree in indented_tree(text, source, skip=_LOG_PREFIXES, fix=FIX):
        if line.key.upper() != "GPU":
            continue  # CPU and core blocks, a Python warning printed before the report
        index = integer(line.value)
        if index is None:
            raise ParseError(f"{source}:{line.number}: `GPU:` is followed by {line.value!r}, not an index", fix=FIX)
        _merge(entries.setdefault(index, {}), _lower(tree))
    if not entries:
        said = f"; amd-smi said: {errors[0]}" if errors else ""
        raise ParseError(f"{source}: no `GPU: N` block{said}", fix=FIX)
    return entries


def _lower(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {str(k).lower(): _lower(v) for k, v in tree.items()}
    return tree


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _read(kind: str, value: Any) -> Any:
    if kind == _TEXT:
        return text_of(value)
    if kind == _INT:
        return integer(value)
    if kind == _MIB:
        return to_mib(value, "MB")
    if kind == _GTS:
        speed = number(value)
        # the library's MT/s where a caller printed it raw (32000), amd-smi's GT/s otherwise
        return None if speed is None else (speed / 1000 if speed > 100 else speed)
    return number(value)


def _record(index: int, tree: dict[str, Any], problems: list[str], source: str) -> AmdGpuRecord:
    record = AmdGpuRecord(index=index)
    for name, paths, kind in FIELDS:
        raw = find(tree, *paths)
        if raw is None or isinstance(raw, list) or (isinstance(raw, Mapping) and "value" not in raw):
            continue
        value = _read(kind, raw)
        if value is None and not missing(raw.get("value") if isinstance(raw, Mapping) else raw):
            add_problem(problems, f"{source}: GPU {index}: {name} {raw!r} does not read")
            continue
        setattr(record, name, value)
    record.pci = normalise_pci(record.bdf) if record.bdf else None
    record.gfx_clock_mhz = _clock(tree, "gfx")
    record.mem_clock_mhz = _clock(tree, "mem")
    record.energy_j = _energy(find(tree, "energy.total_energy_consumption"))
    _ecc(record, tree)
    board_name = text_of(find(tree, "board.product_name"))
    spec = catalog_model(record.market_name, record.device_id) or catalog_model(board_name)
    record.model = spec.name if spec else None
    if record.market_name is None and board_name:
        record.market_name = board_name
    return record


def _clock(tree: Mapping[str, Any], kind: str) -> float | None:
    """The current clock of a domain: `gfx_0`..`gfx_7` (one per XCD on MI300) are averaged, `mem_0` read alone;
    older releases print `gfx` and `mem` without the index."""
    clocks = find(tree, "clock")
    if not isinstance(clocks, Mapping):
        return None
    readings = [
        number(find(entry, "clk", "cur_clk"))
        for name, entry in clocks.items()
        if isinstance(entry, Mapping)
        and (name == kind or (name.startswith(f"{kind}_") and name[len(kind) + 1 :].isdigit()))
    ]
    found = [r for r in readings if r is not None]
    return round(sum(found) / len(found), 1) if found else None


def _energy(value: Any) -> float | None:
    amount = number(value)
    if amount is None:
        return None
    scale = _ENERGY_TO_J.get((unit_of(value) or "J").lower())
    return None if scale is None else amount * scale


def _ecc(record: AmdGpuRecord, tree: Mapping[str, Any]) -> None:
    ecc = find(tree, "ecc")
    if isinstance(ecc, Mapping):
        record.ecc = EccCount(
            integer(find(ecc, "total_correctable_count", "correctable_count")),
            integer(find(ecc, "total_uncorrectable_count", "uncorrectable_count")),
            integer(find(ecc, "total_deferred_count", "deferred_count")),
        )
    blocks = find(tree, "ecc_blocks")
    if isinstance(blocks, Mapping):
        for block, counts in blocks.items():
            if isinstance(counts, Mapping):
                record.ecc_blocks[block.upper()] = EccCount(
                    integer(find(counts, "correctable_count")),
                    integer(find(counts, "uncorrectable_count")),
                    integer(find(counts, "deferred_count")),
                )


def parse_amd_smi_partition(text: str, source: str = "amd-smi") -> AmdSmiReport:
    """`amd-smi partition`: the CURRENT_PARTITION table (GPU_ID, MEMORY, ACCELERATOR_TYPE, profile, PARTITION_ID).

    The tables after it (MEMORY_PARTITION, ACCELERATOR_PARTITION_PROFILES) describe what a GPU could be set to,
    not what it is, and are not read. "N/A" columns (an MI300 whose driver does not report accelerator profiles)
    leave the field empty.
    """
    rows = list(_current_partition_rows(text, source))
    if not rows:
        raise ParseError(f"{source}: the CURRENT_PARTITION table has no GPU rows", fix=FIX)
    gpus = []
    for number_, cells in rows:
        index = integer(cells.get("GPU_ID"))
        if index is None:
            raise ParseError(f"{source}:{number_}: GPU_ID {cells.get('GPU_ID')!r} is not an index", fix=FIX)
        gpus.append(
            AmdGpuRecord(
                index=index,
                memory_partition=text_of(cells.get("MEMORY")),
                compute_partition=text_of(cells.get("ACCELERATOR_TYPE")),
                partition_id=integer(cells.get("PARTITION_ID")),
            )
        )
    return AmdSmiReport(gpus=gpus, format="partition")


def _current_partition_rows(text: str, source: str) -> Iterator[tuple[int, dict[str, str]]]:
    header: list[str] | None = None
    inside = False
    for number_, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(_LOG_PREFIXES):
            continue
        if line.endswith(":") and line[:-1].replace("_", "").isalpha():
            inside, header = line == "CURRENT_PARTITION:", None
            continue
        if not inside:
            continue
        cells = line.split()
        if header is None:
            header = cells
            if "GPU_ID" not in header:
                raise ParseError(f"{source}:{number_}: the CURRENT_PARTITION header has no GPU_ID column", fix=FIX)
            continue
        if len(cells) != len(header):
            raise ParseError(
                f"{source}:{number_}: {len(cells)} cells under a {len(header)}-column header: {line[:70]!r}", fix=FIX
            )
        yield number_, dict(zip(header, cells, strict=True))
