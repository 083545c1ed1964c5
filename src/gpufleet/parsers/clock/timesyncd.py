"""systemd-timesyncd's last NTP exchange, as `timedatectl timesync-status` or `timedatectl show-timesync` prints it.

Grounded in systemd's src/timedate/timedatectl.c: print_ntp_status_info prints Server, Poll interval, Leap
(ntp_leap_table: "normal", "last minute of the day has 61 seconds", "... 59 seconds", "not synchronized"), Version,
Stratum, Reference, Precision, Root distance (root delay / 2 + root dispersion), Offset, Delay, Jitter, Packet
count and Frequency; spans in FORMAT_TIMESPAN's units ("34min 8s", "40.580ms", "1.087495s"). The offset is NTP's
t = ((T2 - T1) + (T3 - T4)) / 2, the server's clock minus this one, printed with its sign: the clock minus true
time is minus it. `show-timesync` prints the properties as KEY=VALUE, the last exchange as `NTPMessage={ Leap=N,
..., RootDelay=..., RootDispersion=..., ... }` with timestamps to the second only, so no offset comes from it.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.observe import ClockFact

NOT_SYNCHRONISED = "not synchronized"
LEAP_WORDS = ("normal", "last minute of the day has 61 seconds", "last minute of the day has 59 seconds",
              NOT_SYNCHRONISED)  # fmt: skip
_UNITS = {
    "y": 31_557_600.0, "month": 2_629_800.0, "w": 604_800.0, "d": 86_400.0, "h": 3600.0, "min": 60.0,
    "s": 1.0, "ms": 1e-3, "us": 1e-6, "μs": 1e-6, "ns": 1e-9,
}  # fmt: skip
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(month|min|ms|us|μs|ns|y|w|d|h|s)(?![a-z])")
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$")
_MESSAGE_FIELD = re.compile(r"(\w+)=([^,}]*)")


def timespan(text: str) -> float | None:
    """A FORMAT_TIMESPAN value in seconds ("34min 8s" -> 2048.0); None when it holds none."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    parts = _SPAN_PART.findall(text.lstrip("+-"))
    if not parts:
        return None
    return sign * sum(float(n) * _UNITS[unit] for n, unit in parts)


def parse_timesync_status(text: str, time: float) -> ClockFact:
    """`timedatectl timesync-status`, or `timedatectl show-timesync`."""
    if "NTPMessage=" in text or re.search(r"^\s*ServerName=", text, re.MULTILINE):
        return _from_show(text, time)
    fields: dict[str, str] = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            fields[m["key"].lower()] = m["value"]
    if "server" not in fields:
        raise ParseError("not timedatectl's timesync-status (no Server line)",
                         fix="paste the output of `timedatectl timesync-status`")  # fmt: skip
    if "leap" not in fields:  # "Packet count: 0": no answer from any server yet
        return ClockFact(time=time, source="timesyncd", synchronised=False, reference=fields["server"][:256],
                         leap="no NTP answer yet")  # fmt: skip
    leap = fields["leap"]
    offset = timespan(fields.get("offset", ""))
    distance = timespan(fields.get("root distance", "").split("(")[0])
    stratum = fields.get("stratum", "")
    synchronised = leap != NOT_SYNCHRONISED
    return ClockFact(
        time=time,
        source="timesyncd",
        synchronised=synchronised,
        offset_s=-offset if offset is not None else None,
        error_s=abs(offset) + abs(distance) if synchronised and offset is not None and distance is not None else None,
        stratum=int(stratum) if re.fullmatch(r"[0-9]{1,3}", stratum) and int(stratum) <= 16 else None,
        reference=fields["server"][:256],
        leap=leap[:256],
    )


def _from_show(text: str, time: float) -> ClockFact:
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, eq, value = line.strip().partition("=")
        if eq:
            props[key] = value
    message = dict(_MESSAGE_FIELD.findall(props.get("NTPMessage", "")))
    server = props.get("ServerName", "") or props.get("ServerAddress", "")
    if not message:  # no exchange yet: timedatectl leaves NTPMessage out
        return ClockFact(time=time, source="timesyncd", synchronised=False, reference=server[:256],
                         leap="no NTP answer yet")  # fmt: skip
    leap_code = int(message["Leap"]) if re.fullmatch(r"[0-9]", message.get("Leap", "").strip()) else None
    delay = timespan(message.get("RootDelay", ""))
    dispersion = timespan(message.get("RootDispersion", ""))
    stratum = message.get("Stratum", "").strip()
    return ClockFact(
        time=time,
        source="timesyncd",
        synchronised=None if leap_code is None else leap_code != 3,
        root_delay_s=abs(delay) if delay is not None else None,
        root_dispersion_s=abs(dispersion) if dispersion is not None else None,
        stratum=int(stratum) if re.fullmatch(r"[0-9]{1,3}", stratum) and int(stratum) <= 16 else None,
        reference=server[:256],
        leap=LEAP_WORDS[leap_code] if leap_code is not None and 0 <= leap_code <= 3 else "",
    )
