"""`dcgmi health -c` output: DCGM's health watches, overall and per entity and system, read line by line.

The layout is dcgmi's DcgmiOutputTree with a 28/60 split (NVIDIA/DCGM dcgmi/Health.cpp, DcgmiOutput.cpp; the same
in 2.x, 3.x and 4.x)::

    +---------------------------+----------------------------------------------------------+
    | Health Monitor Report                                                                |
    +===========================+==========================================================+
    | Overall Health            | Failure                                                  |
    | GPU                       |                                                          |
    | -> 1                      | Failure                                                  |
    |    -> Errors              |                                                          |
    |       -> Memory system    | Failure                                                  |
    |                           | GPU 1 had uncorrectable memory errors and row            |
    |                           | remapping failed.                                        |
    +---------------------------+----------------------------------------------------------+

An entity group row (`GPU`, `Switch`, `CPU`, `ConnectX`, ...), one row per entity with its health (`Healthy`,
`Warning`, `Failure`, or `Internal error` when DCGM could not tell), then per system (`PCIe system`, `NVLINK
system`, `Memory system`, `Thermal system`, `Power system`, `InfoROM system`, `Driver`, ...) its health and its
incidents' messages joined by `, ` and wrapped at word boundaries into 54-character rows. Each level of the tree
is indented three columns and marked `-> `. DCGM 2.0-2.2 labelled an entity by its health code instead of its id
(a bug fixed in 2.4); the label is kept as printed.

`dcgmi health -c -j` prints the same tree as JSON (DcgmiOutput.cpp's DcgmiOutputJson, jsoncpp's styled string): a
`header` list and a `body` whose nodes are `{"value": ..., "overflow": [...], "children": {name: node}}`, as
`{"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": {"1": {"value": "Failure", "children":
{"Errors": {"children": {"Memory system": {"value": "Failure", "overflow": ["GPU 1 had ..."]}}}}}}}}}`
(`parse_health_json`).

Around it dcgmi prints `Error: Unable to check health watches. Return: ...` or `Error: Health watches not enabled.
Please enable watches.` when there is nothing to report. `dcgmi health -f` prints `Health monitor systems report`
with the watches that are on: a list of watches, not a check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Health = Literal["Healthy", "Warning", "Failure", "Internal error"]
HEALTHS: tuple[str, ...] = ("Healthy", "Warning", "Failure", "Internal error")
_RANK = {"Healthy": 0, "Warning": 1, "Failure": 2, "Internal error": 1}
MAX_ENTITIES = 4096
MAX_SYSTEMS = 64  # per entity: DCGM has 14 health systems
MAX_MESSAGE_CHARS = 8192
MAX_EVIDENCE = 20
MAX_KEPT = 16 * 1024 * 1024  # characters of messages and rows a report keeps, whatever the input's size

_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
_ROW = re.compile(r"^\|(?P<left>[^|]*)\|?(?P<right>.*)$")
_ARROW = re.compile(r"^(?P<indent> *)-> (?P<label>.*)$")
_ERROR = re.compile(r"^Error:\s*(?P<text>.*)$")


@dataclass
class HealthSystem:
    name: str  # "Memory system", "PCIe system", "Driver", ...
    health: str
    message: str = ""
    lines: list[str] = field(default_factory=list)


@dataclass
class HealthEntity:
    group: str  # "GPU", "Switch", "CPU", "ConnectX", ...
    id: str  # as printed
    health: str
    systems: list[HealthSystem] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.group} {self.id}"


@dataclass
class HealthReport:
    overall: str | None = None
    entities: list[HealthEntity] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # dcgmi's `Error: ...` lines: no report to read
    gaps: list[str] = field(default_factory=list)  # why the report is not whole
    watch_list: bool = False  # `dcgmi health -f`: the watches that are on, not a check
    overall_line: str = ""

    @property
    def complete(self) -> bool:
        return not self.gaps


class HealthParser:
    """Reads `dcgmi health -c` one line at a time; `finish()` gives the report."""

    def __init__(self) -> None:
        self.report = HealthReport()
        self.header = False  # `| Health Monitor Report` seen
        self.after_header = False  # the `+===+` line under it seen
        self.last_border = False  # the last table line was a plain border (the closing one, unless rows follow)
        self.rows = 0
        self.group = ""
        self.entity: HealthEntity | None = None
        self.system: HealthSystem | None = None
        self.dropped = 0
        self.kept = 0

    def _keep(self, size: int) -> bool:
        self.kept += size
        if self.kept - size <= MAX_KEPT < self.kept:
            self.report.gaps.append(f"more than {MAX_KEPT // (1024 * 1024)} MiB of rows: the rest not kept")
        return self.kept <= MAX_KEPT

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        if _BORDER.match(line):
            if "=" in line:
                self.after_header = True
            elif self.after_header:
                self.last_border = True
            return
        error = _ERROR.match(line)
        if error is not None:
            if len(self.report.errors) < 20:
                self.report.errors.append(error.group("text").strip() or line)
            return
        if not line.startswith("|"):
            return
        self.last_border = False
        row = _ROW.match(line)
        if row is None:
            return
        self.rows += 1
        left = row.group("left").removeprefix(" ").rstrip()
        right = row.group("right").rstrip().removesuffix("|").strip()
        if left.strip() == "Health Monitor Report" and not right:
            self.header = True
            return
        if left.strip().lower() == "health monitor systems report":
            self.report.watch_list = True
            return
        self._row(left, right, line)

    def _row(self, left: str, right: str, line: str) -> None:
        label = left.strip()
        if not label:  # an overflow row: the next piece of the current system's messages
            if self.system is not None and len(self.system.message) < MAX_MESSAGE_CHARS and self._keep(len(line)):
                self.system.message = f"{self.system.message} {right}".strip()
                if len(self.system.lines) < MAX_EVIDENCE:
                    self.system.lines.append(line)
            return
        arrow = _ARROW.match(left)
        if arrow is None:  # level 0: Overall Health, or an entity group
            self.entity, self.system = None, None
            if label == "Overall Health":
                self.report.overall = right[:40]
                self.report.overall_line = line[:200]
            else:
                self.group = label[:40]
            return
        level = len(arrow.group("indent")) // 3 + 1
        name = arrow.group("label").strip()
        if level == 1:
            self.system = None
            if len(self.report.entities) >= MAX_ENTITIES:
                self.dropped += 1
                self.entity = None
                return
            self.entity = HealthEntity(self.group or "?", name[:40], right[:40], lines=[line[:200]])
            self.report.entities.append(self.entity)
        elif level == 3 and self.entity is not None:
            if len(self.entity.systems) >= MAX_SYSTEMS:
                self.system = None
                self.dropped += 1
                return
            self.system = HealthSystem(name[:60], right[:40], lines=[line[:200]])
            self.entity.systems.append(self.system)
        elif self.entity is not None and len(self.entity.lines) < MAX_EVIDENCE:
            self.entity.lines.append(line)  # `-> Errors`

    def finish(self) -> HealthReport:
        report = self.report
        if report.watch_list or (not self.rows and report.errors):
            return report
        if not self.header:
            report.gaps.append("the output starts inside the report (no `Health Monitor Report` header)")
        if not self.last_border:
            report.gaps.append("the report has no closing border: the output was cut")
        if report.overall is None and self.rows:
            report.gaps.append("no `Overall Health` row")
        if self.dropped:
            report.gaps.append(
                f"more entities or systems than kept ({MAX_ENTITIES}, {MAX_SYSTEMS} each): {self.dropped} not read"
            )
        report.gaps.extend(_consistency_gaps(report))
        return report


def _consistency_gaps(report: HealthReport) -> list[str]:
    """The overall health is the worst of the entities', and an entity's the worst of its systems' (Health.cpp):
    a worse level above than any shown below means rows were dropped."""
    gaps = []
    worst_entity = max((_RANK.get(e.health, 0) for e in report.entities), default=0)
    if report.overall in ("Warning", "Failure") and worst_entity < _RANK[report.overall]:
        gaps.append(f"overall health is {report.overall} but no entity shown is: rows were dropped")
    if report.overall == "Healthy" and report.entities:
        gaps.append("overall health is Healthy yet entities have incidents: the report is not consistent")
    for entity in report.entities:
        worst_system = max((_RANK.get(s.health, 0) for s in entity.systems), default=-1)
        if entity.health in ("Warning", "Failure") and worst_system < _RANK[entity.health]:
            gaps.append(f"{entity.name} is {entity.health} but none of its systems shown is: rows were dropped")
    return gaps[:10]


def read_health(lines: Iterable[str]) -> tuple[HealthReport, int]:
    """Parse `dcgmi health -c` output given as lines; also how many table rows it held."""
    parser = HealthParser()
    for line in lines:
        parser.feed(line)
    return parser.finish(), parser.rows


def parse_health(text: str) -> HealthReport:
    return read_health(text.splitlines())[0]


def _text(node: dict[str, Any]) -> str:
    """A node's messages: its overflow rows (a system's incidents, wrapped) joined."""
    overflow = node.get("overflow")
    pieces = [str(p) for p in overflow] if isinstance(overflow, list) else []
    return " ".join(p.strip() for p in pieces if str(p).strip())[:MAX_MESSAGE_CHARS]


def _children(node: Any) -> dict[str, Any]:
    children = node.get("children") if isinstance(node, dict) else None
    return {str(k): v for k, v in children.items() if isinstance(v, dict)} if isinstance(children, dict) else {}


def parse_health_json(text: str) -> HealthReport:
    """`dcgmi health -c -j`: the same report as the table. Not JSON, or not a health report: a gap that says so."""
    report = HealthReport()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        report.gaps.append(f"not whole JSON ({exc.msg} at line {exc.lineno}): the output was cut or is not dcgmi's")
        return report
    body = data.get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        report.gaps.append("no `body` in the JSON: not a `dcgmi health -j` report")
        return report
    for group, node in body.items():
        if not isinstance(node, dict):
            continue
        if group == "Overall Health":
            report.overall = str(node.get("value", ""))[:40] or None
            report.overall_line = f'"Overall Health": {report.overall}'
            continue
        for entity_id, entity_node in list(_children(node).items())[:MAX_ENTITIES]:
            entity = HealthEntity(group[:40], entity_id[:40], str(entity_node.get("value", ""))[:40],
                                  lines=[f"{group} {entity_id}: {entity_node.get('value', '')}"])  # fmt: skip
            # the systems sit under `Errors` (and any other level DCGM adds): every descendant with a value
            pending = list(_children(entity_node).items())
            while pending and len(entity.systems) < MAX_SYSTEMS:
                name, system_node = pending.pop(0)
                if "value" in system_node:
                    message, value = _text(system_node), str(system_node["value"])[:40]
                    line = f"{name}: {value} {message}"[:200]
                    entity.systems.append(HealthSystem(name[:60], value, message, [line]))
                pending += list(_children(system_node).items())
            report.entities.append(entity)
    if report.overall is None and not report.entities:
        report.gaps.append("no `Overall Health` in the JSON")
    report.gaps.extend(_consistency_gaps(report))
    return report


def parse_health_any(text: str) -> HealthReport:
    """The table or its `-j` JSON, told by the first character."""
    return parse_health_json(text) if text.lstrip().startswith("{") else parse_health(text)
