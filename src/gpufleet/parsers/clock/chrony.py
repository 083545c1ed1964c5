"""chrony's `tracking` report, as `chronyc -c tracking` (CSV) or `chronyc tracking` (text) prints it.

Grounded in chrony's source (mlichvar/chrony, client.c process_cmd_tracking and print_report; doc/chronyc.adoc
"tracking"). The report's fields, in order, the CSV line's 14 columns:

    Reference ID (%R: 8 hex digits), its name or address (%s), Stratum (%u), Ref time (%T; in CSV seconds since the
    epoch with nanoseconds), System time (%.9O), Last offset (%+.9f), RMS offset (%.9f), Frequency (%.3F), Residual
    freq (%+.3f), Skew (%.3f), Root delay (%.9f), Root dispersion (%.9f), Update interval (%.1f), Leap status (%L)

In the text form %O prints the absolute value with "slow" when the value (the correction chronyd is slewing in,
`current_correction`) is positive and "fast" otherwise; the CSV form prints the signed value. So the clock minus
true time is minus the CSV value, and "N seconds fast of NTP time" is +N. %L prints Normal, Insert second, Delete
second or Not synchronised. chronyc.adoc bounds the clock's error by |system time offset| + root dispersion +
root delay / 2, and says the last offset is positive when the local time was ahead of its sources.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.observe import ClockFact

CSV_FIELDS = 14
UNSYNCHRONISED = "Not synchronised"
_TEXT_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ()]*?)\s*:\s*(?P<value>.*?)\s*$")
_SECONDS = re.compile(r"^([+-]?\d+(?:\.\d+)?)\s+seconds(?:\s+(slow|fast)\b)?")


def parse_tracking(text: str, time: float) -> ClockFact:
    """chrony's tracking report in either form; `time` is when it was read."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ParseError("empty chronyc tracking output", fix="paste the output of `chronyc -c tracking`")
    if len(lines) == 1 and lines[0].count(",") == CSV_FIELDS - 1:
        return _from_csv(lines[0], time)
    return _from_text(lines, time)


def _from_csv(line: str, time: float) -> ClockFact:
    cols = line.split(",")
    try:
        correction = float(cols[4])
        last, delay, dispersion = float(cols[5]), float(cols[10]), float(cols[11])
        stratum = int(cols[2])
    except ValueError as exc:
        raise ParseError(f"chronyc -c tracking: a number is not one ({exc})", fix="paste the line as printed") from exc
    return _fact(time, -correction, last, delay, dispersion, stratum, _reference(cols[0], cols[1]), cols[13])


def _from_text(lines: list[str], time: float) -> ClockFact:
    fields: dict[str, str] = {}
    for line in lines:
        m = _TEXT_FIELD.match(line)
        if m:
            fields[m["key"].lower()] = m["value"]
    if "system time" not in fields or "leap status" not in fields:
        raise ParseError(
            "not chrony's tracking report (no System time or Leap status line)",
            fix="paste the output of `chronyc tracking` or `chronyc -c tracking`",
        )
    system = _SECONDS.match(fields["system time"])
    if system is None:
        raise ParseError(f"chronyc tracking: System time {fields['system time']!r} is not 'N seconds slow|fast'",
                         fix="paste the report as chronyc prints it")  # fmt: skip
    offset = float(system[1]) * (-1.0 if system[2] == "slow" else 1.0)
    ref = fields.get("reference id", "")
    ref_id, _, name = ref.partition(" ")
    return _fact(
        time,
        offset,
        _seconds(fields.get("last offset")),
        _seconds(fields.get("root delay")),
        _seconds(fields.get("root dispersion")),
        int(fields["stratum"]) if re.fullmatch(r"[0-9]{1,3}", fields.get("stratum", "")) else None,
        _reference(ref_id, name.strip("()")),
        fields["leap status"],
    )


def _seconds(value: str | None) -> float | None:
    m = _SECONDS.match(value or "")
    return float(m[1]) if m else None


def _reference(ref_id: str, name: str) -> str:
    return f"{name} ({ref_id})" if name and name != ref_id else ref_id


def _fact(
    time: float,
    offset: float,
    last: float | None,
    delay: float | None,
    dispersion: float | None,
    stratum: int | None,
    reference: str,
    leap: str,
) -> ClockFact:
    synchronised = leap.strip() != UNSYNCHRONISED
    error = abs(offset) + abs(dispersion or 0.0) + 0.5 * abs(delay or 0.0) if synchronised else None
    return ClockFact(
        time=time,
        source="chrony",
        synchronised=synchronised,
        offset_s=offset,
        error_s=error,
        last_offset_s=last,
        root_delay_s=abs(delay) if delay is not None else None,
        root_dispersion_s=abs(dispersion) if dispersion is not None else None,
        stratum=stratum if stratum is not None and 0 <= stratum <= 16 else None,
        reference=reference[:256],
        leap=leap.strip()[:256],
    )
