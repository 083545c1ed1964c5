"""A GPU preflight that failed (the `gpufleet-preflight` init container of a GPU pod, `gpufleet preflight`), as the
finding the control plane opens an incident from: on the node the pod was placed on, a diagnostic failure, so the
diag-failure runbook (cordon, drain, repair ticket) applies as it does to any failed diagnostic."""

from __future__ import annotations

from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding

CHECKS = ("dcgm-diag", "nccl-allreduce")  # what `gpufleet preflight` runs
OUTPUT_MAX = 8000  # of the check's output kept as evidence: its verdict and first failures, not a whole log


def preflight_finding(now: float, node: str, check: str, output: str, pod: str = "", gang: str = "") -> Finding:
    """The finding for `check` failing on `node` before `pod` (of `gang`, when it has one) started."""
    who = f"pod {pod}" if pod else "a pod"
    if gang:
        who += f" of {gang}"
    text = output.strip()
    if len(text) > OUTPUT_MAX:
        text = text[:OUTPUT_MAX] + f"\n... ({len(output) - OUTPUT_MAX} more characters)"
    return Finding(
        now,
        RootCause.diag_failure,
        Entity(EntityKind.node, node),
        Severity.critical,
        f"GPU preflight {check} failed on {node} before {who} started",
        text or f"{check} failed (no output)",
        "preflight",
        action="RUN_DIAG",
        job=gang or None,
    )
