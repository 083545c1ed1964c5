"""Health checks at DCGM's run levels, and the rule that a PASS with links down is not trusted."""

from __future__ import annotations

from pathlib import Path

from gpufleet.health.diag import judge, judge_links
from gpufleet.parsers.nvidia.dcgmi_diag import DiagReport, DiagTest, DiagTestResult, parse_diag
from gpufleet.parsers.nvidia.topo import parse_nvlink_status
from gpufleet.sim.diag import twin_diag
from gpufleet.sim.faults import InjectedFault
from gpufleet.spec.scenario_spec import FaultType
from tests.conftest import CAPTURES
from tests.twins import small_twin

DATA = CAPTURES


def test_a_healthy_node_passes_every_level() -> None:
    twin = small_twin()
    twin.run(60)
    for level in (1, 2, 3):
        outcome = twin_diag(twin, "n-000", level)
        assert outcome.passed, outcome.failures()
    assert {c.name for c in twin_diag(twin, "n-000", 3).checks} >= {"Deployment", "Memory", "PCIe", "Stress"}


def test_levels_find_what_they_cover() -> None:
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.pcie_degrade, 5.0, node="n-001", gpu=2),
            InjectedFault(1, FaultType.thermal_runaway, 5.0, node="n-002", gpu=1),
            InjectedFault(2, FaultType.link_down, 5.0, node="n-000", rail=4),
        ]
    )
    twin.run(30)
    assert twin_diag(twin, "n-001", 1).passed  # PCIe is a level-2 check
    assert "GPU 2 link Gen3 x8" in " ".join(twin_diag(twin, "n-001", 2).failures())
    assert twin_diag(twin, "n-002", 2).passed  # a dead fan shows only under load
    assert "would reach" in " ".join(twin_diag(twin, "n-002", 3).failures())
    assert "HCA rail 4 link down" in " ".join(twin_diag(twin, "n-000", 2).failures())


def test_a_dcgmi_pass_with_nvlink_down_is_not_trusted(corpus: Path) -> None:
    passing = DiagReport(
        [
            DiagTest("Memory", "Hardware", [DiagTestResult("Pass", None)]),
            DiagTest("PCIe", "Integration", [DiagTestResult("Pass", None)]),
        ],
        level=2,
    )
    nvlink = parse_nvlink_status((corpus / "nvlink_status_all_inactive_aznhc.txt").read_text())
    trusted = judge(passing, "node", 2)
    assert trusted.passed
    outcome = judge(passing, "node", 2, nvlink)
    assert not outcome.passed
    assert "dcgmi said Pass but" in outcome.failures()[-1]


def _report(name: str, level: int) -> DiagReport:
    return parse_diag((DATA / name).read_text(), level=level)


def test_the_diagnostics_own_error_is_unknown_not_a_gpu_failure() -> None:
    outcome = judge(_report("dcgmi_diag_4x_r2_internal_error.txt", 2), "node", 2)
    assert outcome.verdict == "Unknown" and not outcome.passed and not outcome.failures()
    pcie = next(c for c in outcome.checks if c.name == "dcgmi: pcie")
    assert pcie.status == "Unknown" and "the diagnostic itself failed" in pcie.detail and "Restart DCGM" in pcie.detail


def test_a_hardware_failure_fails_and_names_the_gpu() -> None:
    outcome = judge(_report("dcgmi_diag_4x_r3_memory_fail.txt", 3), "node", 3)
    assert outcome.verdict == "Fail"
    assert any("GPU 1" in f for f in outcome.failures())


def test_a_cut_output_or_a_lower_level_is_never_a_pass() -> None:
    text = (DATA / "dcgmi_diag_4x_r2_pass.txt").read_text()
    cut = parse_diag(text[: len(text) // 2], level=2)
    assert judge(cut, "node", 2).verdict == "Unknown"
    assert judge(_report("dcgmi_diag_4x_r2_pass.txt", 2), "node", 2).verdict == "Pass"
    assert judge(_report("dcgmi_diag_4x_r2_pass.txt", 3), "node", 3).verdict == "Unknown"  # no stress tests


def test_links_alone(corpus: Path) -> None:
    down = judge_links("node", 1, parse_nvlink_status((corpus / "nvlink_status_all_inactive_aznhc.txt").read_text()))
    failure = down.failures()[0]
    assert down.verdict == "Fail" and "GPU 6 (" in failure and "all NVLinks are inactive" in failure
    assert "dcgmi said" not in failure
    up = judge_links("node", 1, parse_nvlink_status((corpus / "nvlink_status_a100_ok_gpud.txt").read_text()))
    assert up.verdict == "Pass" and up.checks[0].name == "Links"
