"""Rendering shared by every command: rich tables for people, JSON and YAML for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet.errors import UserError

# Piped output is not wrapped at 80 columns: tables stay one line per row, as kubectl prints them.
console = Console(width=None if sys.stdout.isatty() else 250)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 250)


class OutputFormat(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OUTPUT_HELP = "Output format: table (default), wide, json or yaml."


def _plain(value: Any) -> Any:
    """Make pydantic models, dataclasses, enums and numpy scalars JSON/YAML-safe."""
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump(mode="json"))
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    if isinstance(value, StrEnum):
        return str(value)
    return value


def dump_json(data: Any) -> str:
    return json.dumps(_plain(data), indent=2, sort_keys=False)


def dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True)


def emit(data: Any, fmt: OutputFormat, render_table: Callable[[bool], None]) -> None:
    """Print `data` as JSON/YAML, or call `render_table(wide)` for the human formats."""
    if fmt is OutputFormat.json:
        sys.stdout.write(dump_json(data) + "\n")
    elif fmt is OutputFormat.yaml:
        sys.stdout.write(dump_yaml(data))
    else:
        render_table(fmt is OutputFormat.wide)


def make_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    title: str | None = None,
    show_header: bool = True,
    min_widths: Sequence[int] | None = None,
) -> Table:
    """Cells are plain text: a value is never read as markup or emoji (00000000:AB:00.0 stays a PCI id)."""
    table = Table(title=title, header_style="bold", box=None, pad_edge=False, show_header=show_header)
    for i, col in enumerate(columns):
        table.add_column(col, min_width=min_widths[i] if min_widths and i < len(min_widths) else None)
    for row in rows:
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    return table


def no_resources(kind: str, where: str = "") -> None:
    """What kubectl says of an empty list, on stderr as kubectl writes it (stdout stays empty for a pipe):
    `No incidents found.`, `No gpus found on node dgx-001.`"""
    err_console.print(f"No {kind} found{' ' + where if where else ''}.", markup=False, highlight=False)


class RowFollower:
    """Rows printed as `kubectl get -w` prints them: the header once (with the first rows), then each batch of
    changed rows under it without a header, in columns at least as wide as every row printed before (a wider
    value widens its column from then on)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.widths = [len(c) for c in self.columns]
        self.header_printed = False

    def print(self, rows: Sequence[Sequence[Any]]) -> None:
        cells = [["" if v is None else str(v) for v in row] for row in rows]
        if not cells:
            return
        for row in cells:
            self.widths = [max(w, Text(v).cell_len) for w, v in zip(self.widths, row, strict=False)]
        console.print(make_table(self.columns, cells, show_header=not self.header_printed, min_widths=self.widths))
        self.header_printed = True


def print_or_write(text: str, out: Path | None) -> None:
    """``text`` to stdout, or to the file ``out`` with a line saying so (a path that cannot be written is a user
    error naming --out)."""
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror}", fix="give a writable path to --out") from None
    console.print(f"wrote {out}", highlight=False)
