"""Runbooks as data: every root cause has one, the most specific wins, and mistakes in a runbook file are errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ManifestError
from gpufleet.model.incident import RootCause, Severity
from gpufleet.model.observation import EntityKind
from gpufleet.remediate import ActionKind, RunbookSet, load_runbooks
from gpufleet.spec.loader import load_manifests
from tests.remediate.helpers import incident


def test_every_root_cause_has_a_runbook() -> None:
    runbooks = RunbookSet.builtin()
    for cause in RootCause:
        chosen = runbooks.select(incident(cause, "n-000"))
        assert cause in chosen.spec.match.causes


def test_most_specific_match_wins() -> None:
    rb = RunbookSet.builtin()
    # one remedy for a double-bit error: Xid 48, the ECC counter (same action, no Xid), an amdgpu UMC error
    assert rb.select(incident(RootCause.ecc_dbe, "n", action="WORKFLOW_XID_48", xid=48)).name == "ecc-dbe"
    assert rb.select(incident(RootCause.ecc_dbe, "n", action="WORKFLOW_XID_48")).name == "ecc-dbe"
    assert rb.select(incident(RootCause.ecc_dbe, "n", action="RESET_GPU")).name == "ecc-dbe"
    assert rb.select(incident(RootCause.ecc_dbe, "n", action="RMA")).name == "replace-hardware"
    assert rb.select(incident(RootCause.gpu_xid, "n", action="RESTART_BM")).name == "gpu-xid-reboot"
    assert rb.select(incident(RootCause.gpu_xid, "n", action="CONTACT_SUPPORT")).name == "gpu-xid"
    # the same action, rated non-fatal: ticketed, left in service
    warning = incident(RootCause.gpu_xid, "n", action="CONTACT_SUPPORT", severity=Severity.warning)
    assert rb.select(warning).name == "gpu-xid-support"
    assert rb.select(incident(RootCause.nvlink, "n", action="IGNORE", severity=Severity.info)).name == "nvlink-watch"
    assert rb.select(incident(RootCause.nvlink, "n", action="IGNORE")).name == "nvlink"  # a fatal subcode


def test_a_severity_match_is_checked_and_counts_as_specific(tmp_path: Path) -> None:
    path = _write(tmp_path, "    - {id: n, action: notify}\n", name="hot-warning")
    text = path.read_text().replace("match: {causes: [thermal]}", "match: {causes: [thermal], severities: [warning]}")
    path.write_text(text)
    rb = RunbookSet.builtin()
    rb.extend(load_runbooks(path))
    assert rb.select(incident(RootCause.thermal, "n", severity=Severity.warning)).name == "hot-warning"
    assert rb.select(incident(RootCause.thermal, "n")).name == "thermal"


def test_required_runbook_shapes() -> None:
    rb = RunbookSet.builtin().by_name
    dbe = rb["ecc-dbe"].spec.steps
    assert [s.action for s in dbe] == [
        ActionKind.cordon,
        ActionKind.drain,
        ActionKind.reset_gpu,
        ActionKind.diag,
        ActionKind.uncordon,
        ActionKind.ticket,
    ]
    assert dbe[4].when.step_passed == "diag" and (dbe[5].ticket_kind, dbe[5].when.step_failed) == ("rma", "diag")
    failed = rb["row-remap-failure"].spec.steps
    assert [s.action for s in failed] == [ActionKind.cordon, ActionKind.drain, ActionKind.ticket]
    assert failed[-1].ticket_kind == "rma"
    lost = rb["gpu-lost"].spec.steps
    assert [s.action for s in lost[:4]] == [
        ActionKind.drain,
        ActionKind.reboot_node,
        ActionKind.diag,
        ActionKind.uncordon,
    ]
    assert lost[2].level == 2 and lost[3].when.step_passed == "diag"
    assert [s.action for s in rb["bad-cable"].spec.steps] == [ActionKind.isolate_port, ActionKind.ticket]
    assert [s.action for s in rb["thermal"].spec.steps] == [ActionKind.power_cap, ActionKind.ticket]
    assert ActionKind.requeue_job in [s.action for s in rb["nccl-hang"].spec.steps]
    assert [s.action for s in rb["idle-gpu"].spec.steps] == [ActionKind.notify]  # never kills by default
    assert [s.action for s in rb["driver-mismatch"].spec.steps] == [ActionKind.cordon, ActionKind.ticket]
    assert rb["bad-cable"].spec.steps[0].when.entity_kind == [EntityKind.port, EntityKind.link]


def _write(tmp: Path, steps: str, name: str = "x") -> Path:
    path = tmp / "rb.yaml"
    path.write_text(
        f"apiVersion: gpufleet.io/v1\nkind: Runbook\nmetadata: {{name: {name}}}\n"
        f"spec:\n  description: d\n  match: {{causes: [thermal]}}\n  steps:\n{steps}"
    )
    return path


def test_runbook_is_a_manifest_kind(tmp_path: Path) -> None:
    import gpufleet.remediate  # noqa: F401  (registers the kinds)

    path = _write(tmp_path, "    - {id: cap, action: power-cap, powerFraction: 0.7}\n", name="thermal")
    [doc] = load_manifests(path)
    assert doc.spec.steps[0].power_fraction == 0.7  # type: ignore[attr-defined]
    replaced = RunbookSet.builtin()
    replaced.extend(load_runbooks(path))
    chosen = replaced.select(incident(RootCause.thermal, "n"))
    assert [s.id for s in chosen.spec.steps] == ["cap"]  # a file runbook with a built-in's name replaces it


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("    - {id: a, action: cordon, reasn: typo}\n", "did you mean 'reason'"),
        ("    - {id: a, action: diag}\n", "needs `level`"),
        (
            "    - {id: a, action: uncordon, when: {stepPassed: later}}\n    - {id: later, action: cordon}\n",
            "not an earlier step",
        ),
        ("    - {id: a, action: explode}\n", "action"),
        ("    - {id: a, action: ticket}\n", "ticketKind"),
    ],
)
def test_bad_runbooks_name_the_problem(tmp_path: Path, steps: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_runbooks(_write(tmp_path, steps))


def test_a_recorded_row_remap_is_watched_not_sent_back() -> None:
    rb = RunbookSet.builtin()
    chosen = rb.select(incident(RootCause.retired_pages, "n", action="IGNORE", xid=63))
    assert chosen.name == "row-remap-recorded"
    kinds = [s.action for s in chosen.spec.steps]
    assert ActionKind.cordon not in kinds and ActionKind.drain not in kinds
    assert all(s.ticket_kind != "rma" for s in chosen.spec.steps)
    # the telemetry's retired-page limit (pre-Ampere) and a real remap failure still return the board
    assert rb.select(incident(RootCause.retired_pages, "n", action="CONTACT_SUPPORT")).name == "retired-pages"
    assert rb.select(incident(RootCause.row_remap_failure, "n", action="CONTACT_SUPPORT")).name == "row-remap-failure"


@pytest.mark.parametrize("cause", [RootCause.gpu_lost, RootCause.ecc_dbe])
def test_an_escalation_replaces_the_hardware_instead_of_another_reboot(cause: RootCause) -> None:
    chosen = RunbookSet.builtin().select(incident(cause, "n", action="RMA"))
    assert chosen.name == "replace-hardware"
    assert [s.action for s in chosen.spec.steps] == [ActionKind.cordon, ActionKind.drain, ActionKind.ticket]
    assert chosen.spec.steps[-1].ticket_kind == "rma"
    assert ActionKind.reboot_node not in [s.action for s in chosen.spec.steps]
