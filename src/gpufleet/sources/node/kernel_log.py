"""Reading the live kernel log: following a growing file across rotation, /dev/kmsg, and running dmesg.

The reading of a stream is `gpufleet.parsers.kernel.stream` and the parsing `KmsgParser` (both pure); this module
only gets bytes to them, whole lines at a time.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from gpufleet.errors import BackendError, DependencyMissingError, UserError
from gpufleet.parsers.kernel.kmsg import KernelEvent, KmsgParser, KmsgScan, scan_kmsg
from gpufleet.parsers.kernel.stream import KMSG_RECORD, KmsgFeed

DMESG_TIMEOUT_S = 30.0


def follow_file(
    path: Path | str,
    *,
    from_start: bool = True,
    poll_s: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
    host: str | None = None,
    year: int | None = None,
) -> Iterator[KernelEvent]:
    """Yield events from a log file as it grows (like `tail -F`), until `stop()` returns True.

    A file that shrinks or is replaced (log rotation) is read again from its start.
    """
    path = Path(path)
    feed = KmsgFeed(host=host, year=year)
    handle = None
    inode = None
    try:
        while True:
            if handle is None:
                try:
                    handle = path.open("r", encoding="utf-8", errors="replace", newline="")
                except FileNotFoundError:
                    if stop():
                        return
                    time.sleep(poll_s)
                    continue
                except OSError as exc:
                    raise UserError(
                        f"cannot read {path}: {exc.strerror}", fix="check the path and permissions"
                    ) from exc
                inode = os.fstat(handle.fileno()).st_ino
                if not from_start:
                    handle.seek(0, os.SEEK_END)
                from_start = True  # a rotated file is new: read it whole
            chunk = handle.read()
            if chunk:
                yield from feed.feed(chunk)
                continue
            if stop():
                yield from feed.close()
                return
            try:
                stat = path.stat()
                rotated = stat.st_ino != inode or stat.st_size < handle.tell()
            except FileNotFoundError:
                rotated = True
            if rotated:
                yield from feed.end_of_file()
                handle.close()
                handle = None
                continue
            time.sleep(poll_s)
    finally:
        if handle is not None:
            handle.close()


def read_dev_kmsg(
    path: Path | str = "/dev/kmsg",
    *,
    follow: bool = False,
    poll_s: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
    host: str | None = None,
) -> Iterator[KernelEvent]:
    """Yield events from /dev/kmsg: every read() returns one `prio,seq,usec,flags;msg` record.

    Without `follow` it returns once the ring buffer is drained. Records overwritten while we read (EPIPE) are
    skipped, as the kernel documents.
    """
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError as exc:
        raise BackendError(
            f"not permitted to read {path}",
            fix="run as root, or give the agent CAP_SYSLOG (kernel.dmesg_restrict=1)",
        ) from exc
    except OSError as exc:
        raise BackendError(f"cannot open {path}: {exc.strerror}", fix="is this a Linux host with /dev/kmsg?") from exc
    parser = KmsgParser(host=host)
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                if not follow or stop():
                    break
                time.sleep(poll_s)
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                raise BackendError(f"reading {path} failed: {exc.strerror}") from exc
            if not record:
                break
            if KMSG_RECORD.match(record) is None:
                raise UserError(
                    f"{path} does not give kernel log records (`prio,seq,usec,flags;message`)",
                    fix="follow /dev/kmsg, or give a log file",
                )
            for line in record.decode("utf-8", errors="replace").splitlines():
                yield from parser.feed_line(line)
        yield from parser.finish()
    finally:
        os.close(fd)


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
