"""A failed GPU preflight as the finding the control plane opens an incident from."""

from __future__ import annotations

from gpufleet.health.preflight import OUTPUT_MAX, preflight_finding
from gpufleet.model import Entity, EntityKind, RootCause, Severity


def test_the_finding_is_a_critical_diagnostic_failure_on_the_node() -> None:
    finding = preflight_finding(100.0, "gpu-node-7", "dcgm-diag", "PCIe: Fail - GPU: 1\n", "ml/train-0", "JobSet/train")
    assert finding.cause is RootCause.diag_failure and finding.severity is Severity.critical
    assert finding.entity == Entity(EntityKind.node, "gpu-node-7")
    assert (
        finding.summary == "GPU preflight dcgm-diag failed on gpu-node-7 before pod ml/train-0 of JobSet/train started"
    )
    assert finding.evidence == "PCIe: Fail - GPU: 1" and finding.job == "JobSet/train" and finding.source == "preflight"


def test_a_long_output_is_cut_and_says_how_much_was_left_out() -> None:
    finding = preflight_finding(1.0, "n", "nccl-allreduce", "x" * (OUTPUT_MAX + 10))
    assert finding.evidence.endswith("(10 more characters)") and finding.job is None
    assert preflight_finding(1.0, "n", "dcgm-diag", "  ").evidence == "dcgm-diag failed (no output)"
