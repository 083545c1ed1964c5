"""The prefixes that put a kernel message on a line: dmesg, syslog, journald and raw /dev/kmsg framings.

One kernel message reaches us framed in many ways, depending on who wrote it down:

- no prefix at all (a message quoted in a ticket or a test);
- `dmesg`: `[ 3606.832215] msg` (seconds since boot), `dmesg -T`: `[Sun Feb 23 16:24:18 2025] msg`,
  `dmesg --time-format=iso`: `2025-01-21T04:41:44,283302+00:00 msg`, and `--decode` adds `kern  :warn  : `;
- syslog files: `Jun  5 10:11:12 host kernel: msg` (often still carrying `[ 123.456]`), or RFC 3339 stamps;
- journald: `journalctl -o short` (`Jun 05 10:11:12 host kernel: msg`), `-o short-precise`, `-o short-iso`
  (`2023-06-05T10:11:12+0000 host kernel: msg`), `-o short-monotonic` (`[ 3606.832215] host kernel: msg`), and
  `-o json` (one object per line: MESSAGE, _HOSTNAME, __REALTIME_TIMESTAMP, _SOURCE_MONOTONIC_TIMESTAMP);
- /dev/kmsg records: `prio,seq,usec,flags;msg`, followed by ` KEY=value` dictionary lines; `dmesg --raw`
  puts the priority first: `<4>[ 3606.832215] msg`.

`split_frame` peels these off and returns the bare message with whatever time and host the frame gave.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import NamedTuple

_KMSG_RECORD = re.compile(r"^(?P<prio>\d{1,4}),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^;]*);(?P<msg>.*)$")
_PRIORITY = re.compile(r"^<(?P<prio>\d{1,3})>")  # dmesg --raw, and syslog's wire format
_DECODE = re.compile(r"^(?P<facility>[a-z0-9]+)\s*:(?P<level>[a-z]+)\s*:\s")
_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)\s+(?P<rest>.*)$"
)
_CTIME = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?(?P<rest>.*)$")
_UPTIME = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?(?P<rest>.*)$")
_BSD = re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)\s+(?P<rest>.*)$")
# `host ident[pid]: message`, as syslog and journald write after their time stamp
_HOST_IDENT = re.compile(r"^(?P<host>[^\s:\[\]]+) (?P<ident>[\w./@-]+)(?:\[\d+\])?: (?P<rest>.*)$")

_KERNEL_IDENT = re.compile(r"^(?P<host>[^\s:\[\]]+) kernel: (?P<rest>.*)$")

_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, start=1)}


class Frame(NamedTuple):
    """What the framing around one message said about it (a named tuple: one is made for every line a parser reads,
    and a frozen dataclass costs several times as much to make)."""

    message: str
    wall_time: datetime | None = None
    uptime_s: float | None = None
    host: str | None = None
    ident: str | None = None  # syslog identifier, e.g. "kernel"
    priority: int | None = None  # syslog priority from /dev/kmsg (facility*8 + level)
    sequence: int | None = None  # /dev/kmsg sequence number
    continuation: bool = False  # an indented follow-on line of a multi-line message, or a /dev/kmsg dictionary line


def _iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        return None


@lru_cache(maxsize=256)  # a burst of reports shares its second
def _ctime(text: str) -> datetime | None:
    """`Sun Feb 23 16:24:18 2025` (dmesg -T); parsed by hand, strptime is the slowest step of a whole scan."""
    parts = text.split()
    if len(parts) != 5 or parts[1] not in _MONTHS:
        return None
    try:
        hh, mm, ss = (int(x) for x in parts[3].split(":"))
        return datetime(int(parts[4]), _MONTHS[parts[1]], int(parts[2]), hh, mm, ss)
    except ValueError:
        return None


def _bsd(text: str, year: int) -> datetime | None:
    parts = text.split()
    if len(parts) != 3 or parts[0] not in _MONTHS:
        return None
    clock, _, frac = parts[2].partition(".")
    try:
        hh, mm, ss = (int(x) for x in clock.split(":"))
        micro = int((frac + "000000")[:6]) if frac else 0
        return datetime(year, _MONTHS[parts[0]], int(parts[1]), hh, mm, ss, micro)
    except ValueError:
        return None


def _strip_uptime(text: str) -> tuple[float | None, str]:
    match = _UPTIME.match(text)
    if match is None:
        return None, text
    return float(match.group("sec")), match.group("rest")


def _after_stamp(rest: str) -> tuple[str | None, str | None, float | None, str]:
    """After a syslog/journald time stamp: optional `host ident:`, then an optional kernel `[uptime]`."""
    host = ident = None
    match = _HOST_IDENT.match(rest)
    if match is not None:
        host, ident, rest = match.group("host"), match.group("ident"), match.group("rest")
    uptime, rest = _strip_uptime(rest)
    return host, ident, uptime, rest


def _journal_json(line: str) -> Frame | None:
    """`journalctl -o json`: the message may hold several lines (a multi-line printk is one journal entry)."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting past the stack, not a journal entry
        return None
    if not isinstance(entry, dict) or "MESSAGE" not in entry:
        return None
    message = entry["MESSAGE"]
    if isinstance(message, list):  # journald stores non-UTF-8 messages as a byte array
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(message, str):
        return None

    def micros(key: str) -> int | None:
        value = entry.get(key)
        return int(value) if isinstance(value, str) and value.isdigit() else None

    realtime = micros("__REALTIME_TIMESTAMP")
    monotonic = micros("_SOURCE_MONOTONIC_TIMESTAMP")
    host = entry.get("_HOSTNAME")
    return Frame(
        message=message,
        wall_time=datetime.fromtimestamp(realtime / 1e6, tz=UTC) if realtime is not None else None,
        uptime_s=monotonic / 1e6 if monotonic is not None else None,
        host=host if isinstance(host, str) else None,
        ident=entry.get("SYSLOG_IDENTIFIER") if isinstance(entry.get("SYSLOG_IDENTIFIER"), str) else None,
    )


def split_frame(line: str, *, year: int | None = None) -> Frame:
    """Split one log line into its frame and the kernel message it carries.

    `year` fills in syslog stamps that carry none (`Jun  5 10:11:12`); without it such lines keep no wall
    time, only their host and message, because guessing the year would make the parse depend on today's date.
    """
    if line[:1] in (" ", "\t") and line.strip():
        # dmesg pads the continuation lines of a multi-line printk; /dev/kmsg writes its dictionary this way
        return Frame(message=line.strip(), continuation=True)

    if line[:1] == "{":
        journal = _journal_json(line)
        if journal is not None:
            return journal
    priority = None
    if line[:1] == "<":
        raw_prio = _PRIORITY.match(line)
        if raw_prio is not None:
            priority = int(raw_prio.group("prio"))
            line = line[raw_prio.end() :]
    first = line[:1]
    if first.isdigit():
        match = _KMSG_RECORD.match(line)
        if match is not None:
            return Frame(
                message=match.group("msg"),
                uptime_s=int(match.group("usec")) / 1e6,
                priority=int(match.group("prio")),
                sequence=int(match.group("seq")),
            )
    elif first.islower():
        decoded = _DECODE.match(line)
        if decoded is not None:
            line = line[decoded.end() :]
            first = line[:1]

    if first.isdigit():
        match = _ISO.match(line)
        if match is not None:
            stamp = _iso(match.group("ts"))
            if stamp is not None:
                host, ident, uptime, rest = _after_stamp(match.group("rest"))
                return Frame(message=rest, wall_time=stamp, uptime_s=uptime, host=host, ident=ident)
    elif first == "[":
        match = _CTIME.match(line) if line[1:2].isupper() else None  # `[Sun Feb 23 ...`, not `[ 12.5]`
        if match is not None:
            return Frame(message=match.group("rest"), wall_time=_ctime(match.group("ts")))
        match = _UPTIME.match(line)
        if match is not None:
            rest = match.group("rest")
            # journalctl -o short-monotonic: `[  12.5] host kernel: msg`
            kernel = _KERNEL_IDENT.match(rest) if " kernel: " in rest else None
            host = kernel.group("host") if kernel else None
            rest = kernel.group("rest") if kernel else rest
            return Frame(message=rest, uptime_s=float(match.group("sec")), priority=priority, host=host)
    elif first.isupper():
        match = _BSD.match(line)
        if match is not None:
            host, ident, uptime, rest = _after_stamp(match.group("rest"))
            if host is not None:
                stamp = _bsd(match.group("ts"), year) if year is not None else None
                return Frame(message=rest, wall_time=stamp, uptime_s=uptime, host=host, ident=ident)

    return Frame(message=line, priority=priority)
