"""`dcgmi dmon` samples and `dcgmi discovery -l` listings (NVIDIA/DCGM dcgmi/DeviceMonitor.cpp and Query.cpp,
DCGM 2.x-4.x).

`dcgmi dmon -e 150,155,230,...` prints a header of the fields' short names (dcgmlib dcgm_fields.cpp: TMPTR gpu_temp,
POWER, XIDER the last Xid, EDVTL volatile double-bit ECC total, ESVTL single-bit, RRF row remap failed, RRP row remap
pending, RPDBE/RPSBE retired pages, RPPEN retirement pending, DVCCTR the clocks-event bitmask, ...) and a line of
units, again every 14 rows, then one row per entity per sample, each value left-aligned under its name (`N/A` when
blank)::

    #Entity           TMPTR     XIDER     EDVTL
    ID                C
    GPU 0             34        0         0
    GPU-I 1           N/A       N/A       N/A

`dcgmi discovery -l` prints `N GPUs found.` (4.x: `N GPUs found (Active).`, a `Note: Use -a flag ...` line when some
GPUs are not active, and `Status: LOST` lines under -a, DcgmEntityStatusToString: OK, UNSUPPORTED, INACCESSIBLE,
LOST, FAKE, DISABLED, DETACHED, UNKNOWN), then a table of GPU ID and Device Information (Name, PCI Bus ID, Device
UUID, `(last known)` after a value DCGM cached), then the NvSwitches, ConnectX and CPUs it found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.errors import ParseError

MAX_ENTITIES = 4096
MAX_SAMPLES = 100_000

_ENTITY = re.compile(r"^(?P<group>GPU|GPU-I|GPU-CI|Switch|vGPU|CPU|CPU Core|Link|ConnectX|NvSwitch)\s+(?P<id>\d+)\b")


@dataclass
class DmonReport:
    fields: list[str] = field(default_factory=list)  # the short names, in column order
    units: list[str] = field(default_factory=list)
    samples: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # entity ("GPU 0") -> its rows
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _columns(header: str) -> list[tuple[str, int]]:
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", header)][1:]  # past `#Entity`


def parse_dmon(text: str, source: str = "dcgmi dmon", strict: bool = True) -> DmonReport:
    """Every sample of every entity. A row before any header, or one that does not read, is a problem (an error
    when strict)."""
    report = DmonReport()
    columns: list[tuple[str, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if re.match(r"#\s?Entity\b", stripped):  # `#Entity` (3.x+, left-aligned), `# Entity` (2.x, right-aligned)
            line = line.replace("# Entity", "#Entity", 1)
            offset = len(line) - len(line.lstrip())
            columns = [(name, at - offset) for name, at in _columns(line)]
            report.fields = [name for name, _ in columns]
            continue
        if re.match(r"I[Dd]\b", stripped) and columns and not _ENTITY.match(stripped):
            report.units = stripped.split()[1:]
            continue
        if stripped.startswith("Error:"):
            report.errors.append(stripped.removeprefix("Error:").strip())
            continue
        if re.search(r"(?:^[$#%]|[$#%:]\s*)(?:sudo\s+)?dcgmi\b", stripped):
            continue  # the command, echoed or behind its prompt
        entity = _ENTITY.match(stripped)
        if entity is None or not columns:
            if entity is not None or strict:
                message = f"{source}:{number}: not a dcgmi dmon row: {stripped[:80]!r}"
                if strict:
                    raise ParseError(message, fix="pass the output of `dcgmi dmon -e ...` with its #Entity header")
                report.problems.append(message)
            continue
        values = stripped[entity.end() :].split()
        if len(values) != len(columns):  # a value with a space in it: read by the header's column positions
            body = stripped
            values = [body[at : columns[i + 1][1] if i + 1 < len(columns) else None].strip()
                      for i, (_, at) in enumerate(columns)]  # fmt: skip
        name = f"{entity['group']} {entity['id']}"
        if name not in report.samples and len(report.samples) >= MAX_ENTITIES:
            continue
        rows = report.samples.setdefault(name, [])
        if len(rows) < MAX_SAMPLES:
            rows.append(dict(zip(report.fields, values, strict=False)))
    if not report.fields and not report.errors:
        raise ParseError(f"{source}: no #Entity header", fix="pass the output of `dcgmi dmon -e ...`")
    return report


@dataclass
class DiscoveredGpu:
    id: int
    info: list[str] = field(default_factory=list)  # the Device Information lines, as printed

    def value(self, key: str) -> str | None:
        for line in self.info:
            if line.startswith(f"{key}: "):
                return line.split(": ", 1)[1].removesuffix(" (last known)").strip()
        return None


@dataclass
class DiscoveryReport:
    gpus: list[DiscoveredGpu] = field(default_factory=list)
    gpus_found: int | None = None  # as `N GPUs found` says
    shown: str | None = None  # `Active` or `All` (DCGM 4.x)
    not_all_active: bool = False  # `Note: Use -a flag to show all GPUs ...`
    switches: int | None = None
    connectx: int | None = None
    errors: list[str] = field(default_factory=list)


_FOUND = re.compile(
    r"^(?P<n>\d+) (?P<what>GPUs?|NvSwitch(?:es)?|ConnectX|CPUs?) found(?: \((?P<shown>All|Active)\))?\."
)
_ROW = re.compile(r"^\|\s*(?P<id>\d*)\s*\|\s*(?P<info>.*?)\s*\|$")


def parse_discovery(text: str, source: str = "dcgmi discovery -l") -> DiscoveryReport:
    report = DiscoveryReport()
    section: str | None = None
    current: DiscoveredGpu | None = None
    for raw in text.splitlines():
        line = raw.strip()
        found = _FOUND.match(line)
        if found is not None:
            section, n = found["what"], int(found["n"])
            if section.startswith("GPU"):
                report.gpus_found, report.shown = n, found["shown"]
            elif section.startswith("NvSwitch"):
                report.switches = n
            elif section == "ConnectX":
                report.connectx = n
            continue
        if line.startswith("Note: Use -a flag"):
            report.not_all_active = True
            continue
        if line.startswith("Error:") and section is None:
            report.errors.append(line.removeprefix("Error:").strip())
            continue
        row = _ROW.match(line)
        if row is None or section is None or not section.startswith("GPU"):
            continue
        if row["id"]:
            current = DiscoveredGpu(int(row["id"]))
            report.gpus.append(current)
        if current is not None and row["info"] and row["info"] != "Device Information":
            current.info.append(row["info"])
    if report.gpus_found is None and not report.errors:
        raise ParseError(f"{source}: no `N GPUs found` line", fix="pass the output of `dcgmi discovery -l`")
    return report
