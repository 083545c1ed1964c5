"""Reading the live kernel log: one follower for a growing file and for /dev/kmsg, and running dmesg.

`KernelLogFollower` follows a file the way `tail -F` does (rotation by rename, truncation, the file missing for a
while) or /dev/kmsg (one `prio,seq,usec,flags;message` record per read), hands whole lines to `KmsgParser` (pure)
and says how far it has read as a `position` that a later follower resumes from: neither a line read twice nor one
skipped, across a restart and a rotation in between.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpufleet.errors import BackendError, DependencyMissingError, UserError
from gpufleet.parsers.kernel.kmsg import KernelEvent, KmsgParser, KmsgScan, scan_kmsg
from gpufleet.parsers.kernel.stream import KMSG_RECORD, MAX_LINE_BYTES

DMESG_TIMEOUT_S = 30.0
DEV_KMSG = Path("/dev/kmsg")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CHUNK = 1 << 20  # read at most this much before handing the events (and the new position) on
POLL_S = 0.2
_RECORD_SEQ = re.compile(r"^\d+,(\d+),")  # a /dev/kmsg record's sequence number

Status = Callable[[bool, str], None]  # (up, why): whether the log can be read now, and why not


@dataclass(frozen=True, slots=True)
class FilePosition:
    """How far a file was read: which file (device and inode, so a rotated or replaced file is told from the one
    read) and the byte offset just past the last whole line read."""

    device: int | None  # None: stored before devices were recorded, the inode alone names the file
    inode: int
    offset: int

    def text(self) -> str:
        return f"{self.device}:{self.inode}:{self.offset}"

    @classmethod
    def parse(cls, text: str | None) -> FilePosition | None:
        """A position from `text()`, or from the `inode:offset` older agents stored; None for anything else."""
        try:
            numbers = [int(part) for part in (text or "").split(":")]
        except ValueError:
            return None
        if len(numbers) == 2:
            return cls(None, numbers[0], numbers[1])
        return cls(*numbers) if len(numbers) == 3 else None

    def names(self, stat: os.stat_result) -> bool:
        """Whether `stat` is of the file this position is in."""
        return stat.st_ino == self.inode and self.device in (None, stat.st_dev)


@dataclass(frozen=True, slots=True)
class KmsgPosition:
    """How far /dev/kmsg was read: the sequence number of the last record read, in the boot that numbered it (a
    reboot numbers records from 0 again)."""

    seq: int
    boot: str | None = None  # None: stored before boots were recorded, taken to be this boot

    def text(self) -> str:
        return str(self.seq) if self.boot is None else f"{self.seq}:{self.boot}"

    @classmethod
    def parse(cls, text: str | None) -> KmsgPosition | None:
        seq, _, boot = (text or "").partition(":")
        return cls(int(seq), boot or None) if seq.isdigit() else None


Position = FilePosition | KmsgPosition


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class KernelLogFollower:
    """Follow one kernel log, from where an earlier follower's `position` was or from the start.

    `follow(stop)` yields the events of each read (a list, maybe empty) until `stop` holds when there is nothing
    more to read; `position` then names the last whole line (file) or record (/dev/kmsg) given to the parser, so
    whoever stores it after handling a list resumes exactly there. `end()` completes what the parser still holds.
    A missing file is waited for (said through `status`); a log that cannot be read raises `UserError` or
    `BackendError`, and a new follower made from `position` takes up where this one was.
    """

    def __init__(
        self,
        path: Path | str = DEV_KMSG,
        *,
        kmsg: bool | None = None,
        position: Position | None = None,
        from_start: bool = True,
        host: str | None = None,
        year: int | None = None,
        poll_s: float = POLL_S,
        status: Status | None = None,
    ) -> None:
        """`kmsg`: read `path` as /dev/kmsg records (by default, a path under /dev/). `from_start=False` begins a
        file at its end when there is no position to resume from; /dev/kmsg is always read from its oldest
        record."""
        self.path = Path(path)
        self.kmsg = str(path).startswith("/dev/") if kmsg is None else kmsg
        self.position: Position | None = position
        self.poll_s = poll_s
        self.status: Status = status or (lambda ok, why: None)
        self._parser = KmsgParser(host=host, year=year)
        self._buffer = b""  # read past the last whole line
        # a file: where reading resumes when it is first opened, and the file being read
        self._resume = position if isinstance(position, FilePosition) else None
        self._from_start = from_start or position is not None
        self._file: tuple[int, int] = (0, 0)
        self._offset = 0
        # /dev/kmsg: records up to this sequence number were read; the one being read is new
        self._boot = _boot_id() if self.kmsg else None
        resumed = isinstance(position, KmsgPosition) and position.boot in (None, self._boot)
        self._seq = position.seq if isinstance(position, KmsgPosition) and resumed else -1
        self._new_record = True
        self._checked = False

    def follow(self, stop: Callable[[], bool] | threading.Event) -> Generator[list[KernelEvent], None, None]:
        """The events of each read until `stop` (asked whenever all there is has been read; an Event is also
        waited on between polls)."""
        done, sleep = (stop.is_set, stop.wait) if isinstance(stop, threading.Event) else (stop, time.sleep)
        return self._follow_kmsg(done, sleep) if self.kmsg else self._follow_file(done, sleep)

    def end(self, *, last_line: bool = True) -> list[KernelEvent]:
        """Reports still waiting for more lines, complete as they are. With `last_line` the input ends here and a
        last line without its newline is read too; without it that line is left to a follower resumed from
        `position`."""
        events = self._take(b"", last=True) if last_line else []
        return events + self._parser.finish()

    def events(self, stop: Callable[[], bool] | threading.Event) -> Iterator[KernelEvent]:
        """Every event until `stop`, then those the end of the input completes: for a reader that will not
        resume."""
        for batch in self.follow(stop):
            yield from batch
        yield from self.end()

    # --- what was read -------------------------------------------------------------------------------------------

    def _take(self, chunk: bytes, *, last: bool = False) -> list[KernelEvent]:
        """Parse the whole lines read so far; a line without its newline waits for it, unless it is the `last`
        of its file or longer than any line (then it is read as it is)."""
        if self.kmsg and not self._checked and chunk:
            if KMSG_RECORD.match(chunk) is None:
                raise UserError(
                    f"{self.path} does not give kernel log records (`prio,seq,usec,flags;message`)",
                    fix="follow /dev/kmsg, or give a log file",
                )
            self._checked = True
        data = self._buffer + chunk
        cut = len(data) if last else data.rfind(b"\n") + 1
        if not cut and len(data) > MAX_LINE_BYTES:
            cut = len(data)
        self._buffer = data[cut:]
        if not cut:
            return []
        events: list[KernelEvent] = []
        for line in _lines(data[:cut].decode("utf-8", errors="replace")):
            if not self.kmsg or self._unread(line):
                events += self._parser.feed_line(line)
        self._offset += cut
        if self.kmsg:
            self.position = KmsgPosition(self._seq, self._boot) if self._seq >= 0 else self.position
        else:
            self.position = FilePosition(*self._file, self._offset)
        return events

    def _unread(self, line: str) -> bool:
        """Whether this /dev/kmsg line is of a record not read before (a record's continuation lines go with it)."""
        head = _RECORD_SEQ.match(line)
        if head is not None:
            seq = int(head.group(1))
            self._new_record = seq > self._seq
            self._seq = max(seq, self._seq)
        return self._new_record

    # --- a file that grows ---------------------------------------------------------------------------------------

    def _follow_file(
        self, stop: Callable[[], bool], sleep: Callable[[float], object]
    ) -> Generator[list[KernelEvent], None, None]:
        handle: BinaryIO | None = None
        try:
            while True:
                if handle is None:
                    handle = self._open_file()
                    if handle is None:
                        if stop():
                            return
                        self.status(False, f"{self.path} does not exist yet")
                        sleep(self.poll_s)
                        continue
                    self.status(True, "")
                chunk = handle.read(CHUNK)
                if chunk:
                    yield self._take(chunk)
                    continue
                if self._replaced(handle):  # what was written to it before: then the file now at the path
                    yield self._take(handle.read(), last=True)
                    handle.close()
                    handle = None
                    continue
                if stop():
                    return
                sleep(self.poll_s)
        finally:
            if handle is not None:
                handle.close()

    def _open_file(self) -> BinaryIO | None:
        """The file to read next, at the offset to read it from: the one the position names where reading stopped
        (still at the path, or renamed beside it by rotation), else the file at the path from its start (from its
        end, for a follower told so that has read nothing yet). None while there is none."""
        resume = self._resume
        target = self.path if resume is None else self._where(resume)
        try:
            handle = target.open("rb")
        except FileNotFoundError:
            self._from_start = True  # a file that appears after the follower began is new: read it whole
            return None
        except OSError as exc:
            raise UserError(f"cannot read {target}: {exc.strerror}", fix="check the path and permissions") from exc
        stat = os.fstat(handle.fileno())
        if resume is not None and resume.names(stat) and resume.offset <= stat.st_size:
            offset = resume.offset
        else:  # a new file, or one truncated since (copytruncate rotation): all of it is new
            offset = 0 if self._from_start else stat.st_size
        handle.seek(offset)
        self._resume, self._from_start = None, True
        self._file, self._offset, self._buffer = (stat.st_dev, stat.st_ino), offset, b""
        self.position = FilePosition(stat.st_dev, stat.st_ino, offset)
        return handle

    def _where(self, resume: FilePosition) -> Path:
        """Where the file `resume` is in is now: at the path, or renamed beside it (`kern.log.1`,
        `kern.log-20250101`); the path when it is neither (gone, or compressed into another file)."""
        try:
            if resume.names(self.path.stat()):
                return self.path
        except OSError:
            pass
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return self.path
        for entry in entries:
            if entry.name.startswith(self.path.name) and entry.name != self.path.name:
                try:
                    if resume.names(entry.stat(follow_symlinks=False)):
                        return Path(entry.path)
                except OSError:
                    continue
        return self.path

    def _replaced(self, handle: BinaryIO) -> bool:
        """Whether the path now names another file (rotated), none (moved away), or this one cut short."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return True
        return (stat.st_dev, stat.st_ino) != self._file or stat.st_size < handle.tell()

    # --- /dev/kmsg -----------------------------------------------------------------------------------------------

    def _follow_kmsg(
        self, stop: Callable[[], bool], sleep: Callable[[float], object]
    ) -> Generator[list[KernelEvent], None, None]:
        try:
            fd = os.open(str(self.path), os.O_RDONLY | os.O_NONBLOCK)
        except PermissionError as exc:
            raise BackendError(
                f"not permitted to read {self.path}",
                fix="run as root, or give the agent CAP_SYSLOG (kernel.dmesg_restrict=1)",
            ) from exc
        except OSError as exc:
            raise BackendError(
                f"cannot open {self.path}: {exc.strerror}", fix="is this a Linux host with /dev/kmsg?"
            ) from exc
        self.status(True, "")
        try:
            while True:
                records = self._read_records(fd)
                if records:
                    yield self._take(records)
                    continue
                if stop():
                    return
                sleep(self.poll_s)
        finally:
            os.close(fd)

    def _read_records(self, fd: int) -> bytes:
        """The records there are to read now (one per read; each ends in a newline), up to CHUNK bytes."""
        records: list[bytes] = []
        size = 0
        while size < CHUNK:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: the kernel says skip ahead
                    continue
                raise BackendError(f"reading {self.path} failed: {exc.strerror}") from exc
            if not record:
                break
            records.append(record)
            size += len(record)
        return b"".join(records)


def follow_file(
    path: Path | str,
    *,
    from_start: bool = True,
    poll_s: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
    host: str | None = None,
    year: int | None = None,
) -> Iterator[KernelEvent]:
    """Yield events from a log file as it grows (like `tail -F`), until `stop()` returns True."""
    follower = KernelLogFollower(path, kmsg=False, from_start=from_start, host=host, year=year, poll_s=poll_s)
    return follower.events(stop)


def read_dev_kmsg(
    path: Path | str = DEV_KMSG,
    *,
    follow: bool = False,
    poll_s: float = POLL_S,
    stop: Callable[[], bool] = lambda: False,
    host: str | None = None,
) -> Iterator[KernelEvent]:
    """Yield events from /dev/kmsg; without `follow` it returns once the ring buffer is drained."""
    follower = KernelLogFollower(path, kmsg=True, host=host, poll_s=poll_s)
    return follower.events(stop if follow else lambda: True)


def run_dmesg(args: Sequence[str] = ("--time-format=iso",), *, dmesg: str = "dmesg") -> str:
    """Run dmesg and return its output; a missing or refused dmesg is a clear error, not a traceback."""
    binary = shutil.which(dmesg)
    if binary is None:
        raise DependencyMissingError(
            f"`{dmesg}` is not installed or not on PATH",
            fix="install util-linux, or read a saved log file instead",
        )
    try:
        proc = subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=DMESG_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BackendError(f"`{dmesg}` did not finish within {DMESG_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise BackendError(f"cannot run `{binary}`: {exc.strerror}") from exc
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        if "not permitted" in detail.lower() or "permission denied" in detail.lower():
            raise BackendError(
                f"`{dmesg}` was refused: {detail}",
                fix="run as root or with CAP_SYSLOG, or set kernel.dmesg_restrict=0",
            )
        raise BackendError(f"`{dmesg}` failed: {detail}")
    return proc.stdout


def dmesg_events(args: Sequence[str] = ("--time-format=iso",), *, dmesg: str = "dmesg") -> KmsgScan:
    """Run dmesg and parse its output."""
    return scan_kmsg(run_dmesg(args, dmesg=dmesg))
