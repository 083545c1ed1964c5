"""`ibdiagnet` (ibutils2, shipped with MLNX_OFED/DOCA and UFM): its console output, its `ibdiagnet2.log` and the
sections of its `ibdiagnet2.db_csv`, as people paste them.

Console and log (ibdiagnet 2.x): each stage starts after a rule of dashes with its title (`Discovery`, `Lids Check`,
`Links Check`, `Subnet Manager`, `Port Counters`, `Nodes Information`, `Speed / Width checks`, `Partition Keys`,
`Alias GUIDs`, `Temperature Sensing`, `Routing`, ...); its messages are `-I- ...` (information), `-W- ...`
(warnings) and `-E- ...` (errors), an entry's detail on indented lines after it (a port counter entry lists
`counter_name : value (threshold=N)`). At the end, `Summary` is a table:

    -I- Stage                     Warnings   Errors     Comment
    -I- Discovery                 0          0
    -I- Port Counters             2          4

then `-I- You can find detailed errors/warnings in: /var/tmp/ibdiagnet2/ibdiagnet2.log`.

db_csv: sections between `START_<NAME>` and `END_<NAME>` lines, each a CSV table with a header row: NODES (NodeDesc,
NodeGUID, ...), PORTS (PortState, PortPhyState, LinkWidthActv, LinkSpeedActv, ...), LINKS (NodeGuid1, PortNum1,
NodeGuid2, PortNum2) and PM_INFO (NodeGUID, PortGUID, PortNumber and the PortCounters by name, in CamelCase or
snake_case by version).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

MAX_LINE_CHARS = 4096
MAX_ROWS = 200_000
_RULE = re.compile(r"^-{5,}\s*$")
_MESSAGE = re.compile(r"^-(?P<level>[IEW])-\s+(?P<text>.*?)\s*$")
_SUMMARY_HEAD = re.compile(r"^-I-\s+Stage\s+Warnings\s+Errors(?:\s+Comment)?\s*$")
_SUMMARY_ROW = re.compile(
    r"^-I-\s+(?P<stage>\S.*?)\s{2,}(?P<warnings>\d+)\s+(?P<errors>\d+)(?:\s+(?P<comment>\S.*?))?\s*$"
)
_SECTION = re.compile(r"^(?P<edge>START|END)_(?P<name>[A-Z0-9_]+)\s*$")
_TITLE = re.compile(r"^[A-Z][\w /&()-]{2,60}$")
_BANNER = re.compile(r"^(?:Loading IBDIAGNET from:|ibdiagnet \(|Running command:|Command Line:|Load Plugins from:)")
_COUNTER = re.compile(r"^\s+(?P<name>[A-Za-z]\w+)\s*:\s*(?P<value>\d+)(?:\s*\(threshold=(?P<threshold>\d+)\))?")


@dataclass
class Message:
    level: str  # I, W, E
    text: str
    stage: str
    line: int
    detail: list[str] = field(default_factory=list)  # indented lines after it

    @property
    def counters(self) -> dict[str, int]:
        """`symbol_error_counter : 52 (threshold=1)` detail lines, by name as printed."""
        out: dict[str, int] = {}
        for line in self.detail:
            if m := _COUNTER.match(line):
                out[m.group("name")] = int(m.group("value"))
        return out


@dataclass
class StageSummary:
    stage: str
    warnings: int
    errors: int
    comment: str
    line: str


@dataclass
class Ibdiagnet:
    messages: list[Message] = field(default_factory=list)
    summary: list[StageSummary] = field(default_factory=list)
    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # db_csv section -> rows
    open_tables: list[str] = field(default_factory=list)  # a START_ without its END: the paste stops inside it
    stages: list[str] = field(default_factory=list)
    log_path: str = ""
    unreadable: list[tuple[int, str]] = field(default_factory=list)

    def in_stage(self, stage: str) -> list[Message]:
        return [m for m in self.messages if m.stage == stage]


def parse_ibdiagnet(text: str, source: str = "") -> Ibdiagnet:
    """Read ibdiagnet's console output, its ibdiagnet2.log, or db_csv sections; never raises on odd lines."""
    out = Ibdiagnet()
    lines = text.splitlines()
    stage = ""
    in_summary = False
    table: str | None = None
    rows: list[str] = []
    last: Message | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw[:MAX_LINE_CHARS].rstrip()
        if not line.strip():
            last = None
            continue
        if m := _SECTION.match(line.strip()):
            if m.group("edge") == "START":
                table, rows = m.group("name"), []
            elif table is not None and table == m.group("name"):
                out.tables[table] = _rows(rows)
                table = None
            continue
        if table is not None:
            if len(rows) < MAX_ROWS:
                rows.append(line)
            continue
        if _RULE.match(line.strip()):
            nxt = lines[number].strip() if number < len(lines) else ""
            if nxt and _TITLE.match(nxt) and not nxt.startswith("-"):
                stage = nxt
                in_summary = stage == "Summary"
                if stage not in out.stages:
                    out.stages.append(stage)
            continue
        if line.strip() == stage:
            continue
        if line.strip() == "Summary":  # its rule line left out of the paste
            stage, in_summary = "Summary", True
            continue
        if _SUMMARY_HEAD.match(line.strip()):
            in_summary = True
            continue
        if in_summary and (m := _SUMMARY_ROW.match(line.strip())):
            out.summary.append(StageSummary(m.group("stage"), int(m.group("warnings")), int(m.group("errors")),
                                            m.group("comment") or "", line.strip()))  # fmt: skip
            continue
        if m := _MESSAGE.match(line.strip()):
            text_ = m.group("text")
            if "detailed errors/warnings in:" in text_:
                out.log_path = text_.rsplit(":", 1)[-1].strip()
            last = Message(m.group("level"), text_, stage, number)
            out.messages.append(last)
            continue
        if last is not None and line[:1].isspace():
            last.detail.append(line)
            continue
        if _BANNER.match(line.strip()):
            continue
        if stage == "" and not out.messages:
            out.unreadable.append((number, line))
    if table is not None:
        out.tables[table] = _rows(rows)
        out.open_tables.append(table)
    return out


def _rows(lines: list[str]) -> list[dict[str, str]]:
    if not lines:
        return []
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader)]
    out = []
    for row in reader:
        if row:
            out.append({k: v.strip() for k, v in zip(header, row, strict=False)})
    return out
