"""Parse nccl-tests output (all_reduce_perf and friends) and the busbw tables people publish from it.

The layout follows what nccl-tests prints (src/common.cu; src/util.cu from 2.18), across its versions:

- a header: ``# nccl-tests version 2.17.6 nccl-headers=22803 nccl-library=22803`` (2.18+), ``# Collective test
  starting: all_reduce_perf`` (2.17+), ``# nThread 1 nGpus 8 minBytes ...``, then one line per GPU,
  ``#  Rank  0 Group  0 Pid  1234 on  host-a device  0 [0000:07:00] NVIDIA A100-SXM4-80GB`` (2.15+; before that
  ``[0x07]``, before 2.14 no ``Group``, in 1.x no ``Pid``);
- the column header ``#  size  count  type  redop  root  time  algbw  busbw  #wrong  time ...``: the leading
  columns vary by version and test (2.0-2.12 print ``redop`` or ``root`` per test, ``error`` where 2.13+ print
  ``#wrong``), ``-I 1`` adds four per-iteration columns to each placement, ``-Z`` a timestamp at the end;
- a row per size: out-of-place then in-place time (us), algbw, busbw (GB/s) and ``#wrong`` (elements that
  came out wrong; ``N/A`` when the data check is off; before 2.13 ``error``, the largest difference, which is
  not a count);
- a footer: ``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth : 228.4`` (``OK``/``FAILED`` against
  NCCL_TESTS_MIN_BW), ``# Collective test concluded: all_reduce_perf`` (2.17+). A run that stops on an error prints
  no footer.

Also handles launcher prefixes (srun ``0:``, mpirun ``[1,0]<stdout>:``, torchrun ``[rank3]:``), NCCL INFO/WARN
lines mixed into the output, several runs one after another, and two-column markdown tables of bus bandwidth
per size.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.errors import ParseError

LAUNCHER_PREFIX = re.compile(
    r"^(?:\s*\d+:\s|\[\d+,\d+\]<(?:stdout|stderr)>:|\[(?:rank|default)\d+\]:\s?|\[\d+\]\s?<?(?:stdout|stderr)?>?:?\s)"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
DEVICE_LINE = re.compile(
    r"^#?\s*Rank\s+(\d{1,7})\s+(?:Group\s+(\d{1,7})\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d{1,4})\s+"
    r"\[[^\]]*\]\s+(.+?)\s*$"
)
NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
TESTS_VERSION = re.compile(r"#\s*nccl-tests version (\S+)(?:\s+nccl-headers=\d+)?(?:\s+nccl-library=(\d{4,6}))?")
TEST_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
TEST_CONCLUDED = re.compile(r"#\s*Collective test concluded:")
THREADS_LINE = re.compile(r"#?\s*nThread (\d{1,6}) nGpus (\d{1,6})")
AVG_LINE = re.compile(rf"^#?\s*Avg bus bandwidth\s*:\s*({NUM}|nan|-?inf)\s*(OK|FAILED)?", re.IGNORECASE)
OOB_LINE = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d{1,18})\s*(OK|FAILED)?")
COLUMNS_LINE = re.compile(r"^#?\s*(?:size|bytes)\s+(?:count|N)\s+type\b")
# Header lines pasted into a Markdown page lose their leading '#' (it renders them as headings).
HEADER_START = re.compile(
    r"(?:nThread|Rank\s|size\s|bytes\s|Avg bus|Out of bounds|Using devices|Collective test|nccl-tests version)"
)
TAG = re.compile(r"\[\d{1,6}\]")
MD_ROW = re.compile(r"^\|\s*([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([KMGT]?)i?B?\s*\|\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*\|")
INT = re.compile(r"-?[0-9]{1,19}")
COUNT = re.compile(r"[0-9]{1,20}")
DTYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}")
DATE, CLOCK = re.compile(r"\d{4}-\d\d-\d\d"), re.compile(r"\d\d:\d\d:\d\d")
# An "error" value of nccl-tests before 2.13 (`%5.0le`, the largest difference) rather than a `%6g` count.
DELTA_FORM = re.compile(r"\d(?:\.\d*)?e(?:-\d+|\+0[0-5])", re.IGNORECASE)
# What nccl-tests, NCCL, MPI and Slurm print when a run stops (common.h's CUDACHECK/NCCLCHECK/TESTCHECK, its
# timeout, MPI and Slurm) ...
STOP_HINTS = (
    "Test NCCL failure",
    "Test CUDA failure",
    "Test failure",
    "Test timeout",
    "NCCL failure",
    "MPI_ABORT",
    "mpirun noticed",
    "srun: error",
    "Segmentation fault",
    "Bus error",
    "core dumped",
    "terminate called",
)
# ... and every line worth keeping as an error, including warnings a run may print and still finish
ERROR_HINTS = (*STOP_HINTS, "NCCL WARN", "CUDA failure", "NCCL error", "CUDA error", "Abort")
COMMAND = re.compile(
    r"^(?:\$\s*)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?(?:mpirun|mpiexec|srun|torchrun|\S*_perf(?:_mpi)?)(?:\s|$)"
)
TEST_NAMES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "alltoallv": "alltoallv",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}
MAX_ROWS = 100_000  # over all runs: nccl-tests prints ~40 rows per run; more is not output worth holding
MAX_RUNS = 1_000
# NCCL's own INFO lines mixed into a run (NVIDIA/nccl v2.12 .. v2.30 init.cc, transport/net_ib, net_socket.cc; the
# aws-ofi-nccl plugin): which host each rank ran on, the world size, and the network NCCL picked with its devices.
INFO_COMM = re.compile(
    r"^(?P<host>[\w.-]+):\d+:\d+ \[\d+\] NCCL INFO comm 0x[0-9a-f]+ rank (?P<rank>\d{1,7}) nranks (?P<n>\d{1,7})\b"
)
INFO_NET_IB = re.compile(r"NCCL INFO NET/IB : Using ((?:\[\d+\]\S+\s*)+)")  # [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...
# one line a device at init (NCCL 2.20+ at INFO, earlier at TRACE): `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5
# speed=400000 context=0x... pciPath=... ar=1`; speed is the port's rate in Mb/s (ncclIbSpeed x width), and only devices
# NCCL_IB_HCA lets through are listed
INFO_NET_IB_DEVICE = re.compile(
    r"NCCL INFO NET/IB: \[\d+\] (?P<name>[\w.-]+):[\w.-]*:(?P<port>\d+)/(?:IB|RoCE)\b.*?\bspeed=(?P<mbps>\d{1,9})\b"
)
INFO_NET_OFI = re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is (\w+)(?:.*?\(found (\d+) nics\))?")
INFO_NET_SOCKET = re.compile(r"NCCL INFO (?:Using network Socket|NET/Socket : Using ((?:\[\d+\]\S+\s*)+))")
# a launcher's or framework's banner naming the world size before the table
WORLD_BANNER = re.compile(r"\b(?:WORLD_SIZE|world_size|SLURM_NTASKS|OMPI_COMM_WORLD_SIZE)\s*[=:]\s*(\d{1,7})\b")
MAX_HOSTS = 100_000
MAX_ERRORS = 50
MAX_SIZE = 1 << 62  # size_t printed as %li
WrongColumn = Literal["count", "delta", "off"]  # counts (2.13+), largest differences (before), not checked


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
    partial: bool = False  # cut short: the line ends before the in-place #wrong
    redop: str | None = None

    @property
    def busbw(self) -> float:
        """The better of the two placements: the run's demonstrated capability at this size."""
        vals = [v for v in (self.oop_busbw, self.ip_busbw) if v is not None]
        return max(vals) if vals else 0.0

    @property
    def algbw(self) -> float | None:
        vals = [v for v in (self.oop_algbw, self.ip_algbw) if v is not None]
        return max(vals) if vals else None

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
    last_errors: list[str] = field(default_factory=list)  # errors after the last row: what the output ends with
    nccl_version: str | None = None
    fmt: str = "nccl-tests"
    truncated: bool = False  # ends before nccl-tests' closing lines, or in the middle of a row
    rank_gpus: dict[int, str] = field(default_factory=dict)  # rank -> product name, from the header
    rank_groups: dict[int, int] = field(default_factory=dict)  # rank -> NCCL_TESTS_SPLIT_MASK group
    threads: int | None = None  # `# nThread T nGpus G`: per process
    gpus_per_thread: int | None = None
    tests_version: str | None = None
    footer: str | None = None  # the `# Avg bus bandwidth` line
    avg_check_failed: bool = False  # NCCL_TESTS_MIN_BW was set and the average fell below 90% of it
    out_of_bounds: int | None = None  # `# Out of bounds values : N`: nccl-tests' own count of failed checks
    out_of_bounds_line: str = ""
    wrong_column: WrongColumn | None = None  # what the #wrong column holds
    zero_rows: int = 0  # 0-byte rows, read and left out of `rows` (nothing moves)
    dropped_rows: int = 0  # rows past MAX_ROWS
    started: bool = False  # saw any of nccl-tests' header lines
    has_root: bool | None = None  # from the column header
    block: int | None = None  # values per placement (4, or 8 with -I 1)
    info_hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, from NCCL's `comm ... rank R` lines
    info_nranks: int | None = None  # `nranks N` in those lines, or a launcher's WORLD_SIZE banner
    net: str | None = None  # the network NCCL's INFO lines say it used: ib, roce, efa, socket
    nics: int | None = None  # the net devices those lines list (per process: one node's)
    nic_mbps: dict[str, int] = field(default_factory=dict)  # "mlx5_0:1" -> its rate, Mb/s, from NET/IB device lines

    @property
    def wrong_rows(self) -> list[PerfRow]:
        return [r for r in self.rows if r.wrong > 0]

    @property
    def gpu_names(self) -> list[str]:
        """The distinct product names the header lists, in rank order."""
        return list(dict.fromkeys(self.rank_gpus[r] for r in sorted(self.rank_gpus)))


def _strip(line: str) -> str:
    if "\x1b" in line:
        line = ANSI.sub("", line)
    line = line.rstrip("\r\n")
    for _ in range(2):
        m = LAUNCHER_PREFIX.match(line)
        if not m:
            break
        if TAG.match(m.group(0).strip()):
            # a launcher that tags every write (Intel MPI -prepend-rank) tags the middle of a row too
            line = line[: m.end()] + line[m.end() :].replace(m.group(0).strip(), " ")
        line = line[m.end() :]
    return line


def _num(tok: str) -> float | None:
    """A finite number, or None (N/A, junk, inf, nan)."""
    if len(tok) > 40:
        return None
    try:
        value = float(tok)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _numeric(tok: str) -> bool:
    return tok.upper() == "N/A" or _num(tok) is not None


def _wrong(tok: str | None, column: WrongColumn | None) -> int | None:
    """The #wrong count, or None when the column holds no count (N/A, a pre-2.13 difference, junk)."""
    if tok is None or tok.upper() == "N/A" or column == "delta" or DELTA_FORM.fullmatch(tok):
        return None
    value = _num(tok)
    if value is None or value < 0:
        return None
    return int(min(value, float(1 << 62)))


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _md_size(value: str, suffix: str) -> int:
    """Published tables label sizes loosely (65K = 65536, 132K = 131072, 33M = 33554432): snap to powers of two."""
    raw = float(value) * (_SUFFIX[suffix.upper()] if suffix else 1)
    if suffix:
        decimal = float(value) * {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[suffix.upper()]
        candidates = [1 << k for k in range(0, 50)]
        return min(candidates, key=lambda c: min(abs(c - raw) / c, abs(c - decimal) / c))
    return int(raw)


def _library_version(code: str) -> str:
    """NCCL_VERSION_CODE as x.y.z: X*10000+Y*100+Z from 2.9, X*1000+Y*100+Z before."""
    n = int(code)
    if n >= 20900:
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"


class PerfParser:
    """nccl-tests output a line at a time; a run's header after another run's rows starts a new run."""

    def __init__(self) -> None:
        self.runs: list[PerfTable] = [PerfTable()]
        self._partial_last = False  # the last data line was cut short
        self._rows = 0  # kept, over all runs
        self._seen_md = False

    @property
    def table(self) -> PerfTable:
        return self.runs[-1]

    def _new_run_if_done(self) -> None:
        """A run's header line: the start of a new run when this one already has rows or its footer."""
        t = self.table
        if (t.rows or t.zero_rows or t.footer is not None) and len(self.runs) < MAX_RUNS:
            self._finish_run()
            self.runs.append(PerfTable())
            self._partial_last = False

    def feed(self, raw: str) -> None:
        line = _strip(raw)
        s = line.strip()
        if not s:
            return
        if "_perf" in s and COMMAND.match(s):
            self._command(s)
        if "NCCL version" in s and self.table.nccl_version is None and (vm := NCCL_VERSION.search(s)):
            self.table.nccl_version = vm.group(1)
        if s.startswith("|"):
            self._markdown(s)
            return
        if s.startswith("#") or HEADER_START.match(s):
            self._comment(s)
            return
        if s[0].isdigit():
            row = self._row(s)
            if row is not None:
                return
        if "NCCL INFO" in s:
            self._info(s)
        elif any(h in s for h in ERROR_HINTS):
            self._error(s)
        elif not self.table.rows and (wm := WORLD_BANNER.search(s)):
            self.table.info_nranks = self.table.info_nranks or int(wm.group(1))

    def _info(self, s: str) -> None:
        t = self.table
        if m := INFO_COMM.match(s):
            if len(t.info_hosts) < MAX_HOSTS:
                t.info_hosts[int(m.group("rank"))] = m.group("host")
            t.info_nranks = max(t.info_nranks or 0, int(m.group("n")))
        elif m := INFO_NET_IB_DEVICE.search(s):
            if len(t.nic_mbps) < MAX_ERRORS and int(m.group("mbps")) > 0:
                t.nic_mbps[f"{m.group('name')}:{m.group('port')}"] = int(m.group("mbps"))
        elif m := INFO_NET_IB.search(s):
            devices = m.group(1).split()
            t.nics = max(t.nics or 0, len(devices))
            t.net = "roce" if all(d.endswith("/RoCE") for d in devices) else "ib"
        elif m := INFO_NET_OFI.search(s):
            t.net = "efa" if m.group(1).lower() == "efa" else t.net
            if m.group(2):
                t.nics = max(t.nics or 0, int(m.group(2)))
        elif m := INFO_NET_SOCKET.search(s):
            t.net = "socket"
            if m.group(1):
                t.nics = max(t.nics or 0, len(m.group(1).split()))

    def _error(self, s: str) -> None:
        t = self.table
        if len(t.errors) < MAX_ERRORS:
            t.errors.append(s[:500])
        if len(t.last_errors) < MAX_ERRORS:
            t.last_errors.append(s[:500])

    def _markdown(self, s: str) -> None:
        md = MD_ROW.match(s)
        if md is None:
            return
        t = self.table
        t.fmt = "busbw-table"
        self._seen_md = True
        size = _md_size(md.group(1), md.group(2))
        if size == 0:
            t.zero_rows += 1
            return
        self._append(PerfRow(size, None, None, None, None, None, None, None, None, float(md.group(3)), None, s))

    def _comment(self, s: str) -> None:
        t = self.table
        if m := TESTS_VERSION.match(s):
            self._new_run_if_done()
            self.table.tests_version = m.group(1)
            if m.group(2) and self.table.nccl_version is None:
                self.table.nccl_version = _library_version(m.group(2))
            self.table.started = True
            return
        if m := TEST_STARTING.match(s):
            self._new_run_if_done()
            name = re.sub(r"_perf(?:_mpi)?$", "", m.group(1).rsplit("/", 1)[-1])
            self.table.op = TEST_NAMES.get(name, name)
            self.table.started = True
            return
        if m := THREADS_LINE.match(s):
            self._new_run_if_done()
            self.table.threads, self.table.gpus_per_thread = int(m.group(1)), int(m.group(2))
            self.table.started = True
            return
        if "Rank" in s and (dm := DEVICE_LINE.search(s)):
            self._device(dm)
            return
        if COLUMNS_LINE.match(s):
            self._columns(s)
            return
        if am := AVG_LINE.match(s):
            t.avg_busbw = _num(am.group(1))
            t.avg_check_failed = (am.group(2) or "").upper() == "FAILED"
            t.footer = s
            self._partial_last = False
            return
        if om := OOB_LINE.match(s):
            t.out_of_bounds = int(om.group(1))
            t.out_of_bounds_line = s
            return
        if TEST_CONCLUDED.match(s):
            return
        if s.startswith("# error:"):
            self._error(s)

    def _device(self, dm: re.Match[str]) -> None:
        t = self.table
        t.started = True
        rank, group, host, gpu = int(dm.group(1)), int(dm.group(2) or 0), dm.group(3), dm.group(5)
        if len(t.rank_hosts) >= MAX_HOSTS:
            return
        t.rank_hosts[rank] = host
        t.rank_gpus[rank] = gpu
        t.rank_groups[rank] = group
        if host not in t.hosts:
            t.hosts.append(host)
        t.gpu_name = t.gpu_name or gpu

    def _columns(self, s: str) -> None:
        t = self.table
        t.started = True
        names = s.lstrip("#").split()
        times = [i for i, n in enumerate(names) if n in ("time", "cputime")]
        if not times:
            return
        lead = names[: times[0]]
        t.has_root = "root" in lead
        t.block = times[1] - times[0] if len(times) > 1 and times[1] - times[0] in (4, 8) else 4
        wrong = names[times[0] + 3] if len(names) > times[0] + 3 else ""
        if wrong in ("error", "res"):
            t.wrong_column = "delta"

    def _row(self, s: str) -> PerfRow | None:
        """A data row (kept), or None when the line is not one."""
        t = self.table
        tokens = s.split()
        if len(tokens) < 4 or not COUNT.fullmatch(tokens[0]) or not COUNT.fullmatch(tokens[1]):
            return None
        if not DTYPE.fullmatch(tokens[2]) or tokens[2].upper() == "N/A":
            return None
        size, count = int(tokens[0]), int(tokens[1])
        if size > MAX_SIZE or count > MAX_SIZE:
            return None
        rest = tokens[3:]
        if len(rest) >= 2 and DATE.fullmatch(rest[-2]) and CLOCK.fullmatch(rest[-1]):
            rest = rest[:-2]  # -Z: a timestamp after the in-place block
        redop = None
        if rest and not _numeric(rest[0]):
            redop, rest = rest[0], rest[1:]  # hypercube prints an empty redop: absent here
        if rest and INT.fullmatch(rest[0]):
            if t.has_root is not None:
                has_root = t.has_root
            else:  # no column header seen: root is -1 or a rank, and leaves an odd count of values
                has_root = rest[0].startswith("-") or len(rest) % 2 == 1
            if has_root:
                rest = rest[1:]
        if any(not _numeric(v) for v in rest):
            return None
        block = t.block or (8 if len(rest) >= 16 else 4)
        oop, ip = rest[:block], rest[block : 2 * block]
        partial = len(rest) < 2 * block

        def values(b: list[str]) -> tuple[float | None, float | None, float | None, int | None]:
            def at(i: int) -> float | None:
                return _num(b[i]) if len(b) > i else None

            token = b[3] if len(b) > 3 else None
            wrong = _wrong(token, t.wrong_column)
            if wrong is not None and t.wrong_column in (None, "off"):
                t.wrong_column = "count"
            elif token is not None and token.upper() == "N/A" and t.wrong_column is None:
                t.wrong_column = "off"  # -c 0: the data was not checked
            elif token is not None and t.wrong_column is None and DELTA_FORM.fullmatch(token):
                t.wrong_column = "delta"
            return at(0), at(1), at(2), wrong

        o = values(oop)
        p = values(ip)
        if size == 0:
            t.zero_rows += 1  # nothing moves (a size below one element per rank): read, not compared
            self._partial_last = partial
            return PerfRow(0, count, tokens[2], *o, *p, line=s, partial=partial, redop=redop)
        if o[2] is None and p[2] is None:  # no bandwidth: the line stops before it, or prints N/A for it
            self._partial_last = partial
            return PerfRow(size, count, tokens[2], *o, *p, line=s, partial=partial, redop=redop)
        row = PerfRow(size, count, tokens[2], *o, *p, line=s, partial=partial, redop=redop)
        self._partial_last = partial
        self._append(row)
        return row

    def _append(self, row: PerfRow) -> None:
        t = self.table
        t.last_errors.clear()
        if self._rows >= MAX_ROWS:
            t.dropped_rows += 1
            return
        self._rows += 1
        t.rows.append(row)

    def _command(self, line: str) -> None:
        t = self.table
        m = re.search(r"(\w+)_perf(?:_mpi)?\b", line)
        if m:
            self._new_run_if_done()
            t = self.table
            if t.op is None:
                t.op = TEST_NAMES.get(m.group(1), m.group(1))
        for key, val in re.findall(r"-x\s+(NCCL_\w+|UCX_\w+|FI_\w+)=(\"[^\"]*\"|\S+)", line):
            t.env[key] = val.strip('"')
        for key, val in re.findall(r"(?:^|\s)(NCCL_\w+)=(\"[^\"]*\"|\S+)(?=\s)", line.split("_perf")[0]):
            t.env.setdefault(key, val.strip('"'))  # `NCCL_P2P_DISABLE=1 ./all_reduce_perf`
        if "_perf" in line and t.gpus_per_thread is None and (g := re.search(r"\s-g\s+(\d{1,3})\b", line)):
            t.gpus_per_thread = int(g.group(1))  # `-g 4`, before (or without) the `# nThread` line
        m = re.search(r"\s-(?:n|np)\s+(\d{1,7})\b", line)
        if m and ("mpirun" in line or "srun" in line):
            t.nranks = int(m.group(1))
        m = re.search(r"\s-H\s+(\S+)", line)
        if m:
            hosts = [h.split(":")[0] for h in m.group(1).split(",") if h][:MAX_HOSTS]
            t.nodes = len(set(hosts))
            for h in hosts:
                if h not in t.hosts:
                    t.hosts.append(h)

    def _finish_run(self) -> None:
        t = self.table
        if t.rank_hosts:
            group = t.rank_groups[min(t.rank_groups)]
            in_group = [r for r, g in t.rank_groups.items() if g == group]  # one communicator per split group
            t.nranks = len(in_group)
            t.nodes = len({t.rank_hosts[r] for r in in_group})
        elif t.info_hosts and t.nranks is None and t.info_nranks == len(t.info_hosts):
            # every rank's NCCL init line is in the output: where each ran
            t.nranks = t.info_nranks
            t.nodes = len(set(t.info_hosts.values()))
            for host in t.info_hosts.values():
                if host not in t.hosts and len(t.hosts) < MAX_HOSTS:
                    t.hosts.append(host)
        if t.fmt == "nccl-tests" and (t.rows or t.zero_rows or t.started or t.errors):
            # nccl-tests closes every run it finishes with the average line; a row cut short is the end of input
            t.truncated = t.truncated or t.footer is None or self._partial_last
        t.truncated = t.truncated or t.dropped_rows > 0  # not all of it was read

    def finish(self) -> list[PerfTable]:
        """The runs read, each closed; a ParseError when there is nothing of nccl-tests in the text."""
        self._finish_run()
        runs = [r for r in self.runs if r.rows or r.zero_rows or r.errors or r.footer is not None or r.started]
        if not any(r.rows or r.zero_rows or r.errors or r.footer is not None for r in runs):
            raise ParseError(
                "no nccl-tests rows found",
                fix="give the stdout of all_reduce_perf (or another *_perf test), or a '| size | busbw |' table",
            )
        return runs


def parse_perf_runs(lines: Iterable[str]) -> list[PerfTable]:
    """Every run in nccl-tests stdout (any launcher) or a markdown busbw table, in order."""
    parser = PerfParser()
    for line in lines:
        parser.feed(line)
    return parser.finish()


def parse_perf(text: str) -> PerfTable:
    """The first run in nccl-tests stdout (any launcher), or a markdown busbw table."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    return parse_perf_runs(text.splitlines())[0]
