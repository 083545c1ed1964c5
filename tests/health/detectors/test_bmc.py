"""The BMC detectors through NodeHealth, as the agent's edge runs them on each read of the BMC: a faulty sensor is a
condition (reported, then held back until it is due again), each new SEL record is recorded and a fault in it is a
finding once."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.health.node_health import NodeHealth
from gpufleet.model import RootCause, Severity
from gpufleet.model.bmc import BmcRead, BmcSensor, SelEntry
from gpufleet.telemetry.frame import MetricFrame

FAILED = BmcSensor("Fan3B", "cr", "fan", 0.0, "RPM", raw="Fan3B            | 0 RPM             | cr")
OK = BmcSensor("Fan1A", "ok", "fan", 7560.0, "RPM")
LOGGED = datetime(2025, 3, 6, 19, 0, 47, tzinfo=UTC)
AC_LOST = SelEntry(
    0x98,
    "Power Supply",
    "PSU1 AC Lost",
    "Power Supply AC lost",
    True,
    LOGGED.isoformat(),
    raw="  98 | 03/06/2025 | ...",
)
POWER_OFF = SelEntry(0x96, "Power Unit", "PowerUnit", "Power off/down", True)


def health() -> NodeHealth:
    return NodeHealth(MetricFrame((), ()))


def test_a_failed_fan_is_a_condition_reported_when_it_starts() -> None:
    h = health()
    out = h.observe(1000.0, bmc={"n1": BmcRead("n1", 1000.0, (FAILED, OK))})
    assert [(f.cause, f.severity, f.entity.name, f.source) for f in out.findings] == [
        (RootCause.node_fan, Severity.critical, "Fan3B", "bmc")
    ]
    assert out.findings[0].evidence == FAILED.raw
    again = h.observe(1000.0 + h.repeat_s / 2, bmc={"n1": BmcRead("n1", 0.0, (FAILED, OK))})
    assert again.findings == []  # held back until finding_repeat_s has passed
    later = h.observe(1000.0 + h.repeat_s, bmc={"n1": BmcRead("n1", 0.0, (FAILED, OK))})
    assert len(later.findings) == 1


def test_new_sel_records_are_events_and_a_fault_a_finding() -> None:
    out = health().observe(2000.0, bmc={"n1": BmcRead("n1", 2000.0, (), (POWER_OFF, AC_LOST))})
    assert [(e.record, e.event, e.severity) for e in out.bmc] == [
        (0x96, "Power off/down", None), (0x98, "Power Supply AC lost", Severity.warning),
    ]  # fmt: skip
    assert out.bmc[1].logged == LOGGED.timestamp()
    assert [(f.cause, f.severity) for f in out.findings] == [(RootCause.node_psu, Severity.warning)]


def test_without_a_bmc_read_the_detectors_do_not_run() -> None:
    out = health().observe(3000.0, kernel={"n1": []})
    assert out.bmc == [] and out.findings == []
