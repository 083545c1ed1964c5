"""What nvidia-smi prints about the processes on each GPU, as records: the `Processes:` table of plain
`nvidia-smi` (and its `MIG devices:` table), `--query-compute-apps ... --format=csv`, and `nvidia-smi pmon`.

NVML is what the agent reads (sources.nvml_processes); these parsers read the same facts from saved output, so a
capture can be checked by eye (`gpufleet read nvidia-smi-processes`) and replayed in tests.

    |  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
    |        ID   ID                                                   Usage      |
    |=============================================================================|
    |    0    1    0      53522      C   python3                         16197MiB |
    |    0   N/A  N/A    144377    M+C   /tmp/nbody                        107MiB |

- Type is C (compute), G (graphics), C+G, M (an MPS client) or M+C. Drivers before R450 print no GI/CI columns.
  The name column is cut by nvidia-smi and a long name keeps its end (`...e Experience\\NVIDIA Share.exe`).
  Memory is N/A where the driver accounts none per process (Windows WDDM).
- `--query-compute-apps` names its columns in the header (`used_gpu_memory [MiB]`); with `noheader` the caller
  names them. A value nvidia-smi could not read is `[N/A]` (memory under WDDM) or `[Not Found]` (a process name
  it could not resolve). A process name may hold commas, so the name column takes whatever the others leave.
- `pmon` prints one line per process per cycle under a `# gpu pid type ...` header whose columns depend on `-s`
  (`fb` with `m`; jpg/ofa on newer drivers); `-` is a value it does not have: a process with no utilization
  sample this cycle, or a GPU with no process (pid `-`). Process names may hold spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.errors import ParseError
from gpufleet.model.attribution import GpuProcess, ProcessReading

TABLE_FIX = "pass the whole output of plain `nvidia-smi` (its Processes: table)"
CSV_FIX = "pass the output of `nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv`"
PMON_FIX = "pass the output of `nvidia-smi pmon -c 1` (with its `# gpu pid type ...` header)"
MAX_NAME = 4096  # a process name longer than this is not one nvidia-smi printed


# ---- records ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableProcess:
    """One row of the `Processes:` table."""

    gpu: int
    pid: int
    type: str  # C, G, C+G, M, M+C
    name: str  # as printed: a long name is cut to its end behind "..."
    used_memory_mib: float | None  # None: N/A (the driver accounts none)
    gpu_instance_id: int | None = None  # None: N/A (MIG off) or a driver that prints no GI column
    compute_instance_id: int | None = None

    @property
    def compute(self) -> bool:
        """Whether it holds a compute context (NVML lists it among compute or MPS processes)."""
        return any(part in ("C", "M") for part in self.type.split("+"))

    @property
    def mps(self) -> bool:
        return "M" in self.type.split("+")


@dataclass(frozen=True, slots=True)
class MigDeviceUsage:
    """One MIG device of the `MIG devices:` table: its memory (the GPU instance's, shared by its compute
    instances)."""

    gpu: int
    gpu_instance_id: int
    compute_instance_id: int
    mig_device: int  # its index among the GPU's MIG devices, as `nvidia-smi -L` numbers them
    memory_used_mib: float
    memory_total_mib: float


@dataclass(frozen=True, slots=True)
class ComputeApp:
    """One row of `--query-compute-apps`; a column not queried stays empty."""

    pid: int
    name: str = ""  # "" when not queried or [Not Found]
    gpu_uuid: str = ""
    used_memory_mib: float | None = None  # None: [N/A] or not queried
    gpu_bus_id: str = ""
    gpu_name: str = ""

    def as_process(self) -> GpuProcess:
        return GpuProcess(pid=self.pid, gpu_uuid=self.gpu_uuid, used_memory_mib=self.used_memory_mib, name=self.name)


@dataclass(frozen=True, slots=True)
class PmonSample:
    """One `pmon` line: a process's utilization over one monitoring cycle (None: `-`, no sample)."""

    gpu: int
    pid: int
    type: str
    sm_util: float | None = None
    mem_util: float | None = None
    enc_util: float | None = None
    dec_util: float | None = None
    fb_mib: float | None = None  # with `-s m`
    name: str = ""
    cycle: int = 0  # which monitoring cycle it belongs to, counted from 0

    @property
    def sampled(self) -> bool:
        """Whether NVML gave a sample for it this cycle (any engine value printed)."""
        return any(v is not None for v in (self.sm_util, self.mem_util, self.enc_util, self.dec_util))


# ---- the Processes: table --------------------------------------------------------------------------------------

_ID = r"(?:\d{1,6}|N/A)"
_MEMORY = r"(?P<memory>\d{1,12}\s?MiB|N/A)"
_ROW_MIG = re.compile(
    rf"^\|\s*(?P<gpu>\d{{1,4}})\s+(?P<gi>{_ID})\s+(?P<ci>{_ID})\s+(?P<pid>\d{{1,10}})\s+(?P<type>[A-Z](?:\+[A-Z])*)"
    rf"\s+(?P<name>.*?)\s+{_MEMORY}\s*\|$"
)
_ROW_OLD = re.compile(
    rf"^\|\s*(?P<gpu>\d{{1,4}})\s+(?P<pid>\d{{1,10}})\s+(?P<type>[A-Z](?:\+[A-Z])*)\s+(?P<name>.*?)\s+{_MEMORY}\s*\|$"
)
_NO_PROCESSES = "No running processes found"


def _memory_mib(text: str) -> float | None:
    text = text.strip()
    return None if text == "N/A" else float(text.removesuffix("MiB").strip())


def _id(text: str) -> int | None:
    return None if text == "N/A" else int(text)


def parse_process_table(text: str, source: str = "nvidia-smi") -> list[TableProcess]:
    """The rows of every `Processes:` table in `text` (plain `nvidia-smi` output, whole or from that table on).
    A row that does not read is an error naming its line."""
    out: list[TableProcess] = []
    seen = False
    state = "outside"  # outside -> header -> rows
    gi_columns = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if state == "outside":
            if line.startswith("|") and "Processes:" in line:
                seen, state, gi_columns = True, "header", False
            continue
        if state == "header":
            if line.startswith("|="):
                state = "rows"
            elif line.startswith("|") and re.search(r"\bGI\b", line) and re.search(r"\bCI\b", line):
                gi_columns = True
            elif not line.startswith("|"):
                raise ParseError(f"{source}: line {number} cuts the Processes: header short: {line!r}", fix=TABLE_FIX)
            continue
        if not line or line.startswith("+"):
            state = "outside"
            continue
        if _NO_PROCESSES in line:
            continue
        match = (_ROW_MIG if gi_columns else _ROW_OLD).match(line)
        if match is None or len(match["name"]) > MAX_NAME:
            raise ParseError(f"{source}: line {number} is not a process row: {line[:160]!r}", fix=TABLE_FIX)
        out.append(
            TableProcess(
                gpu=int(match["gpu"]),
                pid=int(match["pid"]),
                type=match["type"],
                name=match["name"],
                used_memory_mib=_memory_mib(match["memory"]),
                gpu_instance_id=_id(match["gi"]) if gi_columns else None,
                compute_instance_id=_id(match["ci"]) if gi_columns else None,
            )
        )
    if not seen:
        raise ParseError(f"{source}: no Processes: table", fix=TABLE_FIX)
    return out


_MIG_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d{1,4})\s+(?P<gi>\d{1,6})\s+(?P<ci>\d{1,6})\s+(?P<dev>\d{1,6})\s*\|"
    r"\s*(?P<used>\d{1,12})MiB\s*/\s*(?P<total>\d{1,12})MiB\s*\|"
)


def parse_mig_devices(text: str, source: str = "nvidia-smi") -> list[MigDeviceUsage]:
    """The MIG devices of the `MIG devices:` table (none when the text has no such table or it lists none)."""
    out: list[MigDeviceUsage] = []
    state = "outside"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if state == "outside":
            if line.startswith("|") and "MIG devices:" in line:
                state = "header"
            continue
        if state == "header":
            state = "rows" if line.startswith("|=") else state
            continue
        if not line:
            state = "outside"
            continue
        if line.startswith("+") or "No MIG devices found" in line:
            continue
        cells = line.strip("|").split("|")
        if not cells[0].strip():
            continue  # a device's second line (BAR1) or a blank filler row
        match = _MIG_ROW.match(line)
        if match is None:
            raise ParseError(f"{source}: line {number} is not a MIG device row: {line[:160]!r}", fix=TABLE_FIX)
        out.append(
            MigDeviceUsage(
                gpu=int(match["gpu"]),
                gpu_instance_id=int(match["gi"]),
                compute_instance_id=int(match["ci"]),
                mig_device=int(match["dev"]),
                memory_used_mib=float(match["used"]),
                memory_total_mib=float(match["total"]),
            )
        )
    return out


# ---- --query-compute-apps --------------------------------------------------------------------------------------

_CSV_NAMES = {"used_memory": "used_gpu_memory", "name": "process_name"}
_KNOWN = ("timestamp", "gpu_name", "gpu_bus_id", "gpu_serial", "gpu_uuid", "pid", "process_name", "used_gpu_memory")
_UNREAD = re.compile(r"^\[[^\]]*\]$")  # [N/A], [Not Found], [Insufficient Permissions], ...
_NUMBER = re.compile(r"^[0-9]{1,10}\Z")


def _column(name: str) -> str:
    name = re.sub(r"\s*\[[^\]]*\]$", "", name.strip()).lower()
    return _CSV_NAMES.get(name, name)


def _csv_memory(value: str, source: str, number: int, line: str) -> float | None:
    if _UNREAD.match(value) or value in ("N/A", ""):
        return None
    try:
        return float(value.removesuffix("MiB").strip())
    except ValueError:
        raise ParseError(
            f"{source}: line {number} has used_gpu_memory {value!r}, not MiB: {line[:160]!r}", fix=CSV_FIX
        ) from None


def _split(line: str, columns: list[str]) -> list[str] | None:
    """A row's cells; extra commas belong to the process name (it is the only free-text column)."""
    cells = line.split(",")
    extra = len(cells) - len(columns)
    if extra < 0 or (extra > 0 and "process_name" not in columns):
        return None
    if extra:
        at = columns.index("process_name")
        cells[at : at + extra + 1] = [",".join(cells[at : at + extra + 1])]
    return [c.strip() for c in cells]


def parse_compute_apps_csv(
    text: str, source: str = "nvidia-smi --query-compute-apps", fields: Sequence[str] | None = None
) -> list[ComputeApp]:
    """The rows of `--query-compute-apps ... --format=csv[,noheader][,nounits]`. `fields` names the queried
    columns in order when the output has no header. Only the header is an empty answer (no compute process)."""
    lines = [(n, raw.strip()) for n, raw in enumerate(text.splitlines(), start=1) if raw.strip()]
    if not lines:
        raise ParseError(f"{source} is empty", fix=CSV_FIX)
    first = [_column(c) for c in lines[0][1].split(",")]
    if "pid" in first and all(c in _KNOWN for c in first):
        columns, body = first, lines[1:]
    elif fields is not None:
        columns, body = [_column(f) for f in fields], lines
    else:
        raise ParseError(
            f"{source}: line {lines[0][0]} is no CSV header naming pid: {lines[0][1][:160]!r}",
            fix=CSV_FIX + ", or name the queried fields in order when it was printed with noheader",
        )
    if "pid" not in columns:
        raise ParseError(f"{source}: the columns {columns} name no pid", fix=CSV_FIX)
    out: list[ComputeApp] = []
    for number, line in body:
        cells = _split(line, columns)
        if cells is None:
            raise ParseError(
                f"{source}: line {number} has {len(line.split(','))} values for {len(columns)} columns: {line[:160]!r}",
                fix=CSV_FIX,
            )
        row = dict(zip(columns, cells, strict=True))
        if not _NUMBER.match(row["pid"]):
            raise ParseError(f"{source}: line {number} has pid {row['pid']!r}: {line[:160]!r}", fix=CSV_FIX)
        name = row.get("process_name", "")
        out.append(
            ComputeApp(
                pid=int(row["pid"]),
                name="" if _UNREAD.match(name) else name,
                gpu_uuid="" if _UNREAD.match(row.get("gpu_uuid", "")) else row.get("gpu_uuid", ""),
                used_memory_mib=_csv_memory(row.get("used_gpu_memory", ""), source, number, line),
                gpu_bus_id=row.get("gpu_bus_id", ""),
                gpu_name=row.get("gpu_name", ""),
            )
        )
    return out


# ---- pmon ------------------------------------------------------------------------------------------------------

_PMON_VALUES = {"sm": "sm_util", "mem": "mem_util", "enc": "enc_util", "dec": "dec_util", "fb": "fb_mib"}


def _pmon_value(text: str, column: str, source: str, number: int, line: str) -> float | None:
    if text == "-":
        return None
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"{source}: line {number} has {column} {text!r}: {line[:160]!r}", fix=PMON_FIX) from None


def parse_pmon(text: str, source: str = "nvidia-smi pmon") -> list[PmonSample]:
    """One record per process line, in order, each with its monitoring cycle (a cycle ends where a process shows
    up again on the same GPU). A GPU with no process (pid `-`) gives no record."""
    columns: list[str] | None = None
    out: list[PmonSample] = []
    cycle = 0
    seen_cycle: set[tuple[int, int]] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if "pid" in tokens and "gpu" in tokens:
                columns = [t.lower() for t in tokens]
            continue  # the units line, or a comment
        if columns is None:
            raise ParseError(f"{source}: line {number} comes before any `# gpu pid ...` header: {line!r}", fix=PMON_FIX)
        cells = line.split(maxsplit=len(columns) - 1)
        if len(cells) == len(columns) - 1 and cells[columns.index("pid")] == "-":
            cells.append("-")  # an idle GPU's line may end without a command
        if len(cells) != len(columns):
            raise ParseError(
                f"{source}: line {number} has {len(cells)} values for {len(columns)} columns: {line!r}", fix=PMON_FIX
            )
        row = dict(zip(columns, cells, strict=True))
        if not _NUMBER.match(row["gpu"]):
            raise ParseError(f"{source}: line {number} has GPU {row['gpu']!r}: {line!r}", fix=PMON_FIX)
        if row["pid"] == "-":
            continue
        if not _NUMBER.match(row["pid"]):
            raise ParseError(f"{source}: line {number} has pid {row['pid']!r}: {line!r}", fix=PMON_FIX)
        key = (int(row["gpu"]), int(row["pid"]))
        if key in seen_cycle:
            cycle, seen_cycle = cycle + 1, set()
        seen_cycle.add(key)
        values = {
            attr: _pmon_value(row[col], col, source, number, line) for col, attr in _PMON_VALUES.items() if col in row
        }
        out.append(
            PmonSample(
                gpu=key[0],
                pid=key[1],
                type=row.get("type", ""),
                name=row.get("command", "").strip(),
                cycle=cycle,
                **values,
            )
        )
    if columns is None:
        raise ParseError(f"{source}: no `# gpu pid type ...` header", fix=PMON_FIX)
    return out


# ---- any of them -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessesReport:
    """What one saved output says about processes; `format` says which output it was."""

    format: str  # table | compute-apps | pmon
    processes: tuple[TableProcess, ...] = ()
    mig_devices: tuple[MigDeviceUsage, ...] = ()
    compute_apps: tuple[ComputeApp, ...] = ()
    pmon: tuple[PmonSample, ...] = ()


def parse_processes(text: str, source: str = "nvidia-smi") -> ProcessesReport:
    """Plain `nvidia-smi` (its Processes: and MIG devices: tables), `--query-compute-apps` CSV with its header,
    or `pmon`, told apart by shape."""
    if re.search(r"^\s*\|.*Processes:", text, re.MULTILINE):
        return ProcessesReport(
            "table", tuple(parse_process_table(text, source)), mig_devices=tuple(parse_mig_devices(text, source))
        )
    if re.search(r"^\s*#.*\bgpu\b.*\bpid\b", text, re.MULTILINE):
        return ProcessesReport("pmon", pmon=tuple(parse_pmon(text, source)))
    if text.strip():
        return ProcessesReport("compute-apps", compute_apps=tuple(parse_compute_apps_csv(text, source)))
    raise ParseError(f"{source} is empty", fix=TABLE_FIX)


# ---- into the attribution model --------------------------------------------------------------------------------


def process_reading(
    table: Iterable[TableProcess], uuid_of_gpu: Mapping[int, str], pmon: Sequence[PmonSample] | None = None
) -> ProcessReading:
    """The compute processes of a `Processes:` table as NVML would give them, on the GPUs `uuid_of_gpu` names. With
    `pmon`, a GPU it covers counts as sampled and each process gets its samples' mean (0 where it has none); a GPU
    with MPS clients or MIG instances does not, as NVML keeps no per-process samples there."""
    rows = [r for r in table if r.compute and r.gpu in uuid_of_gpu]
    sampled_gpus: set[int] = set()
    means: dict[tuple[int, int], tuple[float, float]] = {}
    if pmon is not None:
        unsampled = {r.gpu for r in rows if r.mps or r.gpu_instance_id is not None}
        sampled_gpus = {s.gpu for s in pmon} - unsampled
        for key in {(s.gpu, s.pid) for s in pmon if s.sampled}:
            mine = [s for s in pmon if (s.gpu, s.pid) == key and s.sampled]
            cycles = len({s.cycle for s in mine}) or 1
            means[key] = (
                sum(s.sm_util or 0.0 for s in mine) / cycles,
                sum(s.mem_util or 0.0 for s in mine) / cycles,
            )
    out = []
    for r in rows:
        sm: float | None = None
        mem: float | None = None
        if r.gpu in sampled_gpus:
            sm, mem = means.get((r.gpu, r.pid), (0.0, 0.0))
        out.append(
            GpuProcess(
                pid=r.pid,
                gpu_uuid=uuid_of_gpu[r.gpu],
                gpu_instance_id=r.gpu_instance_id,
                used_memory_mib=r.used_memory_mib,
                sm_util=sm,
                mem_util=mem,
                mps=r.mps,
                name=r.name,
            )
        )
    return ProcessReading(tuple(out), frozenset(uuid_of_gpu[g] for g in sampled_gpus if g in uuid_of_gpu))
