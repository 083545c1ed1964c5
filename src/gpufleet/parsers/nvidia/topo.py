"""`nvidia-smi topo -m` (the GPU/NIC connection matrix) and `nvidia-smi nvlink -s` (per-link state and speed).

topo -m prints one row per GPU and NIC: a connection type per column, then CPU affinity, NUMA affinity and, on
newer drivers, GPU NUMA ID. Connection types, from nvidia-smi's legend, best first: NV# (a bonded set of #
NVLinks), PIX (at most one PCIe bridge), PXB (several PCIe bridges), PHB (a PCIe host bridge), NODE (host
bridges within a NUMA node), SYS (across the SMP interconnect between NUMA nodes); X is the device itself.
NICs appear as NIC0.. with a "NIC Legend" naming them (older drivers use the device names, e.g. mlx5_0, as
column heads). Columns are tab-separated as printed; a paste may have turned the tabs into spaces.

nvlink -s prints, per GPU, a `GPU n: NAME (UUID: ...)` line and then one `Link n: <speed> GB/s` or
`Link n: <inactive>` line per link; a GPU whose links are all down gets NVML's "Unable to retrieve NVLink
information as all links are inActive" instead, and one without NVLink "Device does not have or support Nvlink"
(driver R595) or nothing at all (older drivers).

With `strict=False` both parsers read what is there: a row or line that does not read is noted in `problems`,
and a matrix or GPU cut short says so in `cut_short`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError
from gpufleet.parsers.nvidia.smi_values import is_fault, unreadable

LINK_TYPES = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
PCIE_TYPES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_LINK = re.compile(r"^(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")  # SOC: older name for SYS
_DEVICE_HEAD = re.compile(r"^(GPU\d{1,4}|NIC\d{1,4}|mlx\d+_\d+|[A-Za-z]\w{0,30}_\d{1,4})$")
_EXTRAS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND = re.compile(r"^\s*(?P<alias>NIC\d{1,4}):\s*(?P<name>\S+)\s*$")
_PRODUCT = re.compile(r"^\s*GPU \d{1,4}: (?P<name>.+?) \(UUID: [^)]*\)")  # `nvidia-smi -L` pasted alongside
MAX_CPUS = 1 << 16
MAX_DEVICES = 256  # a node has at most a few dozen GPUs and NICs; the matrix grows with the square
MAX_PROBLEMS = 50


@dataclass
class TopoMatrix:
    devices: list[str]  # column order: GPU0.., then NICs
    links: dict[tuple[str, str], str]  # (row, column) -> X, NV12, PIX, PXB, PHB, NODE, SYS
    cpu_affinity: dict[str, str] = field(default_factory=dict)  # device -> "0-23" as printed
    numa_affinity: dict[str, int | None] = field(default_factory=dict)
    numa_lists: dict[str, list[int]] = field(default_factory=dict)  # "0,3-9,11-17" on Grace: the CPU's node first
    gpu_numa_id: dict[str, int | None] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    product_names: list[str] = field(default_factory=list)  # GPU names the text carries besides the matrix
    rows: dict[str, str] = field(default_factory=dict)  # device -> its row as printed
    cut_short: str | None = None  # why the matrix surely ends early (strict=False only)
    problems: list[str] = field(default_factory=list)  # what did not read (strict=False only)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def link(self, a: str, b: str) -> str:
        return self.links[(a, b)]

    def link_between(self, a: str, b: str) -> str | None:
        """The connection as either row prints it (the matrix is symmetric; a cut one may lack a row)."""
        return self.links.get((a, b)) or self.links.get((b, a))

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
        if not lo.isdigit() or (hi and not hi.isdigit()) or len(lo) > 6 or len(hi) > 6:
            raise ParseError(f"bad CPU list {text[:60]!r}")
        first, last = int(lo), int(hi or lo)
        if last - first + len(cpus) >= MAX_CPUS:
            raise ParseError(f"CPU list {text[:60]!r} names more than {MAX_CPUS} CPUs")
        cpus.extend(range(first, last + 1))
    return cpus


def _optional_int(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 7 else None


def _node_list(text: str) -> list[int]:
    """A NUMA node list as printed ("1", "0,3-9,11-17"); empty when it does not read (N/A)."""
    try:
        return expand_cpu_list(text)[:MAX_DEVICES]
    except ParseError:
        return []


def _header(line: str) -> tuple[list[str], list[str]] | None:
    """Device columns and the extra columns after them, when `line` is the matrix's header."""
    tokens = line.split()
    if not tokens or tokens[0] != "GPU0" or (len(tokens) > 1 and _LINK.match(tokens[1])):
        return None
    devices: list[str] = []
    for token in tokens:
        if not _DEVICE_HEAD.match(token) or len(devices) >= MAX_DEVICES:
            break
        devices.append(token)
    rest = " ".join(tokens[len(devices) :])
    extras = sorted((e for e in _EXTRAS if e in rest), key=rest.index)
    return devices, extras


def _complain(message: str, problems: list[str] | None, fix: str = "pass the output of `nvidia-smi topo -m`") -> None:
    if problems is None:
        raise ParseError(message, fix=fix)
    if len(problems) < MAX_PROBLEMS:
        problems.append(message)


def parse_topo_matrix(text: str, *, source: str = "nvidia-smi topo -m", strict: bool = True) -> TopoMatrix:
    """The matrix as printed. `strict=False` reads what is there and says in `cut_short` where it stops."""
    problems: list[str] | None = None if strict else []
    lines = [line.rstrip() for line in text.splitlines()]
    found = next(((i, h) for i, line in enumerate(lines) if (h := _header(line)) is not None), None)
    if found is None:
        raise ParseError(f"{source}: no GPU0 column header", fix="pass the output of `nvidia-smi topo -m`")
    header_at, (devices, extras) = found
    matrix = TopoMatrix(devices=devices, links={})
    for lineno, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        tokens = line.split()
        if not tokens:
            if matrix.links:
                break
            continue
        name, cells = tokens[0], tokens[1:]
        if name not in devices:
            if matrix.links:
                break  # the legend, or whatever was pasted after the matrix
            _complain(f"{source}:{lineno}: row {name[:20]!r} is not one of the columns {devices[:8]}", problems)
            continue
        if name in matrix.rows:
            continue
        matrix.rows[name] = line
        if len(cells) < len(devices):
            _complain(f"{source}:{lineno}: row {name} has {len(cells)} cells for {len(devices)} devices", problems)
            matrix.cut_short = f"the row for {name} stops after {len(cells)} of its {len(devices)} columns"
        for column, kind in zip(devices, cells[: len(devices)], strict=False):
            if not _LINK.match(kind):
                _complain(f"{source}:{lineno}: unknown connection type {kind[:12]!r} ({name} -> {column})", problems)
                continue
            matrix.links[(name, column)] = "SYS" if kind == "SOC" else kind
        for head, value in zip(extras, cells[len(devices) :], strict=False):
            if head == "CPU Affinity":
                matrix.cpu_affinity[name] = value
            elif head == "NUMA Affinity":
                matrix.numa_affinity[name] = _optional_int(value)
                matrix.numa_lists[name] = _node_list(value)
            elif head == "GPU NUMA ID":
                matrix.gpu_numa_id[name] = _optional_int(value)
    for line in lines:
        legend = _NIC_LEGEND.match(line)
        if legend is not None:
            matrix.nic_names[legend.group("alias")] = legend.group("name")
        product = _PRODUCT.match(line)
        if product is not None and len(matrix.product_names) < 4096:
            matrix.product_names.append(product.group("name"))
    missing = [d for d in devices if d not in matrix.rows]
    if missing:
        _complain(f"{source}: no row for {', '.join(missing[:8])}", problems, fix="is the matrix cut short?")
        matrix.cut_short = matrix.cut_short or f"the matrix ends before the rows for {', '.join(missing[:8])}"
    gpu_rows = [d for d in matrix.gpus if d in matrix.rows]
    if extras and gpu_rows and not matrix.cut_short:
        last = gpu_rows[-1]
        if last not in matrix.cpu_affinity and any(d in matrix.cpu_affinity for d in gpu_rows[:-1]):
            matrix.cut_short = f"the row for {last} stops before its CPU affinity"
    matrix.problems = problems or []
    return matrix


# -- nvlink -s -----------------------------------------------------------------------------------------------
_NVL_GPU = re.compile(r"^GPU (?P<index>\d{1,4}): (?P<name>.+?) \(UUID: (?P<uuid>[^)]*)\)\s*(?P<rest>.*)$")
_NVL_GPU_BARE = re.compile(r"^GPU (?P<index>\d{1,4}): (?P<name>[^()]+)$")  # the same, UUID left out
_NVL_LINK = re.compile(r"^\s*Link (?P<link>\d{1,3}): (?P<state>.*)$")
_SPEED = re.compile(r"^(?P<speed>\d{1,6}(?:\.\d{1,6})?) ?GB/s$")
_ALL_INACTIVE = re.compile(r"unable to retrieve nvlink information as all links are inactive", re.IGNORECASE)
_UNSUPPORTED = re.compile(r"does not have or support nvlink", re.IGNORECASE)  # driver R595


@dataclass(frozen=True)
class NvlinkState:
    link: int
    active: bool
    speed_gbps: float | None  # GB/s per direction as nvidia-smi prints it
    printed: str = ""  # the state as printed: `25 GB/s`, `<inactive>`, `ERR!`

    @property
    def state(self) -> str:
        """active, inactive, unreadable (an error marker) or unknown (text nvidia-smi is not known to print)."""
        if self.active:
            return "active"
        low = self.printed.lower()
        if not low or "inactive" in low:
            return "inactive"
        return "unreadable" if is_fault(unreadable(self.printed)) else "unknown"


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    links: list[NvlinkState] = field(default_factory=list)
    all_inactive: bool = False  # NVML reported that every link is inactive
    unsupported: bool = False  # nvidia-smi said the GPU has no NVLink
    lines: list[str] = field(default_factory=list)  # the GPU's lines as printed, its header first

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)

    @property
    def bandwidth_gbps(self) -> float:
        return sum(link.speed_gbps or 0.0 for link in self.links if link.active)


@dataclass
class NvlinkStatus:
    """`nvidia-smi nvlink -s` as read, with what could not be: lines that did not read and a GPU cut short."""

    gpus: list[NvlinkGpu]
    problems: list[str] = field(default_factory=list)
    cut_short: str | None = None  # the last line is cut mid-way (a state nvidia-smi does not print)


def read_nvlink_status(text: str, *, source: str = "nvidia-smi nvlink -s", strict: bool = True) -> NvlinkStatus:
    """Every GPU's links. `strict=False` reads what is there: a line that does not read is noted in `problems`
    (links before any GPU line belong to an unnamed GPU, index -1)."""
    problems: list[str] | None = None if strict else []
    gpus: list[NvlinkGpu] = []
    status = NvlinkStatus(gpus)
    last_state = ""
    last_read = True  # the last line read as nvlink -s output
    fix = "pass the output of `nvidia-smi nvlink -s`"
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        head = _NVL_GPU.match(line.strip()) or _NVL_GPU_BARE.match(line.strip())
        if head is not None:
            uuid = head.groupdict().get("uuid") or ""
            name = head.group("name").strip()
            gpus.append(NvlinkGpu(int(head.group("index")), name, uuid, lines=[line.strip()]))
            rest = head.groupdict().get("rest") or ""
            if rest:
                gpus[-1].all_inactive = _ALL_INACTIVE.search(rest) is not None
                gpus[-1].unsupported = _UNSUPPORTED.search(rest) is not None
            last_state, last_read = "", True
            continue
        if not gpus:
            if strict:
                raise ParseError(f"{source}:{lineno}: link line before any GPU line", fix="pass `nvidia-smi nvlink -s`")
            gpus.append(NvlinkGpu(-1, "", ""))
        gpu = gpus[-1]
        if len(gpu.lines) < 64:
            gpu.lines.append(line.strip())
        last_state, last_read = "", True
        if _ALL_INACTIVE.search(line):
            gpu.all_inactive = True
            continue
        if _UNSUPPORTED.search(line):
            gpu.unsupported = True
            continue
        link = _NVL_LINK.match(line)
        if link is None:
            _complain(f"{source}:{lineno}: not an nvlink status line: {line.strip()[:60]!r}", problems, fix=fix)
            last_read = False
            continue
        state = link.group("state").strip()
        last_state = state
        speed = _SPEED.match(state)
        number = int(link.group("link"))
        if speed is not None:
            gpu.links.append(NvlinkState(number, True, float(speed.group("speed")), state))
            continue
        if not _known_state(state):
            _complain(f"{source}:{lineno}: unknown link state {state[:30]!r}", problems, fix=fix)
        gpu.links.append(NvlinkState(number, state.lower() == "active", None, state))
    if not gpus:
        raise ParseError(f"{source}: no GPU lines", fix="pass the output of `nvidia-smi nvlink -s`")
    if last_state and not _known_state(last_state):
        status.cut_short = f"the last link line ends in {last_state[:30]!r}, not a state nvidia-smi prints"
    elif not last_read:
        status.cut_short = "the last line does not read as nvlink -s output"
    status.problems = problems or []
    return status


def _known_state(state: str) -> bool:
    """A link state nvidia-smi prints: a speed, `<inactive>`, `Active`, or a value it could not read."""
    low = state.lower()
    return (
        _SPEED.match(state) is not None or low in ("<inactive>", "inactive", "active") or unreadable(state) is not None
    )


def parse_nvlink_status(text: str, *, source: str = "nvidia-smi nvlink -s") -> list[NvlinkGpu]:
    """Every GPU's links, strictly: a line that does not read is an error naming it."""
    return read_nvlink_status(text, source=source, strict=True).gpus
