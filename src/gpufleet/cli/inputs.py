"""Opening what a person names on the command line: a saved file or `-` for stdin, with the refusals every reading
command shares (no such file, a directory, a device or FIFO that may never end, no permission, too big to hold)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from gpufleet.errors import NotFoundError, UserError

MAX_TEXT_BYTES = 64 * 1024 * 1024  # what a command that reads a whole text will hold


@contextmanager
def open_input(name: str | Path) -> Iterator[tuple[BinaryIO, str]]:
    """The byte stream of a file, or of stdin for `-`, and the name to cite."""
    name = str(name)
    if name == "-":
        yield sys.stdin.buffer, "stdin"
        return
    path = Path(name)
    if not path.exists():
        raise NotFoundError(f"{name}: no such file", fix="pass the saved output, or - to read stdin")
    if path.is_dir():
        raise UserError(f"{name} is a directory", fix="pass the saved output files, or - to read stdin")
    if not path.is_file():  # /dev/zero, a FIFO: a stream that may never end
        raise UserError(f"{name} is not a regular file", fix="save the output to a file first, or pipe it to -")
    try:
        stream = path.open("rb")
    except PermissionError:
        raise UserError(f"{name}: permission denied", fix="check the file's permissions") from None
    except OSError as exc:
        raise UserError(f"cannot read {name}: {exc.strerror}", fix="check the path") from None
    with stream:
        yield stream, name


def _too_big(cited: str, limit: int) -> UserError:
    return UserError(
        f"{cited} is larger than {limit // (1024 * 1024)} MiB", fix="pass the part that matters, or use triage"
    )


def read_input_text(name: str | Path, limit: int = MAX_TEXT_BYTES) -> tuple[str, str]:
    """The whole text of a file or stdin (invalid UTF-8 replaced) and the name to cite; refused past `limit`."""
    with open_input(name) as (stream, cited):
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise _too_big(cited, limit)
    return data.decode("utf-8", errors="replace"), cited


def read_input_lines(name: str | Path, limit: int = MAX_TEXT_BYTES) -> tuple[list[str], str]:
    """The lines of a file or stdin as `triage.paste.text_lines` gives them (each bounded, invalid UTF-8
    replaced) and the name to cite; refused past `limit` in all."""
    from gpufleet.triage.paste import text_lines

    lines: list[str] = []
    size = 0
    with open_input(name) as (stream, cited):
        for line in text_lines(stream):
            size += len(line)
            if size > limit:
                raise _too_big(cited, limit)
            lines.append(line)
    return lines, cited
