"""`nvidia-smi topo -m` (the GPU/NIC connection matrix) and `nvidia-smi nvlink -s` (per-link state and speed).

topo -m prints one row per GPU and NIC: a connection type per column, then CPU affinity, NUMA affinity and, on
newer drivers, GPU NUMA ID. Connection types, from nvidia-smi's legend, best first: NV# (a bonded set of #
NVLinks), PIX (at most one PCIe bridge), PXB (several PCIe bridges), PHB (a PCIe host bridge), NODE (host
bridges within a NUMA node), SYS (across the SMP interconnect between NUMA nodes); X is the device itself.
NICs appear as NIC0.. with a "NIC Legend" naming them (older drivers use the device names, e.g. mlx5_0, as
column heads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError

LINK_TYPES = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")  # SOC: older name for SYS
_COLUMN_SPLIT = re.compile(r"\t+|\s{2,}")
_NIC_LEGEND = re.compile(r"^\s*(?P<alias>NIC\d+):\s*(?P<name>\S+)\s*$")
_DEVICE_HEAD = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|\w+_\d+)$")


@dataclass
class TopoMatrix:
    devices: list[str]  # column order: GPU0.., then NICs
    links: dict[tuple[str, str], str]  # (row, column) -> X, NV12, PIX, PXB, PHB, NODE, SYS
    cpu_affinity: dict[str, str] = field(default_factory=dict)  # device -> "0-23" as printed
    numa_affinity: dict[str, int | None] = field(default_factory=dict)
    gpu_numa_id: dict[str, int | None] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def link(self, a: str, b: str) -> str:
        return self.links[(a, b)]

    def nvlinks(self, a: str, b: str) -> int:
        """Number of NVLinks bonded between two GPUs (0 when they talk over PCIe only)."""
        kind = self.links[(a, b)]
        return int(kind[2:]) if kind.startswith("NV") else 0

    def cpus(self, device: str) -> list[int]:
        return expand_cpu_list(self.cpu_affinity.get(device, ""))


def expand_cpu_list(text: str) -> list[int]:
    """`0-23,48-71` -> [0, ..., 23, 48, ..., 71]; `N/A` -> []."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or part.upper() == "N/A":
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ParseError(f"bad CPU list {text!r}")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def _optional_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_topo_matrix(text: str, *, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    lines = [line.rstrip() for line in text.splitlines()]
    header_at = next(
        (i for i, line in enumerate(lines) if re.match(r"^\s+(GPU0|GPU\d+)\b", line.replace("\t", "    "))),
        None,
    )
    if header_at is None:
        raise ParseError(f"{source}: no GPU0 column header", fix="pass the output of `nvidia-smi topo -m`")
    heads = [h.strip() for h in _COLUMN_SPLIT.split(lines[header_at].strip()) if h.strip()]
    devices = [h for h in heads if _DEVICE_HEAD.match(h)]
    extras = heads[len(devices) :]
    matrix = TopoMatrix(devices=devices, links={})
    for lineno, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        if not line.strip():
            if matrix.links:
                break
            continue
        tokens = line.split()
        name, cells = tokens[0], tokens[1:]
        if name not in devices:
            raise ParseError(f"{source}:{lineno}: row {name!r} is not one of the columns {devices}")
        if len(cells) < len(devices):
            raise ParseError(f"{source}:{lineno}: row {name} has {len(cells)} cells for {len(devices)} devices")
        for column, kind in zip(devices, cells[: len(devices)], strict=True):
            if not _LINK.match(kind):
                raise ParseError(f"{source}:{lineno}: unknown connection type {kind!r} ({name} -> {column})")
            matrix.links[(name, column)] = "SYS" if kind == "SOC" else kind
        for head, value in zip(extras, cells[len(devices) :], strict=False):
            if head == "CPU Affinity":
                matrix.cpu_affinity[name] = value
            elif head == "NUMA Affinity":
                matrix.numa_affinity[name] = _optional_int(value)
            elif head == "GPU NUMA ID":
                matrix.gpu_numa_id[name] = _optional_int(value)
    for line in lines:
        legend = _NIC_LEGEND.match(line)
        if legend is not None:
            matrix.nic_names[legend.group("alias")] = legend.group("name")
    missing = [d for d in devices if (d, d) not in matrix.links]
    if missing:
        raise ParseError(f"{source}: no row for {', '.join(missing)}", fix="is the matrix cut short?")
    return matrix


# -- nvlink -s -----------------------------------------------------------------------------------------------
_NVL_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)\s*$")
_NVL_LINK = re.compile(r"^\s+Link (?P<link>\d+): (?P<state>.+?)\s*$")
_SPEED = re.compile(r"^(?P<speed>\d+(?:\.\d+)?) GB/s$")


@dataclass(frozen=True)
class NvlinkState:
    link: int
    active: bool
    speed_gbps: float | None  # GB/s per direction as nvidia-smi prints it


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    links: list[NvlinkState] = field(default_factory=list)
    all_inactive: bool = False  # NVML reported that every link is inactive

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)

    @property
    def bandwidth_gbps(self) -> float:
        return sum(link.speed_gbps or 0.0 for link in self.links if link.active)


def parse_nvlink_status(text: str, *, source: str = "nvidia-smi nvlink -s") -> list[NvlinkGpu]:
    gpus: list[NvlinkGpu] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        head = _NVL_GPU.match(line)
        if head is not None:
            gpus.append(NvlinkGpu(int(head.group("index")), head.group("name"), head.group("uuid")))
            continue
        if not gpus:
            raise ParseError(f"{source}:{lineno}: link line before any GPU line", fix="pass `nvidia-smi nvlink -s`")
        if "all links are inactive" in line:
            gpus[-1].all_inactive = True
            continue
        link = _NVL_LINK.match(line)
        if link is None:
            raise ParseError(f"{source}:{lineno}: not an nvlink status line: {line.strip()[:60]!r}")
        state = link.group("state")
        speed = _SPEED.match(state)
        if speed is not None:
            gpus[-1].links.append(NvlinkState(int(link.group("link")), True, float(speed.group("speed"))))
        elif "inactive" in state.lower():
            gpus[-1].links.append(NvlinkState(int(link.group("link")), False, None))
        else:
            raise ParseError(f"{source}:{lineno}: unknown link state {state!r}")
    if not gpus:
        raise ParseError(f"{source}: no GPU lines", fix="pass the output of `nvidia-smi nvlink -s`")
    return gpus
