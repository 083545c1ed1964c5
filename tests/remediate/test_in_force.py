"""The policy in force: read once for the control plane and the CLI alike, its runbook files beside it, its tickets
where it says; a policy that does not validate names its mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.remediate.in_force import in_force
from gpufleet.remediate.tickets import FileTicketSink, WebhookTicketSink


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_defaults_without_a_file(tmp_path: Path) -> None:
    given = in_force(None, tmp_path)
    assert given.policy.spec.node_actions.route == "auto" and given.policy.spec.rma.after == 3
    assert isinstance(given.tickets, FileTicketSink) and "ecc-dbe" in given.runbooks.by_name
    assert in_force(None, None).tickets is None


def test_a_policy_with_its_own_runbook_and_webhook(tmp_path: Path) -> None:
    write(
        tmp_path / "extra.yaml",
        """apiVersion: gpufleet.io/v1
kind: Runbook
metadata: {name: ecc-dbe}
spec:
  description: keep it simple
  match: {causes: [ecc-dbe]}
  steps:
    - {id: cordon, action: cordon}
""",
    )
    policy = write(
        tmp_path / "policy.yaml",
        """apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: strict}
spec:
  nodeActions: {route: agent, deadline: {reset-gpu: 5m}}
  rma: {after: 2, window: 3d}
  tickets: {webhook: "https://tickets.example.com/hook"}
  runbooks: [extra.yaml]
""",
    )
    given = in_force(policy, tmp_path)
    spec = given.policy.spec
    assert spec.node_actions.route == "agent" and spec.rma.after == 2 and spec.rma.window == 3 * 86400.0
    assert [s.id for s in given.runbooks.by_name["ecc-dbe"].spec.steps] == ["cordon"]
    assert isinstance(given.tickets, WebhookTicketSink)


def test_a_misspelt_field_is_named(tmp_path: Path) -> None:
    policy = write(
        tmp_path / "bad.yaml",
        """apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: bad}
spec:
  nodeAction: {route: agent}
""",
    )
    with pytest.raises(ManifestError, match="nodeAction"):
        in_force(policy, tmp_path)
