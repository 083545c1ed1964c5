"""The plain `nvidia-smi` table, as the same per-GPU records `nvidia-smi -q` gives (with fewer fields filled).

    | NVIDIA-SMI 550.90.12              Driver Version: 550.90.12      CUDA Version: 12.4     |
    |=========================================+========================+======================|
    |   0  NVIDIA A100 80GB PCIe          Off |   00000000:01:00.0 Off |                    0 |
    | N/A   32C    P0             69W /  300W |     437MiB /  81920MiB |    100%      Default |
    |                                         |                        |             Disabled |

Each GPU is a block of two lines (three on drivers that print the MIG mode on its own line). Older drivers
print `Default` and the MIG mode in one cell; the process table below the GPUs is not read.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.pci import normalise_pci
from gpufleet.sources.nvidia_smi import GpuRecord, NvidiaSmiReport, _na

_VERSIONS = re.compile(r"NVIDIA-SMI (?P<smi>\S+)\s+Driver Version: (?P<driver>\S+)\s+CUDA Version: (?P<cuda>\S+)")
_FIRST = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)\s*$")
_BUS = re.compile(r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*$")
_SECOND = re.compile(r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>P\d+|\S+)\s+(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*$")
_MEMORY = re.compile(r"^\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*$")
_UTIL = re.compile(r"^\s*(?P<util>\S+)\s+(?P<mode>.+?)\s*$")


def _num(text: str, unit: str) -> float | None:
    text = text.strip()
    if _na(text):
        return None
    try:
        return float(text.removesuffix(unit))
    except ValueError:
        return None


def _cells(line: str) -> list[str] | None:
    if not line.startswith("|") or not line.rstrip().endswith("|"):
        return None
    return [c for c in line.strip()[1:-1].split("|")]


def parse_table(text: str, *, source: str = "nvidia-smi") -> NvidiaSmiReport:
    """Parse the default `nvidia-smi` output (the GPU table; the process table is skipped)."""
    driver = cuda = None
    timestamp = None
    gpus: list[GpuRecord] = []
    current: GpuRecord | None = None
    line_in_block = 0
    lines = text.splitlines()
    if lines and not lines[0].startswith(("|", "+")):
        timestamp = lines[0].strip() or None
    for lineno, line in enumerate(lines, start=1):
        versions = _VERSIONS.search(line)
        if versions is not None:
            driver, cuda = versions.group("driver"), versions.group("cuda")
            continue
        if "Processes:" in line:
            break
        cells = _cells(line)
        if cells is None or len(cells) != 3:
            current = None if line.startswith("+") else current
            continue
        first = _FIRST.match(cells[0])
        if first is not None:
            bus = _BUS.match(cells[1])
            if bus is None:
                raise ParseError(
                    f"{source}:{lineno}: GPU row without a bus id: {line.strip()[:70]!r}",
                    fix="pass the output of plain `nvidia-smi`, unedited",
                )
            current = GpuRecord(
                index=int(first.group("index")),
                product_name=first.group("name"),
                persistence_mode=first.group("persistence") == "On",
                pci_bus_id=bus.group("bus"),
                pci=normalise_pci(bus.group("bus")),
                driver_version=driver,
                cuda_version=cuda,
            )
            ecc = cells[2].strip()
            if not _na(ecc):
                try:
                    current.ecc_volatile_uncorrected_total = int(ecc)
                except ValueError as exc:
                    raise ParseError(
                        f"{source}:{lineno}: bad Volatile Uncorr. ECC value {ecc!r}",
                        fix="pass the output of plain `nvidia-smi`, unedited",
                    ) from exc
            gpus.append(current)
            line_in_block = 1
            continue
        if current is None:
            continue
        line_in_block += 1
        if line_in_block == 2:
            second = _SECOND.match(cells[0])
            if second is None:
                raise ParseError(
                    f"{source}:{lineno}: cannot read fan/temp/perf/power: {cells[0].strip()!r}",
                    fix="pass the output of plain `nvidia-smi`, unedited",
                )
            current.fan_speed_pct = _num(second.group("fan"), "%")
            current.temp_c = _num(second.group("temp"), "C")
            current.performance_state = second.group("perf")
            current.power_draw_w = _num(second.group("draw"), "W")
            current.power_limit_w = _num(second.group("cap"), "W")
            memory = _MEMORY.match(cells[1])
            if memory is not None:
                current.memory_used_mib = float(memory.group("used"))
                current.memory_total_mib = float(memory.group("total"))
            util = _UTIL.match(cells[2])
            if util is not None:
                current.gpu_util_pct = _num(util.group("util"), "%")
                mode = util.group("mode")
                current.compute_mode, _, mig = mode.partition(" / ")
                if mig:
                    current.mig_mode_current = mig.strip()
        elif line_in_block == 3 and cells[2].strip():
            current.mig_mode_current = cells[2].strip()
    if not gpus:
        raise ParseError(f"{source}: no GPU rows found", fix="pass the output of plain `nvidia-smi`")
    return NvidiaSmiReport(gpus=gpus, driver_version=driver, cuda_version=cuda, timestamp=timestamp)
