"""Health checks at DCGM's run levels, and the rule that a PASS with links down is not trusted."""

from __future__ import annotations

from pathlib import Path

from gpufleet.health.diag import judge
from gpufleet.sim.diag import twin_diag
from gpufleet.sim.faults import InjectedFault
from gpufleet.sources.dcgmi import DiagReport, DiagTest, DiagTestResult
from gpufleet.sources.topo import parse_nvlink_status
from gpufleet.spec.scenario_spec import FaultType
from tests.twins import small_twin


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
