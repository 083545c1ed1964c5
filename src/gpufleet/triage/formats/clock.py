"""Time daemons: chrony's `tracking` report (`chronyc tracking`, `chronyc -c tracking`), ntpd's system variables
(`ntpq -c rv`) and systemd-timesyncd's last exchange (`timedatectl timesync-status`, `timedatectl show-timesync`),
each judged by health.clock_skew (triage.readers.clock)."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from gpufleet.model.observe import ClockFact
from gpufleet.parsers.clock.chrony import parse_tracking
from gpufleet.parsers.clock.ntpd import parse_rv
from gpufleet.parsers.clock.timesyncd import parse_timesync_status
from gpufleet.triage.formats.registry import Format, Table, View, cell
from gpufleet.triage.readers.clock import clock_reader

# `chronyc -c tracking`: 14 comma-separated fields, the reference ID in hex first and the leap status last
_CHRONY_CSV = (
    r"^[0-9A-Fa-f]{8},[^,]*,\d+,\d+\.\d+,[+-]?\d+\.\d+,(?:[^,]*,){8}"
    r"(?:Normal|Insert second|Delete second|Not synchronised)\s*$"
)


def _tracking(text: str, source: str) -> dict[str, Any]:
    del source
    return _record(parse_tracking(text, time.time()))


def _rv(text: str, source: str) -> dict[str, Any]:
    del source
    return _record(parse_rv(text, time.time()))


def _timesync(text: str, source: str) -> dict[str, Any]:
    del source
    return _record(parse_timesync_status(text, time.time()))


def _record(fact: ClockFact) -> dict[str, Any]:
    """The fact as `read` prints it (JSON and YAML take plain values); `time` is when it was read here."""
    return dict(msgspec.to_builtins(fact))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:+.9f}"


def _clock_view(record: dict[str, Any], source: str) -> View:
    fact = msgspec.convert(record, ClockFact)
    row = [
        fact.source, cell(fact.synchronised), fact.leap or "-", _seconds(fact.offset_s),
        "-" if fact.error_s is None else f"{fact.error_s:.9f}", cell(fact.stratum), fact.reference or "-",
    ]  # fmt: skip
    columns = ("DAEMON", "SYNCHRONISED", "LEAP", "OFFSET S", "ERROR BOUND S", "STRATUM", "REFERENCE")
    return View((Table(columns, [row], source),), ("offset: the clock minus true time, as the daemon estimates it",))


CHRONY_TRACKING = Format(
    name="chronyc-tracking",
    summary="`chronyc tracking` or `chronyc -c tracking`: chrony's offset from true time, error bound and leap status",
    signs=(
        (r"^Reference ID\s*: [0-9A-Fa-f]{8}\b", 6),
        (r"^System time\s*: \d+(?:\.\d+)? seconds (?:slow|fast) of NTP time", 10),
        (r"^Leap status\s*: (?:Normal|Insert second|Delete second|Not synchronised)\s*$", 6),
        (r"^Root dispersion\s*: \d", 3),
        (r"^Ref time \(UTC\)\s*: ", 3),
        (_CHRONY_CSV, 10),
    ),
    parse=_tracking,
    judge=clock_reader("chronyc-tracking", parse_tracking, ("Leap status", "System time", "Not synchronised")),
    render=_clock_view,
)

NTPQ_RV = Format(
    name="ntpq-rv",
    summary="`ntpq -c rv`: ntpd's system variables, its leap indicator, offset and root delay and dispersion",
    signs=(
        (r"^associd=\d+ status=[0-9a-fA-F]{4}\b", 10),
        (r"^version=\"ntpd ", 6),
        (r"\bleap=[0-3]{1,2},", 3),
        (r"\brootdisp=\d", 3),
        (r"(?:^|, )offset=[+-]?\d", 3),
    ),
    parse=_rv,
    judge=clock_reader("ntpq-rv", parse_rv, ("associd=", "leap=", "offset=")),
    render=_clock_view,
)

TIMEDATECTL_TIMESYNC = Format(
    name="timedatectl-timesync",
    summary="`timedatectl timesync-status` or `show-timesync`: systemd-timesyncd's server, leap, offset and delay",
    signs=(
        (r"^\s*Root distance: \S+ \(max: ", 8),
        (r"^\s*Poll interval: .*\(min: ", 6),
        (r"^\s*Packet count: \d+", 3),
        (r"^\s*Leap: (?:normal|not synchronized|last minute)", 3),
        (r"^NTPMessage=\{ ?Leap=", 10),
        (r"^(?:RootDistanceMaxUSec|PollIntervalUSec|PollIntervalMinUSec)=", 4),
        (r"^ServerName=", 2),
    ),
    parse=_timesync,
    judge=clock_reader("timedatectl-timesync", parse_timesync_status, ("Leap", "Offset", "Server")),
    render=_clock_view,
)
