"""What gpufleet writes for itself is its owner's only: every file 0600 and every directory 0700, whatever the
process's umask.

Every writer under the data directory ($GPUFLEET_HOME: the state database, the metric store, tickets, the token
and config files, the agents' spools) goes through these helpers. A file is created with its final mode (never
briefly readable by others) and one an older version left wider is tightened. A directory gpufleet keeps its files
in is made, or tightened, 0700; the parents of a file written elsewhere (`token create --out DIR/FILE`) are made
0700 only where they are missing, never changed where they exist.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def private_dir(path: Path | str) -> Path:
    """`path` as a directory only its owner can enter: made 0700 with any missing parents, or tightened to 0700
    when it exists wider. Call it on directories gpufleet owns (the data directory and what it keeps in it)."""
    path = Path(path)
    _make_missing(path)
    _tighten(path, DIR_MODE)
    return path


def private_file(path: Path | str) -> Path:
    """`path` as an existing file only its owner can read and write: created empty if missing, tightened if wider
    (for a writer that opens it itself afterwards, as SQLite does)."""
    path = Path(path)
    _make_missing(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        _fix(fd)
    finally:
        os.close(fd)
    return path


def private_database(path: Path | str) -> Path:
    """A SQLite file and its sidecars (-wal, -shm, -journal) 0600 before SQLite opens it: SQLite gives the files it
    makes beside a database the database file's mode, so creating it 0600 keeps them 0600 too."""
    path = private_file(path)
    for suffix in SQLITE_SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            _tighten(path.with_name(path.name + suffix), FILE_MODE)
    return path


def write_private(path: Path | str, data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` (0600) all at once: a reader sees the old content or the new, never a part, and an
    existing file's wider mode does not carry over."""
    path = Path(path)
    _make_missing(path.parent)
    body = data.encode(encoding) if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        _fix(fd)
        with open(fd, "wb", closefd=False) as f:
            f.write(body)
            f.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    return path


def _make_missing(path: Path) -> None:
    """Make `path` and its missing parents, each new one 0700 (the umask cannot widen or narrow it)."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # made by another process meanwhile: theirs to set
        os.chmod(directory, DIR_MODE)


def _fix(fd: int) -> None:
    if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
        os.fchmod(fd, FILE_MODE)


def _tighten(path: Path, mode: int) -> None:
    if stat.S_IMODE(path.stat().st_mode) != mode:
        with contextlib.suppress(PermissionError):  # not ours: leave it to its owner
            path.chmod(mode)
