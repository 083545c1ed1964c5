"""The remediation policy's eviction modes for GPU-scoped drains, as an operator writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.remediate.config import load_policy

POLICY = """\
apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: prod}
spec:
  eviction:
    default: evict
    namespaces: {research: delete, inference: leave}
    deleteGracePeriod: 120
"""


def test_eviction_modes_per_namespace_with_a_default(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    eviction = load_policy(path).spec.eviction
    assert (eviction.mode("research"), eviction.mode("inference"), eviction.mode("ml")) == ("delete", "leave", "evict")
    assert eviction.delete_grace_period == 120


def test_an_unknown_mode_is_an_error_that_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.replace("research: delete", "research: drain"))
    with pytest.raises(ManifestError, match="research"):
        load_policy(path)
