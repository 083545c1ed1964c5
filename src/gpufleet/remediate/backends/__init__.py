"""Where remediation actions go: the twin, Slurm or Kubernetes, all behind :class:`RemediationBackend`."""

from __future__ import annotations

from gpufleet.remediate.backends.base import DiagResult, NodeLocation, RemediationBackend, UnsupportedActionError

__all__ = ["DiagResult", "NodeLocation", "RemediationBackend", "UnsupportedActionError"]
