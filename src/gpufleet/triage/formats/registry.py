"""What gpufleet knows about one tool's output, in one place: its name, how to tell it from pasted text, which
parser reads it, which judgement triage gives it, and how `gpufleet read` shows it. `gpufleet read`, `gpufleet
triage` (its format detection, `--format` and help) and the tests all iterate one `Registry` of these, so a format
is known to both commands or to neither.

A format a command cannot serve says so with None: no parser in `gpufleet.parsers` (kubectl's objects, an
application's log) means no `read` subcommand; no judgement means triage recognises the text and lists what its
parser read, with no verdict (`unknown`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.triage.readers.common import Reader, bounded_text
from gpufleet.triage.report import TriageReport

Sign = tuple[str, int]  # a regular expression searched in a line's first characters, and what it scores
NumberedReader = Callable[[Iterable[tuple[int, str]], str], TriageReport]
MAX_ROWS_NOTED = 20  # rows of what a parser read listed in a report without a judgement


def cell(value: object) -> str:
    """A table cell: `-` for a value the tool did not give."""
    return "-" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Option:
    """An option of `gpufleet read FORMAT` passed on to the parser as the keyword `name` (None when not given)."""

    name: str
    type: type
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: list[list[Any]]
    title: str | None = None


@dataclass(frozen=True, slots=True)
class View:
    """What `gpufleet read` prints for people: its tables, then lines (rich markup allowed: `[red]...[/red]`)."""

    tables: tuple[Table, ...] = ()
    lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Format:
    """One tool output. `parse` is called as `parse(text, source=source, **options)`; `render(parsed, source)` is
    the table `gpufleet read` prints (without one, it prints the records as YAML)."""

    name: str  # the `read` subcommand and the format triage reports
    summary: str  # one line, for both commands' help
    signs: tuple[Sign, ...] = ()  # lines only this tool prints, for telling it apart (`triage.detect`)
    parse: Callable[..., Any] | None = None  # a parser in gpufleet.parsers (or the package that owns it)
    judge: Reader | None = None  # cleaned lines in, a judged TriageReport out
    render: Callable[[Any, str], View] | None = None
    options: tuple[Option, ...] = ()
    read_help: str = ""  # the `read` subcommand's help when it says more than `summary`
    judged_as: str | None = None  # its lines are another format's (a syslog's link events are a kernel log)
    judge_numbered: NumberedReader | None = None  # judges (line number, line) pairs: the rest of a stream skimmed
    keeps_launchers: bool = False  # its judge learns each line's rank from `[1,0]<stdout>:` / `0: ` prefixes


@dataclass(slots=True)
class Registry:
    """The formats in the order detection breaks ties in (the first listed wins)."""

    formats: tuple[Format, ...]
    _by_name: dict[str, Format] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {}
        for fmt in self.formats:
            if fmt.name in self._by_name:
                raise ValueError(f"format {fmt.name!r} is registered twice")
            self._by_name[fmt.name] = fmt
        for fmt in self.formats:
            target = self._by_name.get(fmt.judged_as or fmt.name)
            if target is None or target.judged_as is not None:
                raise ValueError(f"format {fmt.name!r} is judged as {fmt.judged_as!r}, which is not a judged format")
            if fmt.judge is None and fmt.parse is None and fmt.judged_as is None:
                raise ValueError(f"format {fmt.name!r} has neither a parser nor a judgement")
            for pattern, _ in fmt.signs:
                re.compile(pattern)

    def __iter__(self) -> Iterator[Format]:
        return iter(self.formats)

    def __len__(self) -> int:
        return len(self.formats)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Format:
        return self._by_name[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def readable(self) -> tuple[Format, ...]:
        """The formats `gpufleet read` parses."""
        return tuple(f for f in self.formats if f.parse is not None)

    def detected(self) -> tuple[Format, ...]:
        """The formats told by their own signs; the others are told as the format they are judged as."""
        return tuple(f for f in self.formats if f.signs)

    def judged(self, name: str) -> Format:
        """The format whose judgement `name`'s lines get: itself, or the one it is judged as."""
        fmt = self._by_name[name]
        return self._by_name[fmt.judged_as] if fmt.judged_as else fmt

    def judge(self, name: str, lines: Iterable[str], source: str) -> TriageReport:
        """Judge `lines` as `name`; an unknown name or a parser's refusal is `unknown` saying why."""
        if name not in self._by_name:
            report = TriageReport(name, source, judged=False)
            report.notes.append(f"recognised as {name}, which triage cannot judge yet")
            return report
        fmt = self.judged(name)
        try:
            if fmt.judge is not None:
                return fmt.judge(lines, source)
            return what_it_read(fmt, lines, source)
        except GpufleetError as exc:
            report = TriageReport(fmt.name, source, judged=False)
            report.notes.append(f"could not read it as {fmt.name}: {exc.message}")
            return report


_MARKUP = re.compile(r"\[/?(?:red|yellow|green|dim|bold|cyan)\]")


def what_it_read(fmt: Format, lines: Iterable[str], source: str) -> TriageReport:
    """For a format triage has no judgement for: what its parser read, as notes, and no verdict (`unknown`)."""
    if fmt.parse is None:  # the registry refuses such a format; kept for a type checker
        raise ValueError(f"format {fmt.name!r} has no parser")
    report = TriageReport(fmt.name, source, judged=False)
    parsed = fmt.parse(bounded_text(lines, report), source=source)
    report.notes.append(f"triage has no judgement for {fmt.name} output: what it read is listed, with no verdict")
    if fmt.render is None:
        return report
    view = fmt.render(parsed, source)
    for table in view.tables:
        if table.title:
            report.notes.append(table.title)
        for row in table.rows[:MAX_ROWS_NOTED]:
            report.notes.append(
                ", ".join(f"{col.lower()} {cell(v)}" for col, v in zip(table.columns, row, strict=False))
            )
        if len(table.rows) > MAX_ROWS_NOTED:
            report.notes.append(f"{len(table.rows) - MAX_ROWS_NOTED} more row(s) not listed")
    report.notes.extend(_MARKUP.sub("", line) for line in view.lines)
    return report
