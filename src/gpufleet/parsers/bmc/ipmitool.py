"""ipmitool's sensor list (`sdr`, `sdr list`, `sdr elist`, `sdr type <type>`) and System Event Log (`sel list`,
`sel elist`), as text.

Grounded in ipmitool's source (ipmitool/ipmitool at 1.8.19 + be11d948, and the IPMITOOL_1_8_18 tag for the older
timestamps):

- lib/ipmi_sdr.c, ipmi_sdr_print_sensor_fc: `sdr list` prints `%-16s | <reading padded to 17> | <status>`; the
  reading is `<value> <unit>` for an analog sensor, `0x%02x` for a discrete one, `no reading`/`disabled` (`Not
  Readable` without a full record). `sdr elist`, `sdr type` and `sdr entity` print
  `%-16s | %02Xh | %-3s | %2d.%1d | <reading>`: the sensor number, the status, the entity id.instance, then the
  reading, a discrete sensor's asserted states joined by ", ", `Disabled` or `No Reading` (or nothing).
  Event-only, MC and FRU locator records print their own text in the reading column (`Event-Only`, `Dynamic MC @
  20h`, `Physical FRU @00h`). The status is ipmi_sdr_get_thresh_status's: `ok`, `ns` (no valid reading), `nc`,
  `cr`, `nr` in `sdr list` and `lnc`/`unc`, `lcr`/`ucr`, `lnr`/`unr` in the extended forms.
- lib/ipmi_sel.c, ipmi_sel_print_std_entry: `%4x | <date> | <time> | <sensor type> <sensor> | <description> |
  Asserted|Deasserted[ | Reading R < Threshold T unit]`. The sensor is `#0x%02x` in `sel list`, its SDR name in
  `sel elist`; the type is ipmi_generic_sensor_type_vals (lib/ipmi_strings.c) or `Unknown`. A timestamp below
  0x20000000 prints ` Pre-Init  |%010d|`. 1.8.18 prints `%m/%d/%Y` and `%H:%M:%S` in UTC (gmtime); 1.8.19 prints
  `%x` and `%X %Z` (lib/ipmi_time.c), local time unless `-Z`, so a two-digit year and a zone name appear. Kernel-panic
  (type 0xf0) and OEM records (0xc0 and above) print their own lines.
- The description strings are include/ipmitool/ipmi_sel.h's generic_event_types ("Lower Critical going low ") and
  sensor_specific_event_types (Power Supply: "Presence detected", "Failure detected", "Predictive failure",
  "Power Supply AC lost", "AC lost or out-of-range", "AC out-of-range, but present", "Config Error", "Power Supply
  Inactive").

What a sensor is (fan, temperature, power supply) is told by the command where it says it (`sdr type Fan`), else by
its unit (RPM, degrees C, Watts), its IPMI entity (10: power supply, 29: fan device, 30: cooling unit; ipmitool's
entity_id_vals) and a discrete power supply's states, else by its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpufleet.errors import ParseError
from gpufleet.model.bmc import STATUSES, BmcSensor, SelEntry, SensorKind

IPMITOOL_SOURCE = "ipmitool 1.8.19 (be11d948): lib/ipmi_sdr.c, lib/ipmi_sel.c, include/ipmitool/ipmi_sel.h"
FIX = "paste the output of `ipmitool sdr elist` (or `sdr`, `sdr type Fan`) or `ipmitool sel elist` whole"

# ipmi_generic_sensor_type_vals (lib/ipmi_strings.c), longest first so "Power Supply" wins over "Power"
SENSOR_TYPES = tuple(
    sorted(
        (
            "Temperature", "Voltage", "Current", "Fan", "Physical Security", "Platform Security", "Processor",
            "Power Supply", "Power Unit", "Cooling Device", "Other", "Memory", "Drive Slot / Bay",
            "POST Memory Resize", "System Firmwares", "Event Logging Disabled", "Watchdog1", "System Event",
            "Critical Interrupt", "Button", "Module / Board", "Microcontroller", "Add-in Card", "Chassis", "Chip Set",
            "Other FRU", "Cable / Interconnect", "Terminator", "System Boot Initiated", "Boot Error", "OS Boot",
            "OS Critical Stop", "Slot / Connector", "System ACPI Power State", "Watchdog2", "Platform Alert",
            "Entity Presence", "Monitor ASIC", "LAN", "Management Subsys Health", "Battery", "Session Audit",
            "Version Change", "FRU State", "Unknown",
        ),
        key=len,
        reverse=True,
    )
)  # fmt: skip
# sensor_specific_event_types for Power Supply (0x08), ipmi_sel.h
PSU_STATES = (
    "Presence detected", "Failure detected", "Predictive failure", "Power Supply AC lost", "AC lost or out-of-range",
    "AC out-of-range, but present", "Config Error", "Power Supply Inactive",
)  # fmt: skip
# `sdr type` names (sensor_type_desc, lib/ipmi_sdr.c) -> the kind of sensor they list
TYPE_KINDS: dict[str, SensorKind] = {"fan": "fan", "temperature": "temperature", "power supply": "psu"}
_PSU_ENTITY, _FAN_ENTITIES = "10", ("29", "30")
_PSU_NAME = re.compile(r"\b(?:PSU?|PWS|Power ?Suppl(?:y|ies)|PS_?\d)", re.IGNORECASE)
_FAN_NAME = re.compile(r"fan", re.IGNORECASE)
_TEMP_NAME = re.compile(r"temp|inlet|exhaust|outlet|ambient", re.IGNORECASE)
_ANALOG = re.compile(r"^(-?\d+(?:\.\d+)?)\s+(\S.*?)\s*$")
_NUMBER = re.compile(r"^([0-9A-Fa-f]{2,4})h$")
_ENTITY = re.compile(r"^\d+\.\d+$")
_NO_READING = ("no reading", "disabled", "not readable", "event-only")
_DIRECTIONS = ("Asserted", "Deasserted")
_PRE_INIT = "Pre-Init"
_UTC_ZONES = ("UTC", "GMT", "Z")


@dataclass(slots=True)
class SdrReport:
    """What `ipmitool sdr` printed: one record per sensor line, in order. `extended`: the elist/type form."""

    sensors: list[BmcSensor] = field(default_factory=list)
    extended: bool = False
    problems: list[str] = field(default_factory=list)  # lines not read, once each (the first 20)

    def of_kind(self, kind: SensorKind) -> list[BmcSensor]:
        return [s for s in self.sensors if s.kind == kind]


@dataclass(slots=True)
class SelReport:
    entries: list[SelEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def last_record(self) -> int | None:
        return max((e.record for e in self.entries), default=None)


def _kind(name: str, unit: str, entity: str, states: tuple[str, ...], analog: bool) -> SensorKind:
    entity_id = entity.split(".", 1)[0]
    low = unit.lower()
    if low == "rpm":
        return "fan"
    if low.startswith("degrees"):
        return "temperature"
    if low == "watts":
        return "power"
    if low == "percent" and (entity_id in _FAN_ENTITIES or _FAN_NAME.search(name)):
        return "fan"
    if analog:
        return "other"
    if not states and _TEMP_NAME.search(name):  # a temperature sensor without a reading (ns), wherever it sits
        return "temperature"
    if entity_id == _PSU_ENTITY or any(s.startswith(PSU_STATES) for s in states if s != "Presence detected"):
        return "psu"
    if _PSU_NAME.search(name):
        return "psu"
    if entity_id in _FAN_ENTITIES or _FAN_NAME.search(name):
        return "fan"
    return "other"


def _reading(text: str) -> tuple[float | None, str, tuple[str, ...]]:
    """(value, unit, discrete states) of a reading column."""
    text = text.strip()
    if not text or text.lower() in _NO_READING or text.lower().startswith(("0x", "dynamic mc", "static mc")):
        return None, "", ()
    if " FRU @" in text:
        return None, "", ()
    head, _, rest = text.partition(", ")
    match = _ANALOG.match(head)
    if match:
        states = tuple(s.strip() for s in rest.split(", ") if s.strip()) if rest else ()
        return float(match.group(1)), match.group(2), states
    return None, "", tuple(s.strip() for s in text.split(", ") if s.strip())


def _sensor_line(line: str, sensor_type: str | None) -> tuple[BmcSensor | None, bool]:
    """A sensor line and whether it is the extended form; (None, _) for a line that is not one."""
    parts = [p.strip() for p in line.split("|")]
    forced = TYPE_KINDS.get(sensor_type.lower()) if sensor_type else None
    if len(parts) >= 5 and _NUMBER.match(parts[1]) and parts[2] in STATUSES and _ENTITY.match(parts[3]):
        name, number, status, entity = parts[0], int(parts[1][:-1], 16), parts[2], parts[3]
        value, unit, states = _reading(" | ".join(parts[4:]))
        kind = forced or _kind(name, unit, entity, states, value is not None)
        if forced == "psu" and unit.lower() == "watts":
            kind = "power"
        return BmcSensor(name, status, kind, value, unit, states, number, entity, line.rstrip("\n")), True
    if len(parts) == 3 and parts[2] in STATUSES and parts[0]:
        name, status = parts[0], parts[2]
        value, unit, states = _reading(parts[1])
        kind = forced or _kind(name, unit, "", states, value is not None)
        return BmcSensor(name, status, kind, value, unit, states, raw=line.rstrip("\n")), False
    return None, False


def parse_sdr(text: str, *, source: str = "ipmitool sdr", sensor_type: str | None = None) -> SdrReport:
    """Every sensor line of `ipmitool sdr [list|elist|type T]`. `sensor_type`: the type `sdr type` was asked for
    (Fan, Temperature, Power Supply), which says what its sensors are. Lines that are not sensor lines (prompts,
    ipmitool's own messages) are listed in `problems`; no sensor line at all is a ParseError."""
    report = SdrReport()
    for line in text.splitlines():
        if not line.strip():
            continue
        sensor, extended = _sensor_line(line, sensor_type)
        if sensor is None:
            if len(report.problems) < 20:
                report.problems.append(f"not a sensor line: {line.strip()[:120]}")
            continue
        report.sensors.append(sensor)
        report.extended = report.extended or extended
    if not report.sensors:
        raise ParseError(f"{source}: no ipmitool sensor line (NAME | READING | STATUS)", fix=FIX)
    return report


def _logged(date: str, clock: str) -> str | None:
    """A SEL record's time: `%m/%d/%Y` + `%H:%M:%S` (1.8.18, UTC) or `%x` + `%X %Z` (1.8.19, the zone said)."""
    parts = clock.split()
    if not parts:
        return None
    hms, rest = parts[0], parts[1:]
    if rest and rest[0] in ("AM", "PM"):  # %X in an English locale
        hms, rest = f"{hms} {rest[0]}", rest[1:]
    zone = rest[0] if rest else None
    for date_format in ("%m/%d/%Y", "%m/%d/%y"):
        for time_format in ("%H:%M:%S", "%I:%M:%S %p"):
            try:
                when = datetime.strptime(f"{date} {hms}", f"{date_format} {time_format}")
            except ValueError:
                continue
            return (when.replace(tzinfo=UTC) if zone is None or zone in _UTC_ZONES else when).isoformat()
    return None


def _split_sensor(text: str) -> tuple[str, str]:
    for name in SENSOR_TYPES:
        if text == name or text.startswith(name + " "):
            return name, text[len(name) :].strip()
    return "", text


def _sel_line(line: str) -> SelEntry | None:
    parts = [p.strip() for p in line.split("|")]
    if len(parts) < 2 or not re.fullmatch(r"[0-9a-fA-F]{1,4}", parts[0]):
        return None
    record = int(parts[0], 16)
    raw = line.rstrip("\n")
    if parts[1].startswith("Linux kernel panic:"):
        return SelEntry(record, "Linux kernel panic", "", parts[1].split(":", 1)[1].strip(), True, raw=raw)
    if len(parts) < 5:
        return None
    logged, pre_init = None, None
    if parts[1] == _PRE_INIT:
        pre_init = int(parts[2]) if parts[2].isdigit() else None
    else:
        logged = _logged(parts[1], parts[2])
        if logged is None and parts[1] != "Unspecified":
            return None
    rest = parts[3:]
    if rest[0].startswith("OEM record"):
        return SelEntry(record, rest[0], "", " | ".join(rest[1:]), True, logged, pre_init, raw=raw)
    sensor_type, sensor = _split_sensor(rest[0])
    direction = max((i for i, p in enumerate(rest) if p in _DIRECTIONS), default=None)
    if direction is None:  # releases that printed no direction: the event is an assertion
        event, asserted, detail = " | ".join(rest[1:]), True, ""
    else:
        event = " | ".join(rest[1:direction])
        asserted = rest[direction] == "Asserted"
        detail = " | ".join(rest[direction + 1 :])
    return SelEntry(record, sensor_type, sensor, event.strip(), asserted, logged, pre_init, detail, raw)


def parse_sel(text: str, *, source: str = "ipmitool sel") -> SelReport:
    """Every record line of `ipmitool sel list` / `sel elist`, in the order printed."""
    report = SelReport()
    for line in text.splitlines():
        if not line.strip():
            continue
        entry = _sel_line(line)
        if entry is None:
            if len(report.problems) < 20:
                report.problems.append(f"not a SEL record: {line.strip()[:120]}")
            continue
        report.entries.append(entry)
    if not report.entries:
        if "SEL has no entries" in text:
            return report
        raise ParseError(f"{source}: no ipmitool SEL record (ID | date | time | sensor | event | direction)", fix=FIX)
    return report
