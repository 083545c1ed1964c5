"""The one judgement of what a node's BMC reports about the box around its GPUs: fans, power supplies and chassis
temperatures, from a sensor reading (`ipmitool sdr`) or a System Event Log record (`ipmitool sel`). The agent's BMC
detectors (health/detectors/bmc.py), its `gpufleet_node_sensor_state` series and `gpufleet triage` of a pasted
`ipmitool sdr`/`sel` all call it.

The thresholds are the BMC's own (each sensor's SDR holds its lower and upper non-critical, critical and
non-recoverable limits, and the BMC says which one a reading crossed); nothing is re-derived here. What a state
means is IPMI's (v2.0 table 42-3, as ipmitool names the states: include/ipmitool/ipmi_sel.h):

- Fan: a reading at or below its lower critical or non-recoverable threshold (status `lcr`/`lnr`, `cr`/`nr` in
  `sdr list`, a SEL "Lower Critical going low"), or a fan sensor that moved to critical or non-recoverable:
  critical, the GPUs it cools will throttle, then shut down. Below its lower non-critical threshold, or fan
  redundancy lost: a warning.
- Power supply: "Failure detected" is critical (the unit is dead: replace it); "Predictive failure", "Power Supply AC
  lost", "AC lost or out-of-range", "AC out-of-range, but present", "Config Error" and "Power Supply Inactive", or
  power redundancy lost, are warnings: the node runs on its other supplies, without redundancy (GPUs may be power
  braked). A supply's own threshold sensor past critical is critical.
- Temperature: over its upper critical or non-recoverable threshold (`ucr`/`unr`; `cr`/`nr` in `sdr list`, which
  does not say the side), or a SEL "Upper Critical going high": critical. Over its upper non-critical: a warning.
  Under a lower threshold is a warning (a sensor or a cold aisle fault, not overheating).

A sensor with no reading (`ns`: disabled, not fitted or unreadable) is not judged. A SEL record is judged when it
asserts; its deassertion says the condition ended and is no finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model import RootCause, Severity
from gpufleet.model.bmc import BmcSensor, SelEntry

FAN_FIX = "replace or reseat the fan; check the BMC's fan list (`ipmitool sdr type Fan`) and the GPUs' temperatures"
PSU_FIX = "check the power supply's input feed and cabling; replace the unit if it reports a failure"
THERMAL_FIX = "check the chassis airflow, the fans and the inlet (cold aisle) temperature"
_FIX = {RootCause.node_fan: FAN_FIX, RootCause.node_psu: PSU_FIX, RootCause.node_thermal: THERMAL_FIX}

_PSU_CRITICAL = ("Failure detected",)
_PSU_WARNING = (
    "Predictive failure", "Power Supply AC lost", "AC lost or out-of-range", "AC out-of-range, but present",
    "Config Error", "Power Supply Inactive", "AC lost",
)  # fmt: skip
_REDUNDANCY_LOST = ("Redundancy Lost", "Redundancy Degraded", "Non-Redundant: Insufficient Resources")
_TO_CRITICAL = ("Transition to Critical", "Transition to Non-recoverable")
_TO_WARNING = ("Transition to Non-critical",)


@dataclass(frozen=True, slots=True)
class BmcVerdict:
    cause: RootCause
    severity: Severity
    summary: str
    fix: str

    @property
    def state(self) -> int:
        """The `gpufleet_node_sensor_state` value: 1 warning, 2 critical."""
        return 2 if self.severity == Severity.critical else 1


def _verdict(cause: RootCause, severity: Severity, summary: str) -> BmcVerdict:
    return BmcVerdict(cause, severity, summary, _FIX[cause])


def _reading(sensor: BmcSensor) -> str:
    return f" (reads {sensor.reading:g} {sensor.unit})" if sensor.reading is not None else ""


def _states(sensor: BmcSensor, wanted: tuple[str, ...]) -> list[str]:
    return [s for s in sensor.states if s.startswith(wanted)]


def judge_sensor(sensor: BmcSensor) -> BmcVerdict | None:
    """A fan, power supply or temperature sensor's verdict; None when it is fine, unread, or of another kind."""
    level, low = sensor.level, sensor.low
    if sensor.kind == "fan":
        if level in ("cr", "nr") and low is not False:
            summary = f"fan {sensor.name} failed or below its lower critical threshold{_reading(sensor)}"
            return _verdict(RootCause.node_fan, Severity.critical, summary)
        if level == "nc" and low is not False:
            return _verdict(RootCause.node_fan, Severity.warning,
                            f"fan {sensor.name} below its lower non-critical threshold{_reading(sensor)}")  # fmt: skip
        if states := _states(sensor, _TO_CRITICAL):
            return _verdict(RootCause.node_fan, Severity.critical, f"fan {sensor.name}: {', '.join(states)}")
        if states := _states(sensor, _REDUNDANCY_LOST + _TO_WARNING):
            return _verdict(RootCause.node_fan, Severity.warning, f"fans {sensor.name}: {', '.join(states)}")
        return None
    if sensor.kind == "psu":
        if states := _states(sensor, _PSU_CRITICAL):
            return _verdict(RootCause.node_psu, Severity.critical, f"power supply {sensor.name}: {', '.join(states)}")
        if level in ("cr", "nr"):
            return _verdict(RootCause.node_psu, Severity.critical,
                            f"power supply {sensor.name} past its critical threshold{_reading(sensor)}")  # fmt: skip
        if states := _states(sensor, _PSU_WARNING + _REDUNDANCY_LOST):
            return _verdict(RootCause.node_psu, Severity.warning, f"power supply {sensor.name}: {', '.join(states)}")
        return None
    if sensor.kind == "temperature":
        if level in ("cr", "nr") and low is not True:
            return _verdict(RootCause.node_thermal, Severity.critical,
                            f"{sensor.name} over its upper critical threshold{_reading(sensor)}")  # fmt: skip
        if level == "nc" and low is not True:
            return _verdict(RootCause.node_thermal, Severity.warning,
                            f"{sensor.name} over its upper non-critical threshold{_reading(sensor)}")  # fmt: skip
        if level in ("nc", "cr", "nr"):  # under a lower threshold
            return _verdict(RootCause.node_thermal, Severity.warning,
                            f"{sensor.name} under its lower threshold{_reading(sensor)}")  # fmt: skip
    return None


def sensor_state(sensor: BmcSensor) -> float:
    """The sensor's state as the series carries it: 0 ok, 1 warning, 2 critical; NaN when it has no reading."""
    verdict = judge_sensor(sensor)
    if verdict is not None:
        return float(verdict.state)
    return float("nan") if sensor.status == "ns" and not sensor.states else 0.0


def _threshold(event: str) -> tuple[str, bool] | None:
    """("nc"|"cr"|"nr", going low?) of a threshold event ("Lower Critical going low")."""
    words = event.lower().split()
    if len(words) < 4 or words[0] not in ("lower", "upper") or words[-2] != "going":
        return None
    level = {"non-critical": "nc", "critical": "cr", "non-recoverable": "nr"}.get(words[1])
    return (level, words[0] == "lower") if level else None


def judge_sel(entry: SelEntry) -> BmcVerdict | None:
    """A SEL record's verdict: an asserted fan, power supply, power unit or temperature fault; None otherwise."""
    if not entry.asserted:
        return None
    kind, event, name = entry.sensor_type, entry.event, entry.sensor or entry.sensor_type
    threshold = _threshold(event)
    if kind == "Power Supply" or kind == "Power Unit":
        what = "power supply" if kind == "Power Supply" else "power unit"
        if event.startswith(_PSU_CRITICAL):
            return _verdict(RootCause.node_psu, Severity.critical, f"{what} {name}: {event}")
        if event.startswith(_PSU_WARNING + _REDUNDANCY_LOST):
            return _verdict(RootCause.node_psu, Severity.warning, f"{what} {name}: {event}")
        if (threshold is not None and threshold[0] != "nc") or event.startswith(_TO_CRITICAL):
            return _verdict(RootCause.node_psu, Severity.warning, f"{what} {name}: {event}")
        return None
    if kind in ("Fan", "Cooling Device"):
        if (threshold is not None and threshold[1] and threshold[0] != "nc") or event.startswith(_TO_CRITICAL):
            return _verdict(RootCause.node_fan, Severity.critical, f"fan {name}: {event}")
        if (threshold is not None and threshold[1]) or event.startswith(_REDUNDANCY_LOST + _TO_WARNING):
            return _verdict(RootCause.node_fan, Severity.warning, f"fan {name}: {event}")
        return None
    if kind == "Temperature":
        if (threshold is not None and not threshold[1] and threshold[0] != "nc") or event.startswith(_TO_CRITICAL):
            return _verdict(RootCause.node_thermal, Severity.critical, f"{name}: {event}")
        if (threshold is not None and not threshold[1]) or event.startswith(_TO_WARNING):
            return _verdict(RootCause.node_thermal, Severity.warning, f"{name}: {event}")
    return None
