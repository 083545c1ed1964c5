"""DCGM's health watches and policy violations, judged once (hand-built inputs at each edge)."""

from __future__ import annotations

from gpufleet.health.dcgm_health import judge_health, judge_incident, judge_violation
from gpufleet.model import Severity
from gpufleet.model.incident import RootCause
from gpufleet.parsers.nvidia.dcgmi_health import HealthEntity, HealthReport, HealthSystem


def test_an_incident_is_judged_by_its_code_with_dcgms_own_suggestion() -> None:
    verdict = judge_incident("thermal", 10, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    assert verdict is not None and verdict.severity is Severity.warning and verdict.cause is RootCause.thermal
    assert "cooling" in verdict.fix
    failure = judge_incident("memory", 20, "DCGM_FR_VOLATILE_DBE_DETECTED")
    assert failure is not None and failure.severity is Severity.critical and failure.cause is RootCause.ecc_dbe
    assert judge_incident("memory", 20, "DCGM_FR_RETIRED_PAGES_LIMIT").cause is RootCause.retired_pages  # type: ignore[union-attr]


def test_a_passing_watch_or_the_diagnostics_own_failure_is_no_finding() -> None:
    assert judge_incident("pcie", 0, "DCGM_FR_PCI_REPLAY_RATE") is None
    assert judge_incident("driver", 20, "DCGM_FR_NO_ACCESS_TO_FILE") is None  # the watch's own failure


def test_an_unknown_code_gets_the_general_fix() -> None:
    verdict = judge_incident("sm", 20, "77")
    assert verdict is not None and verdict.fix.startswith("drain the node")


def test_violations() -> None:
    dbe = judge_violation("dbe", 2)
    assert dbe is not None and dbe.severity is Severity.critical and "2 times" in dbe.summary
    pcie = judge_violation("pcie", 1)
    assert pcie is not None and pcie.severity is Severity.warning and "once" in pcie.summary
    assert judge_violation("dbe", 0) is None and judge_violation("xid", 1) is None


def test_the_report_judgement_is_the_triage_one() -> None:
    system = HealthSystem("Thermal system", "Warning", "Detected clocks event due to thermal violation in GPU 2.")
    report = HealthReport("Warning", [HealthEntity("GPU", "2", "Warning", [system])])
    judgement = judge_health(report)
    assert [(i.entity, i.severity, i.code) for i in judgement.issues] == [("GPU 2", Severity.warning, "Thermal system")]
    assert judgement.judged
    assert not judge_health(HealthReport(None)).judged
