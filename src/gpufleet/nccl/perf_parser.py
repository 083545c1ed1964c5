"""Parse nccl-tests output (all_reduce_perf and friends) and the busbw tables people publish from it.

Handles launcher prefixes (srun ``0:``, mpirun ``[1,0]<stdout>:``, torchrun ``[rank3]:``), NCCL INFO/WARN
lines mixed into the output, in- and out-of-place columns, ``N/A`` in ``#wrong``, a final row cut short,
runs that stopped on an error, and two-column markdown tables of bus bandwidth per size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError

LAUNCHER_PREFIX = re.compile(
    r"^(?:\s*\d+:\s|\[\d+,\d+\]<(?:stdout|stderr)>:|\[(?:rank|default)\d+\]:\s?|\[\d+\]\s?<?(?:stdout|stderr)?>?:?\s)"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
DATA_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(.*)$")
DEVICE_LINE = re.compile(
    r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s+(.+?)\s*$"
)
NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
AVG_LINE = re.compile(rf"#\s*Avg bus bandwidth\s*:\s*({NUM})")
MD_ROW = re.compile(r"^\|\s*([0-9.]+)\s*([KMGT]?)i?B?\s*\|\s*([0-9.]+)\s*\|")
ERROR_HINTS = (
    "NCCL WARN",
    "NCCL failure",
    "Test NCCL failure",
    "CUDA failure",
    "Test failure",
    "error",
    "Abort",
)
TEST_NAMES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}


@dataclass(frozen=True)
class PerfRow:
    bytes: int
    count: int | None
    dtype: str | None
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    oop_wrong: int | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: int | None
    line: str = ""

    @property
    def busbw(self) -> float:
        """The better of the two placements: the run's demonstrated capability at this size."""
        vals = [v for v in (self.oop_busbw, self.ip_busbw) if v is not None]
        return max(vals) if vals else 0.0

    @property
    def time_us(self) -> float | None:
        vals = [v for v in (self.oop_time_us, self.ip_time_us) if v is not None]
        return min(vals) if vals else None

    @property
    def wrong(self) -> int:
        return sum(w for w in (self.oop_wrong, self.ip_wrong) if w)


@dataclass
class PerfTable:
    """One nccl-tests run (or a published table of one)."""

    op: str | None = None
    rows: list[PerfRow] = field(default_factory=list)
    avg_busbw: float | None = None
    nranks: int | None = None
    nodes: int | None = None
    gpu_name: str | None = None
    hosts: list[str] = field(default_factory=list)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    fmt: str = "nccl-tests"
    truncated: bool = False

    @property
    def wrong_rows(self) -> list[PerfRow]:
        return [r for r in self.rows if r.wrong > 0]


def _strip(line: str) -> str:
    line = ANSI.sub("", line).rstrip("\r\n")
    for _ in range(2):
        m = LAUNCHER_PREFIX.match(line)
        if not m:
            break
        line = line[m.end() :]
    return line


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _wrong(tok: str | None) -> int | None:
    if tok is None or tok.upper() == "N/A":
        return None
    try:
        return int(float(tok))
    except ValueError:
        return None


def _data_row(line: str) -> PerfRow | None:
    m = DATA_ROW.match(line)
    if not m:
        return None
    tokens = line.split()
    size, count = int(tokens[0]), int(tokens[1])
    dtype = tokens[2]
    if not re.fullmatch(r"[a-z]+\d*|bfloat16|half|double|float|int\d*|uint\d*|char|int8", dtype):
        return None
    rest = tokens[3:]
    # Drop redop/root when present: the timing block is the trailing numeric run.
    i = 0
    while i < len(rest) and _num(rest[i]) is None and rest[i].upper() != "N/A":
        i += 1
    vals = rest[i:]
    # The root column (e.g. -1 or 0) precedes the timings.
    has_root = len(vals) in (9, 5) or (len(vals) == 8 and "." not in vals[1])
    if vals and vals[0].lstrip("-").isdigit() and has_root:
        vals = vals[1:]
    if len(vals) < 3:
        return None
    oop = vals[:4]
    ip = vals[4:8]

    def block(b: list[str]) -> tuple[float | None, float | None, float | None, int | None]:
        t = _num(b[0]) if len(b) > 0 else None
        a = _num(b[1]) if len(b) > 1 else None
        bb = _num(b[2]) if len(b) > 2 else None
        w = _wrong(b[3]) if len(b) > 3 else None
        return t, a, bb, w

    o = block(oop)
    p = block(ip) if len(ip) >= 3 else (None, None, None, None)
    if o[0] is None or o[2] is None:
        return None
    return PerfRow(size, count, dtype, *o, *p, line=line.strip())


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _md_size(value: str, suffix: str) -> int:
    """Published tables label sizes loosely (65K = 65536, 132K = 131072, 33M = 33554432): snap to "
    "powers of two."""
    raw = float(value) * (_SUFFIX[suffix.upper()] if suffix else 1)
    if suffix:
        decimal = float(value) * {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[suffix.upper()]
        candidates = [1 << k for k in range(0, 50)]
        return min(candidates, key=lambda c: min(abs(c - raw) / c, abs(c - decimal) / c))
    return int(raw)


def _command(line: str, table: PerfTable) -> None:
    m = re.search(r"(\w+)_perf(?:_mpi)?\b", line)
    if m and table.op is None:
        table.op = TEST_NAMES.get(m.group(1), m.group(1))
    for key, val in re.findall(r"-x\s+(NCCL_\w+|UCX_\w+|FI_\w+)=(\"[^\"]*\"|\S+)", line):
        table.env[key] = val.strip('"')
    m = re.search(r"\s-(?:n|np)\s+(\d+)", line)
    if m and ("mpirun" in line or "srun" in line):
        table.nranks = int(m.group(1))
    m = re.search(r"\s-H\s+(\S+)", line)
    if m:
        hosts = [h.split(":")[0] for h in m.group(1).split(",") if h]
        table.nodes = len(hosts)
        for h in hosts:
            if h not in table.hosts:
                table.hosts.append(h)


def parse_perf(text: str) -> PerfTable:
    """Parse nccl-tests stdout (any launcher) or a markdown busbw table."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    table = PerfTable()
    for raw in text.splitlines():
        line = _strip(raw)
        if not line.strip():
            continue
        if "_perf" in line and not line.lstrip().startswith("#"):
            _command(line, table)
        vm = NCCL_VERSION.search(line)
        if vm and table.nccl_version is None:
            table.nccl_version = vm.group(1)
        md = MD_ROW.match(line.strip())
        if md:
            table.fmt = "busbw-table"
            bus = float(md.group(3))
            size = _md_size(md.group(1), md.group(2))
            table.rows.append(PerfRow(size, None, None, None, None, None, None, None, None, bus, None, line.strip()))
            continue
        s = line.strip()
        if s.startswith("#"):
            dm = DEVICE_LINE.search(s)
            if dm:
                rank, host, gpu = int(dm.group(1)), dm.group(2), dm.group(4)
                table.rank_hosts[rank] = host
                if host not in table.hosts:
                    table.hosts.append(host)
                table.gpu_name = table.gpu_name or gpu
                continue
            am = AVG_LINE.search(s)
            if am:
                table.avg_busbw = float(am.group(1))
                continue
            continue
        row = _data_row(s)
        if row is not None:
            table.rows.append(row)
            if row.ip_busbw is None and row.oop_wrong is None:
                table.truncated = True
            continue
        if any(h in s for h in ERROR_HINTS) and "NCCL INFO" not in s:
            table.errors.append(s)
    if table.rank_hosts:
        table.nranks = table.nranks or len(table.rank_hosts)
        table.nodes = table.nodes or len(set(table.rank_hosts.values()))
    if not table.rows and not table.errors:
        raise ParseError(
            "no nccl-tests rows found",
            fix="give the stdout of all_reduce_perf (or another *_perf test), or a '| size | busbw |' table",
        )
    if table.rows and table.errors and table.avg_busbw is None:
        table.truncated = True
    return table
