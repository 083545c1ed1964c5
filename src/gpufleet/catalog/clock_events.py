"""GPU clock-event (throttle) reasons (clock_events.csv): the bit NVML's nvmlDeviceGetCurrentClocksEventReasons and
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS set, the `clock_event` label value dcgm-exporter gives it, and what it means."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import cache

from gpufleet.catalog._files import read_text


@dataclass(frozen=True, slots=True)
class ClockEvent:
    name: str  # dcgm-exporter's clock_event label value
    bit: int
    meaning: str


@cache
def load_clock_events() -> tuple[ClockEvent, ...]:
    rows = csv.DictReader(io.StringIO(read_text("clock_events.csv")))
    return tuple(ClockEvent(r["clock_event"], int(r["bit"], 16), r["meaning"]) for r in rows)


@cache
def clock_event_bit(name: str) -> int:
    """The bit of one clock event, by its label value (e.g. "hw_thermal" -> 0x40)."""
    for event in load_clock_events():
        if event.name == name:
            return event.bit
    raise KeyError(f"no clock event {name!r} in clock_events.csv")


def clock_events_of(bitmask: int) -> list[str]:
    """Names of the clock events set in a DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bitmask."""
    return [e.name for e in load_clock_events() if bitmask & e.bit]
