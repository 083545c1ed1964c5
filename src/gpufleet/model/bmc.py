"""What a node's BMC tells of the box around its GPUs: its sensor readings (the Sensor Data Record repository, as
`ipmitool sdr` prints it) and its System Event Log. Plain data: the ipmitool parser makes them, health/bmc.py judges
them, the agent's BMC source and `gpufleet triage` both hand them over.

Sensor status is IPMI's threshold state as ipmitool names it (lib/ipmi_sdr.c, ipmi_sdr_get_thresh_status): `ok`,
`ns` (no reading: not specified, disabled or not readable), `nc`/`cr`/`nr` in `sdr list` (non-critical, critical,
non-recoverable, the direction not said) and, in `sdr elist`/`sdr type`, with their direction: `lnc`/`unc`,
`lcr`/`ucr`, `lnr`/`unr`. Discrete sensors are `ok` or `ns`; what they assert is in `states` (the IPMI sensor-specific
offsets' names, e.g. a power supply's "Failure detected").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SensorKind = Literal["fan", "temperature", "psu", "power", "other"]
STATUSES = ("ok", "ns", "nc", "cr", "nr", "lnc", "unc", "lcr", "ucr", "lnr", "unr")


@dataclass(frozen=True, slots=True)
class BmcSensor:
    """One sensor's line. `reading` in `unit` (RPM, degrees C, Watts, percent, ...) when the sensor has an analog
    value; `entity` the IPMI entity id.instance (`29.1`: a fan device) where the output gives it."""

    name: str
    status: str  # one of STATUSES
    kind: SensorKind
    reading: float | None = None
    unit: str = ""
    states: tuple[str, ...] = ()  # the discrete states asserted, in ipmitool's words
    number: int | None = None  # the sensor number (elist's `30h`)
    entity: str = ""
    raw: str = ""

    @property
    def level(self) -> str:
        """`ok`, `nc`, `cr` or `nr` without the direction; `ns` for no reading."""
        return self.status[-2:] if self.status not in ("ok", "ns") else self.status

    @property
    def low(self) -> bool | None:
        """True: below a lower threshold, False: above an upper one, None: not said (`sdr list`) or not past one."""
        if len(self.status) == 3:
            return self.status[0] == "l"
        return None


@dataclass(frozen=True, slots=True)
class SelEntry:
    """One System Event Log record as `ipmitool sel list`/`sel elist` prints it.

    `record` is the SEL record id (printed in hex). `logged` is the record's time as printed, in ISO 8601: with its
    offset when the output says the zone is UTC (or ipmitool printed UTC, as 1.8.18 and before always did), without
    one when it names a local zone (the BMC host's local time); None for a pre-init timestamp (`pre_init` then holds
    its seconds since the BMC started) or a record without time.
    `sensor_type` is IPMI's sensor type name (Power Supply, Fan, Temperature, ...), `sensor` the sensor's name (elist)
    or number (`#0x63`, list). `detail` is what follows the direction (a threshold event's reading and threshold)."""

    record: int
    sensor_type: str
    sensor: str
    event: str
    asserted: bool
    logged: str | None = None
    pre_init: int | None = None
    detail: str = ""
    raw: str = ""

    @property
    def key(self) -> str:
        """The record's identity on its node: its id with its time and text (a cleared SEL reuses ids)."""
        return f"sel:{self.record:x}:{self.raw.strip()[:200]}"


@dataclass(frozen=True, slots=True)
class BmcRead:
    """One read of a node's BMC by its agent: every sensor's line, and the SEL records new since the last read."""

    node: str
    time: float
    sensors: tuple[BmcSensor, ...] = ()
    new_entries: tuple[SelEntry, ...] = ()
