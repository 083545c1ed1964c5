"""The node's clock as its time daemon reports it: chrony (`chronyc -c tracking`), ntpd (`ntpq -c rv`),
systemd-timesyncd (`timedatectl timesync-status`), else the kernel's own discipline state (adjtimex(2), read-only).
The first daemon that answers is the node's; each command runs under a short timeout and is read by
parsers/clock/. The kernel's state is always there on Linux, so a node without a daemon still says whether its clock
is disciplined (its maxerror under 16 s) and how far off it may be."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.errors import GpufleetError
from gpufleet.model.observe import ClockFact
from gpufleet.parsers.clock.chrony import parse_tracking
from gpufleet.parsers.clock.kernel import clock_from_timex
from gpufleet.parsers.clock.ntpd import parse_rv
from gpufleet.parsers.clock.timesyncd import parse_timesync_status

log = logging.getLogger("gpufleet.agent")

TIMEOUT_S = 5.0
# (name, argv, parser), in the order they are tried
DAEMONS: tuple[tuple[str, tuple[str, ...], Callable[[str, float], ClockFact]], ...] = (
    ("chrony", ("chronyc", "-c", "tracking"), parse_tracking),
    ("ntpd", ("ntpq", "-c", "rv"), parse_rv),
    ("timesyncd", ("timedatectl", "timesync-status"), parse_timesync_status),
)


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    """struct timex (glibc's sys/timex.h, the kernel's include/uapi/linux/timex.h)."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_pad", ctypes.c_int * 11),
    ]


def read_adjtimex(now: float) -> ClockFact:
    """The kernel's clock state through adjtimex with modes 0 (reads, changes nothing; needs no privilege)."""
    name = ctypes.util.find_library("c")
    if name is None:
        raise GpufleetError("no C library to call adjtimex through", fix="run the agent on Linux")
    libc = ctypes.CDLL(name, use_errno=True)
    timex = _Timex()
    state = libc.adjtimex(ctypes.byref(timex))
    if state < 0:
        raise GpufleetError(f"adjtimex failed (errno {ctypes.get_errno()})", fix="run the agent on Linux")
    return clock_from_timex(state, timex.status, timex.maxerror, timex.esterror, now)


@dataclass
class ClockReader:
    """Reads the node's clock: the daemon that answered last time first, then the others, then the kernel."""

    timeout_s: float = TIMEOUT_S
    run: Callable[[list[str], float], str | None] | None = None  # the command runner (None: subprocess)
    kernel: Callable[[float], ClockFact] = read_adjtimex
    _last: str = field(default="", init=False)

    def read(self) -> ClockFact:
        now = time.time()
        order = sorted(DAEMONS, key=lambda d: d[0] != self._last)
        for name, argv, parse in order:
            out = (self.run or _run)(list(argv), self.timeout_s)
            if out is None:
                continue
            try:
                fact = parse(out, now)
            except GpufleetError as exc:  # a daemon that is installed but not running says so in its own words
                log.debug("clock: %s answered what is not its report: %s", name, exc.message)
                continue
            self._last = name
            return _with_kernel(fact, self.kernel, now)
        self._last = ""
        return self.kernel(now)


def _with_kernel(fact: ClockFact, kernel: Callable[[float], ClockFact], now: float) -> ClockFact:
    """A daemon's report, with the kernel's verdict where the daemon gave none (timesyncd's show-timesync)."""
    if fact.synchronised is not None:
        return fact
    try:
        own = kernel(now)
    except GpufleetError:
        return fact
    return ClockFact(**{**{f: getattr(fact, f) for f in fact.__struct_fields__}, "synchronised": own.synchronised})


def _run(argv: list[str], timeout_s: float) -> str | None:
    """A command's stdout, or None when it is not installed, fails or does not answer in time."""
    path = shutil.which(argv[0])
    if path is None:
        return None
    try:
        done = subprocess.run([path, *argv[1:]], capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, check=False)  # fmt: skip
    except (subprocess.TimeoutExpired, OSError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None
