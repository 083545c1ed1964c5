"""Clock skew in a multi-host NCCL log: the same moment stamped seconds apart on different hosts.

NCCL stamps its own lines (NVIDIA/nccl src/debug.cc, NCCL >= 2.23): NCCL_DEBUG_TIMESTAMP_LEVELS chooses the levels
that get a stamp (default WARN only; INFO, ALL, ...), NCCL_DEBUG_TIMESTAMP_FORMAT its strftime format (default
"[%F %T] ", with %Nf for N digits of subseconds and `_` for a space), in the node's *local* time from its realtime
clock, before the `host:pid:tid [dev]` prefix. A stamp right before that prefix is the node's own clock; a stamp a
log collector or launcher put in front of the launcher's tag is the collector's, and is not used.

The moment everyone shares: a communicator's `Init COMPLETE` (init.cc). Every rank prints it once its transports
are connected, after the bootstrap all-gathers that wait for all ranks, so the ranks of one communicator print it
within the time a connection takes (well under a second on a working fabric); a host whose stamps for it sit
seconds from the others' has a clock that is off. Communicators are told apart by `commId` (NCCL 2.19+), else by
`nranks`. Kept conservative: hosts must differ by more than SKEW_S (the default format's one-second resolution and
init's own spread), and a difference within a few seconds of a whole quarter hour is read as hosts in different
time zones (NCCL prints local time), not as skew. It cannot tell which host is wrong, nor a skew below a second.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

SKEW_S = 2.0
ZONE_STEP_S = 900.0  # time zones are whole quarter hours apart
STAMP = re.compile(
    r"^\[?(?P<date>\d{4}-\d\d-\d\d)[ T_](?P<time>\d\d:\d\d:\d\d(?:[.,]\d+)?)\]?\s*"
    r"(?=[\w.-]+:\d+:\d+\s+\[\d+\])"  # NCCL's own host:pid:tid [dev] follows: the node's own stamp
)
COMM_ID = re.compile(r"\bcommId (0x[0-9a-fA-F]+)")
NRANKS = re.compile(r"\bnranks (\d+)")
INIT_COMPLETE = re.compile(r"Init COMPLETE")


@dataclass(frozen=True, slots=True)
class StampedLine:
    """A line's own text after launcher prefixes (colour and control bytes gone), where it came from, its host."""

    text: str
    raw: str
    host: str | None


def stamp_of(text: str) -> float | None:
    """NCCL's own stamp at the start of `text` (launcher prefixes already stripped), as seconds; None if none."""
    m = STAMP.match(text)
    if m is None:
        return None
    try:
        when = datetime.fromisoformat(f"{m['date']}T{m['time'].replace(',', '.')}")
    except ValueError:
        return None
    return when.replace(tzinfo=UTC).timestamp()  # a wall reading: only differences are used


@dataclass(frozen=True, slots=True)
class SkewSeen:
    note: str
    hosts: list[str]
    evidence: list[str]
    skew_s: float
    zones: bool  # the difference is whole quarter hours: time zones, not skew


def find_skew(lines: Iterable[StampedLine]) -> SkewSeen | None:
    """The largest disagreement between hosts about one communicator's init completion, when it says skew (or
    different time zones); None when the hosts agree, or fewer than two hosts stamped it."""
    by_comm: dict[str, dict[str, list[tuple[float, str]]]] = {}
    for ln in lines:
        if ln.host is None or not INIT_COMPLETE.search(ln.text):
            continue
        when = stamp_of(ln.text)
        if when is None:
            continue
        cid = COMM_ID.search(ln.text)
        nranks = NRANKS.search(ln.text)
        key = cid.group(1) if cid else (f"nranks {nranks.group(1)}" if nranks else "")
        by_comm.setdefault(key, {}).setdefault(ln.host, []).append((when, ln.raw))
    worst: SkewSeen | None = None
    for key, hosts in by_comm.items():
        if len(hosts) < 2:
            continue
        middle = {h: statistics.median(t for t, _ in stamps) for h, stamps in hosts.items()}
        early, late = min(middle, key=middle.__getitem__), max(middle, key=middle.__getitem__)
        spread = middle[late] - middle[early]
        if spread <= SKEW_S or (worst is not None and spread <= worst.skew_s):
            continue
        zones = spread >= ZONE_STEP_S - SKEW_S and abs(spread - round(spread / ZONE_STEP_S) * ZONE_STEP_S) <= SKEW_S
        comm = (
            f"communicator {key}"
            if key.startswith("0x")
            else f"the communicator of {key}"
            if key
            else "one communicator"
        )
        if zones:
            note = (
                f"hosts {late} and {early} stamp {comm}'s Init COMPLETE {spread / 3600:.2f} h apart, a whole number of "
                "quarter hours: they print local time in different time zones (set TZ alike), not clock skew"
            )
        else:
            note = (
                f"clock skew: hosts {late} and {early} stamp {comm}'s Init COMPLETE {spread:.1f} s apart, which all "
                "ranks reach together; their clocks disagree, so timeouts and these logs' order across hosts are off "
                "(check `chronyc tracking` on both; run chrony or PTP against the same sources)"
            )
        evidence = [hosts[late][0][1], hosts[early][0][1]]
        worst = SkewSeen(note, [late, early], evidence, spread, zones)
    return worst
