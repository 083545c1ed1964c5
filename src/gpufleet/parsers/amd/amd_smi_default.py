"""`amd-smi` run alone: the default view (AMD SMI 26.0.0, ROCm 7.0.0 and later; ROCm/amdsmi CHANGELOG "Added the
Default command"), a boxed table in nvidia-smi's shape, two rows per GPU (or partition):

    | AMD-SMI 26.0.0+eaa54ecc      amdgpu version: 6.12.12  ROCm version: 7.0.0    |
    | BDF                        GPU-Name | Mem-Uti   Temp   UEC       Power-Usage |
    | GPU  HIP-ID  OAM-ID  Partition-Mode | GFX-Uti    Fan               Mem-Usage |
    | 0000:0c:00.0    AMD Instinct MI300X | 13 %     60 °C   0           734/750 W |
    |   0       0       2        SPX/NPS1 | 98 %       N/A          4976/196592 MB |

UEC is the GPU's uncorrectable ECC count (the total `amd-smi metric --ecc` prints), so it is read as
`ecc.uncorrectable`; Temp is the one temperature the view shows, kept as `temp_c`. A name longer than its cell is
cut from the left (`...Instinct MI300X OAM`). Power reads `N/A`, `N/A/0 W` or `734/750 W`; Fan `N/A`, `0.0 %` or a
bare number. The Processes table after the GPUs is not read. Any other amd-smi report goes to `parse_amd_smi`.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.amd.amd_smi import AmdGpuRecord, AmdSmiReport, parse_amd_smi
from gpufleet.parsers.amd_gaudi_values import add_problem, catalog_model, integer, missing, number, text_of

FIX = "pass the unedited output of `amd-smi` (its default view), or of `amd-smi metric` / `static` / `list`"
_HEADER = re.compile(r"^\|\s*BDF\s+GPU-Name\s*\|\s*Mem-Uti\s+Temp\s+UEC\s+Power-Usage\s*\|")
_VERSION = re.compile(
    r"^\|\s*AMD-SMI (?P<tool>\S+)\s+amdgpu version:\s*(?P<driver>\S+)\s+ROCm version:\s*(?P<rocm>\S+)\s*\|"
)
_BDF = re.compile(r"^(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<name>.*)$")
_PCT = r"N/A|-?\d+(?:\.\d+)?\s*%"
_FIRST = re.compile(rf"^(?P<mem>{_PCT})\s+(?P<temp>N/A|-?\d+(?:\.\d+)?\s*°?C)\s+(?P<uec>N/A|\d+)\s+(?P<power>\S.*)$")
_POWER = re.compile(r"^(?P<draw>N/A|\d+(?:\.\d+)?)\s*(?:/\s*(?P<cap>N/A|\d+(?:\.\d+)?))?\s*W?$")
_SECOND_LEFT = re.compile(r"^(?P<gpu>\d+)\s+(?P<hip>\S+)\s+(?P<oam>\S+)\s+(?P<mode>\S+)$")
_SECOND_RIGHT = re.compile(
    rf"^(?P<gfx>{_PCT})\s+(?P<fan>N/A|\d+(?:\.\d+)?(?:\s*%)?)\s+(?P<mem>\S+)\s*/\s*(?P<total>\S+)\s*MB$"
)


def is_default_view(text: str) -> bool:
    return any(_HEADER.match(line.strip()) for line in text.splitlines()[:40])


def parse_amd_smi_output(text: str, source: str = "amd-smi") -> AmdSmiReport:
    """Any amd-smi output: the default view, or what `parse_amd_smi` reads."""
    return parse_amd_smi_default(text, source) if is_default_view(text) else parse_amd_smi(text, source)


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if len(line) < 3 or line[0] != "|" or line[-1] != "|":
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def parse_amd_smi_default(text: str, source: str = "amd-smi") -> AmdSmiReport:
    report = AmdSmiReport(gpus=[], format="default")
    pending: AmdGpuRecord | None = None
    inside = False
    for number_, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        version = _VERSION.match(line)
        if version:
            report.driver_version = version.group("driver")
            continue
        if _HEADER.match(line):
            inside = True
            continue
        if not inside:
            continue
        if line.startswith("| Processes:") or line.startswith("|  GPU        PID"):
            break
        cells = _cells(line)
        if cells is None or len(cells) != 2 or all(set(c) <= set("-=+") for c in cells):
            continue
        if cells[0].startswith("GPU  HIP-ID"):
            continue  # the header's second line
        if pending is None:
            pending = _first_row(cells, number_, source, report.problems)
            continue
        _second_row(pending, cells, number_, source, report.problems)
        report.gpus.append(pending)
        pending = None
    if pending is not None:
        raise ParseError(f"{source}: GPU {pending.bdf} has its first row but not its second (a cut table?)", fix=FIX)
    if not report.gpus:
        raise ParseError(f"{source}: amd-smi's default view lists no GPU", fix=FIX)
    return report


def _first_row(cells: list[str], number_: int, source: str, problems: list[str]) -> AmdGpuRecord:
    left, right = _BDF.match(cells[0]), _FIRST.match(cells[1])
    if left is None or right is None:
        raise ParseError(f"{source}:{number_}: not a GPU's first row: {' | '.join(cells)[:80]!r}", fix=FIX)
    gpu = AmdGpuRecord(index=-1, bdf=left.group("bdf"), market_name=text_of(left.group("name")))
    gpu.pci = normalise_pci(gpu.bdf) if gpu.bdf else None
    gpu.umc_activity_pct = number(right.group("mem"))
    gpu.temp_c = number(right.group("temp"))
    gpu.ecc.uncorrectable = integer(right.group("uec"))
    power = _POWER.match(right.group("power").strip())
    draw = power.group("draw") if power else right.group("power")
    gpu.power_w = number(draw)
    gpu.power_cap_w = (number(power.group("cap")) or None) if power and power.group("cap") else None
    for name, printed in (("temp_c", right.group("temp")), ("power_w", draw)):
        if getattr(gpu, name) is None and not missing(printed.strip()):
            add_problem(problems, f"{source}:{number_}: {gpu.bdf}: {name} {printed!r} does not read")
    spec = catalog_model(gpu.market_name)
    gpu.model = spec.name if spec else None
    return gpu


def _second_row(gpu: AmdGpuRecord, cells: list[str], number_: int, source: str, problems: list[str]) -> None:
    left, right = _SECOND_LEFT.match(cells[0]), _SECOND_RIGHT.match(cells[1])
    if left is None or right is None:
        raise ParseError(f"{source}:{number_}: not a GPU's second row: {' | '.join(cells)[:80]!r}", fix=FIX)
    gpu.index = int(left.group("gpu"))
    mode = text_of(left.group("mode"))
    if mode and "/" in mode:
        gpu.compute_partition, gpu.memory_partition = (text_of(m) for m in mode.split("/", 1))
    gpu.gfx_activity_pct = number(right.group("gfx"))
    gpu.vram_used_mib, gpu.vram_total_mib = number(right.group("mem")), number(right.group("total"))
    if gpu.vram_total_mib is None and not missing(right.group("total")):
        add_problem(problems, f"{source}:{number_}: GPU {gpu.index}: memory {right.group(0)!r} does not read")
