"""The BMC judgement on hand-built readings and records, one test per edge: the BMC's own thresholds as the status
says them, a power supply's states, a SEL record's event."""

from __future__ import annotations

import math

import pytest

from gpufleet.health.bmc import judge_sel, judge_sensor, sensor_state
from gpufleet.model import RootCause, Severity
from gpufleet.model.bmc import BmcSensor, SelEntry


def fan(status: str, reading: float | None = 0.0) -> BmcSensor:
    return BmcSensor("FAN1", status, "fan", reading, "RPM" if reading is not None else "")


@pytest.mark.parametrize(
    ("status", "severity"),
    [("ok", None), ("lnc", Severity.warning), ("nc", Severity.warning), ("lcr", Severity.critical),
     ("cr", Severity.critical), ("lnr", Severity.critical), ("nr", Severity.critical), ("ucr", None), ("ns", None)],
)  # fmt: skip
def test_fan_thresholds(status: str, severity: Severity | None) -> None:
    verdict = judge_sensor(fan(status))
    assert (verdict.severity if verdict else None) == severity
    if verdict:
        assert verdict.cause == RootCause.node_fan and "FAN1" in verdict.summary


def test_fan_redundancy_lost_is_a_warning() -> None:
    sensor = BmcSensor("Fan Redundancy", "ok", "fan", states=("Redundancy Lost",))
    verdict = judge_sensor(sensor)
    assert verdict is not None and verdict.severity == Severity.warning


@pytest.mark.parametrize(
    ("states", "severity"),
    [(("Presence detected",), None), (("Presence detected", "Failure detected"), Severity.critical),
     (("Presence detected", "Predictive failure"), Severity.warning),
     (("Presence detected", "Power Supply AC lost"), Severity.warning),
     (("AC lost or out-of-range",), Severity.warning), (("Config Error",), Severity.warning)],
)  # fmt: skip
def test_power_supply_states(states: tuple[str, ...], severity: Severity | None) -> None:
    verdict = judge_sensor(BmcSensor("PS1 Status", "ok", "psu", states=states))
    assert (verdict.severity if verdict else None) == severity
    if verdict:
        assert verdict.cause == RootCause.node_psu


@pytest.mark.parametrize(
    ("status", "severity"),
    [("ok", None), ("unc", Severity.warning), ("ucr", Severity.critical), ("unr", Severity.critical),
     ("cr", Severity.critical), ("lcr", Severity.warning), ("ns", None)],
)  # fmt: skip
def test_temperature_thresholds(status: str, severity: Severity | None) -> None:
    verdict = judge_sensor(BmcSensor("Inlet Temp", status, "temperature", 48.0, "degrees C"))
    assert (verdict.severity if verdict else None) == severity
    if verdict:
        assert verdict.cause == RootCause.node_thermal


def test_other_sensors_are_not_judged() -> None:
    assert judge_sensor(BmcSensor("Voltage 1", "cr", "other", 180.0, "Volts")) is None


def test_state_series_values() -> None:
    assert sensor_state(fan("ok", 7000.0)) == 0.0
    assert sensor_state(fan("lnc")) == 1.0
    assert sensor_state(fan("lcr")) == 2.0
    assert math.isnan(sensor_state(fan("ns", None)))


def entry(sensor_type: str, event: str, asserted: bool = True) -> SelEntry:
    return SelEntry(1, sensor_type, "X", event, asserted)


@pytest.mark.parametrize(
    ("sensor_type", "event", "cause", "severity"),
    [
        ("Power Supply", "Failure detected", RootCause.node_psu, Severity.critical),
        ("Power Supply", "Predictive failure", RootCause.node_psu, Severity.warning),
        ("Power Supply", "Power Supply AC lost", RootCause.node_psu, Severity.warning),
        ("Power Supply", "Presence detected", None, None),
        ("Power Unit", "Redundancy Lost", RootCause.node_psu, Severity.warning),
        ("Power Unit", "Power off/down", None, None),
        ("Fan", "Lower Critical going low", RootCause.node_fan, Severity.critical),
        ("Fan", "Lower Non-recoverable going low", RootCause.node_fan, Severity.critical),
        ("Fan", "Lower Non-critical going low", RootCause.node_fan, Severity.warning),
        ("Fan", "Transition to Non-recoverable", RootCause.node_fan, Severity.critical),
        ("Fan", "Upper Critical going high", None, None),
        ("Temperature", "Upper Critical going high", RootCause.node_thermal, Severity.critical),
        ("Temperature", "Upper Non-critical going high", RootCause.node_thermal, Severity.warning),
        ("Temperature", "Transition to Non-recoverable", RootCause.node_thermal, Severity.critical),
        ("Memory", "Correctable ECC", None, None),
    ],
)
def test_sel_events(sensor_type: str, event: str, cause: RootCause | None, severity: Severity | None) -> None:
    verdict = judge_sel(entry(sensor_type, event))
    assert (verdict.cause if verdict else None, verdict.severity if verdict else None) == (cause, severity)


def test_a_deassertion_is_no_finding() -> None:
    assert judge_sel(entry("Power Supply", "Failure detected", asserted=False)) is None
