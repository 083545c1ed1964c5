"""ntpd's system variables, as `ntpq -c rv` prints them.

Grounded in ntpd's documentation (ntpq's "System Variables": `leap` is the leap indicator, 00 none, 01 insert, 10
delete, 11 unsynchronised; `offset` the combined offset of the server relative to this host and `rootdelay`,
`rootdisp` in milliseconds; the status word's `leap_alarm`/`sync_unspec` when the clock is not synchronised). The
offset is the server's clock minus this one: the clock minus true time is minus it.
"""

from __future__ import annotations

import re

from gpufleet.errors import ParseError
from gpufleet.model.observe import ClockFact

_VAR = re.compile(r'(\w+)=("[^"]*"|[^,\s]+)')


def parse_rv(text: str, time: float) -> ClockFact:
    """`ntpq -c rv` (or `ntpq -c "rv 0"`), as printed over several lines."""
    found = dict(_VAR.findall(text))
    if "leap" not in found or "offset" not in found:
        raise ParseError("not ntpq's system variables (no leap= or offset=)", fix="paste the output of `ntpq -c rv`")
    try:
        offset_ms = float(found["offset"])
        delay = float(found["rootdelay"]) / 1000 if "rootdelay" in found else None
        dispersion = float(found["rootdisp"]) / 1000 if "rootdisp" in found else None
    except ValueError as exc:
        raise ParseError(f"ntpq -c rv: a number is not one ({exc})", fix="paste the output as printed") from exc
    leap = found["leap"]
    synchronised = leap not in ("11", "3") and "sync_unspec" not in text.split("\n", 1)[0]
    stratum = found.get("stratum", "")
    offset = -offset_ms / 1000
    return ClockFact(
        time=time,
        source="ntpd",
        synchronised=synchronised,
        offset_s=offset,
        error_s=abs(offset) + abs(dispersion or 0.0) + 0.5 * abs(delay or 0.0) if synchronised else None,
        root_delay_s=abs(delay) if delay is not None else None,
        root_dispersion_s=abs(dispersion) if dispersion is not None else None,
        stratum=int(stratum) if re.fullmatch(r"[0-9]{1,3}", stratum) and int(stratum) <= 16 else None,
        reference=found.get("refid", "").strip('"')[:256],
        leap=f"leap={leap}",
    )
