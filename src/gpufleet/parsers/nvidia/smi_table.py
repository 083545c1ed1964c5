"""The plain `nvidia-smi` table, as the same per-GPU records `nvidia-smi -q` gives (with fewer fields filled).

    | NVIDIA-SMI 550.90.12              Driver Version: 550.90.12      CUDA Version: 12.4     |
    |=========================================+========================+======================|
    |   0  NVIDIA A100 80GB PCIe          Off |   00000000:01:00.0 Off |                    0 |
    | N/A   32C    P0             69W /  300W |     437MiB /  81920MiB |    100%      Default |
    |                                         |                        |             Disabled |

Each GPU is a block of as many lines as the header has rows: two on old drivers, three on drivers that print
the MIG mode on its own line. Older drivers print `Default` and the MIG mode in one cell; the process table below
the GPUs is not read. A cell nvidia-smi could not read holds `ERR!` (the name, the fan, temperature, power, ECC,
utilisation and MIG cells all can); the ECC cell holds `Off` when ECC is disabled and `N/A` when the GPU has none.

The table does not say how many GPUs the host has: a text that ends after a whole GPU block, before the process
table, may be a cut one, which `partial` says.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.parsers.nvidia.smi import (
    FAILURES,
    MAX_PROBLEMS,
    UNREACHABLE,
    GpuRecord,
    NvidiaSmiReport,
    UnreadableValue,
    _na,
)
from gpufleet.parsers.nvidia.smi_values import is_fault, unreadable

_VERSIONS = re.compile(r"NVIDIA-SMI (?P<smi>\S+)\s+Driver Version: (?P<driver>\S+)\s+CUDA Version: (?P<cuda>\S+)")
_PERSISTENCE = ("On", "Off", "N/A", "ERR!", "WDDM", "TCC")  # Windows prints the driver model in this column
_BUS = re.compile(r"^\s*(?P<bus>\S+)(?:\s+(?P<disp>\S+))?\s*$")
# fan, temperature, performance state, then `draw / cap` (the slash between them has a space beside it; N/A has none)
_SECOND = re.compile(r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<power>\S.*)$")
_POWER_SPLIT = re.compile(r"\s+/\s*|/\s+")
_MEMORY = re.compile(r"^\s*(?P<used>\d{1,12})MiB\s*/\s*(?P<total>\d{1,12})MiB\s*$")
_HEADER_FIRST = re.compile(r"^\|\s*GPU\s+Name\b")
_END = ("Processes:", "MIG devices:")


def _num(text: str, unit: str) -> float | None:
    text = text.strip()
    if _na(text) or len(text) > 24:
        return None
    try:
        return float(text.removesuffix(unit))
    except ValueError:
        return None


def _first_row(cell: str) -> tuple[int, str, str] | None:
    """A GPU's first row, `   0  NVIDIA A100-SXM4-80GB   On `: index, name, persistence mode."""
    tokens = cell.split()
    if len(tokens) < 3 or not tokens[0].isdigit() or len(tokens[0]) > 4 or tokens[-1] not in _PERSISTENCE:
        return None
    return int(tokens[0]), " ".join(tokens[1:-1]), tokens[-1]


def _cells(line: str) -> list[str] | None:
    if not line.startswith("|") or not line.rstrip().endswith("|"):
        return None
    return [c for c in line.strip()[1:-1].split("|")]


def _ruled(cells: list[str]) -> bool:
    """A `|===+===|` rule between the header and the GPUs."""
    return all(set(c.strip()) <= {"=", "+", "-"} and c.strip() for c in cells)


class _Table:
    """Reads the GPU rows one line at a time, keeping each GPU's block of lines."""

    def __init__(self, source: str, strict: bool) -> None:
        self.source = source
        self.problems: list[str] | None = None if strict else []
        self.gpus: list[GpuRecord] = []
        self.rows_per_gpu: int | None = None
        self.header_rows = 0
        self.in_header = False
        self.current: GpuRecord | None = None
        self.block_lines = 0
        self.closed = True  # the last GPU block was followed by a border
        self.ended = False  # the process table (or MIG device table) after the GPUs was reached
        self.driver: str | None = None
        self.cuda: str | None = None

    def bad(self, lineno: int, message: str, line: str) -> None:
        text = f"{self.source}:{lineno}: {message}: {line.strip()[:70]!r}"
        if self.problems is None:
            raise ParseError(text, fix="pass the output of plain `nvidia-smi`, unedited")
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def mark(self, gpu: GpuRecord, name: str, text: str, line: str) -> None:
        text = text.strip()
        if is_fault(unreadable(text)):
            gpu.unreadable.append(UnreadableValue(name, text, line.strip()))

    def feed(self, lineno: int, line: str) -> None:
        cells = _cells(line)
        if cells is not None and _ruled(cells):
            if self.in_header:
                self.rows_per_gpu, self.in_header = self.header_rows, False
            self.close()
            return
        if cells is None or len(cells) != 3:
            if line.startswith("+"):
                self.close()
            return
        if _HEADER_FIRST.match(line):
            self.in_header, self.header_rows = True, 1
            return
        if self.in_header:
            self.header_rows += 1
            return
        first = _first_row(cells[0])
        if first is not None:
            self.start(lineno, line, cells, *first)
        elif self.current is not None:
            self.block_lines += 1
            if self.block_lines == 2:
                self.second(lineno, line, cells, self.current)
            elif self.block_lines == 3 and cells[2].strip():
                self.current.mig_mode_current = None if _na(cells[2]) else cells[2].strip()
                self.mark(self.current, "MIG M.", cells[2], line)

    def close(self) -> None:
        if self.current is not None:
            self.closed = True
        self.current = None

    def start(self, lineno: int, line: str, cells: list[str], index: int, name: str, persistence: str) -> None:
        bus = _BUS.match(cells[1])
        bus_id = bus.group("bus") if bus is not None else None
        gpu = GpuRecord(
            index=index,
            product_name=None if _na(name) else name,
            persistence_mode={"On": True, "Off": False}.get(persistence),
            pci_bus_id=bus_id,
            pci=normalise_pci(bus_id) if bus_id else None,
            driver_version=self.driver,
            cuda_version=self.cuda,
        )
        self.mark(gpu, "Name", name, line)
        if bus is not None and bus.group("disp"):
            self.mark(gpu, "Disp.A", bus.group("disp"), line)
        ecc = cells[2].strip()
        self.mark(gpu, "Volatile Uncorr. ECC", ecc, line)
        if ecc.lower() == "off":  # the cell shows the count only when ECC is on
            gpu.ecc_mode_current = False
        elif ecc.isdigit() and len(ecc) < 19:
            gpu.ecc_mode_current = True
            gpu.ecc_volatile_uncorrected_total = int(ecc)
        elif not _na(ecc):
            self.bad(lineno, f"bad Volatile Uncorr. ECC value {ecc[:20]!r}", line)
        self.gpus.append(gpu)
        self.current, self.block_lines, self.closed = gpu, 1, False

    def second(self, lineno: int, line: str, cells: list[str], gpu: GpuRecord) -> None:
        second = _SECOND.match(cells[0].rstrip())
        power = _POWER_SPLIT.split(second.group("power").strip(), maxsplit=1) if second is not None else []
        if second is None or len(power) != 2 or len(power[1].split()) != 1:
            for token in cells[0].split():
                self.mark(gpu, "Fan/Temp/Perf/Pwr", token, line)
            self.bad(lineno, "cannot read fan/temp/perf/power", line)
        else:
            draw, cap = (part.strip() for part in power)
            fan, temp, perf = second.group("fan"), second.group("temp"), second.group("perf")
            for label, text in (("Fan", fan), ("Temp", temp), ("Perf", perf), ("Pwr:Usage", draw), ("Pwr:Cap", cap)):
                self.mark(gpu, label, text, line)
            gpu.fan_speed_pct = _num(fan, "%")
            gpu.temp_c = _num(temp, "C")
            gpu.performance_state = None if _na(perf) else perf
            gpu.power_draw_w = _num(draw, "W")
            gpu.power_limit_w = _num(cap, "W")
        memory = _MEMORY.match(cells[1])
        if memory is not None:
            gpu.memory_used_mib = float(memory.group("used"))
            gpu.memory_total_mib = float(memory.group("total"))
        else:
            for token in cells[1].split():
                self.mark(gpu, "Memory-Usage", token, line)
        util = cells[2].split()
        if len(util) >= 2:
            self.mark(gpu, "GPU-Util", util[0], line)
            gpu.gpu_util_pct = _num(util[0], "%")
            compute, _, mig = " ".join(util[1:]).partition(" / ")
            gpu.compute_mode = None if _na(compute) else compute
            self.mark(gpu, "Compute M.", compute, line)
            if mig:
                gpu.mig_mode_current = None if _na(mig) else mig.strip()
                self.mark(gpu, "MIG M.", mig, line)
        elif util:
            self.mark(gpu, "GPU-Util", util[0], line)

    def last_block_is_whole(self) -> bool:
        if self.current is None or self.closed:
            return True
        return self.block_lines >= (self.rows_per_gpu or 2)


def parse_table(text: str, *, source: str = "nvidia-smi", strict: bool = True) -> NvidiaSmiReport:
    """Parse the default `nvidia-smi` output (the GPU table; the process table is skipped).

    `strict=False` reads what is there: a row that does not read is listed in `problems`."""
    table = _Table(source, strict)
    timestamp = None
    unreachable: dict[str, str] = {}
    errors: list[str] = []
    lines = text.splitlines()
    if lines and not lines[0].startswith(("|", "+")) and len(lines[0]) < 80 and re.search(r"\d\d:\d\d:\d\d", lines[0]):
        timestamp = lines[0].strip() or None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        stripped = line.strip()
        versions = _VERSIONS.search(line)
        if versions is not None:
            table.driver, table.cuda = versions.group("driver"), versions.group("cuda")
            continue
        if any(end in line for end in _END):
            table.ended = True
            break
        lost = UNREACHABLE.match(stripped)
        if lost is not None:
            unreachable[normalise_pci(lost.group("bus")) or lost.group("bus")] = lost.group("why").strip()
            continue
        if stripped.startswith(FAILURES):
            errors.append(stripped)
            continue
        table.feed(lineno, line)
    if not table.gpus and not unreachable and not errors:
        raise ParseError(f"{source}: no GPU rows found", fix="pass the output of plain `nvidia-smi`")
    report = NvidiaSmiReport(
        gpus=table.gpus,
        driver_version=table.driver,
        cuda_version=table.cuda,
        timestamp=timestamp,
        unreachable=unreachable,
        errors=errors,
        problems=table.problems or [],
    )
    if table.gpus:
        last = table.gpus[-1]
        if not table.last_block_is_whole():
            report.cut_short = f"the input ends inside GPU {last.index}'s rows"
        elif not table.ended:
            report.partial = (
                f"it ends after GPU {last.index}, before the process table, and the table does not say how many GPUs "
                "there are: any after it are not in the input"
            )
    return report
