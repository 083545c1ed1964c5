"""Runbooks for the AMD and Gaudi causes (gpu-ras, gpu-hang, scaleup-link) and their action terms, and the GPU-reset
hint that names the node's own vendor tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.incident import RootCause
from gpufleet.remediate import ActionKind, RemediationStore, Remediator, RunbookSet
from gpufleet.remediate.backends.base import Cordons, Drains, NodeLocation, RemediationBackend
from tests.remediate.helpers import incident, policy, remediator
from tests.twins import small_twin


@pytest.mark.parametrize(
    ("cause", "action", "runbook"),
    [
        (RootCause.gpu_ras, "RESET_GPU", "gpu-ras"),
        (RootCause.gpu_ras, "NONE", "gpu-ras-watch"),
        (RootCause.gpu_ras, "RESTART_APP", "gpu-ras-app"),
        (RootCause.gpu_hang, "RESET_GPU", "gpu-hang"),
        (RootCause.gpu_hang, "IGNORE", "gpu-hang-recovered"),
        (RootCause.gpu_hang, "RESTART_APP", "gpu-hang-recovered"),
        (RootCause.scaleup_link, "RESET_GPU", "scaleup-link"),
        (RootCause.scaleup_link, "NONE", "scaleup-link-errors"),
        (RootCause.ecc_dbe, "RESET_GPU", "ecc-dbe"),  # amdgpu UMC uncorrectable
        (RootCause.gpu_lost, "REBOOT", "gpu-lost"),  # a failed reset, a device lost from the bus
        (RootCause.retired_pages, "DRAIN_RMA", "retired-pages"),  # amdgpu's bad-page threshold
        (RootCause.ecc_sbe_rate, "NONE", "ecc-sbe-rate"),  # a burst of corrected errors
        (RootCause.gpu_ras, "RMA", "replace-hardware"),
        (RootCause.gpu_hang, "RMA", "replace-hardware"),
        (RootCause.scaleup_link, "RMA", "replace-hardware"),
    ],
)
def test_vendor_causes_and_terms_select_their_runbook(cause: RootCause, action: str, runbook: str) -> None:
    assert RunbookSet.builtin().select(incident(cause, "n", action=action)).name == runbook


def test_vendor_runbook_shapes() -> None:
    rb = RunbookSet.builtin().by_name
    tested = [ActionKind.cordon, ActionKind.drain, ActionKind.reset_gpu, ActionKind.diag, ActionKind.uncordon,
              ActionKind.ticket]  # fmt: skip
    for name in ("gpu-ras", "scaleup-link"):
        steps = rb[name].spec.steps
        assert [s.action for s in steps] == tested
        assert steps[2].when.entity_kind and steps[4].when.step_passed == "diag"
        assert (steps[5].ticket_kind, steps[5].when.step_failed) == ("rma", "diag")
    hang = rb["gpu-hang"].spec.steps
    assert [s.action for s in hang] == [ActionKind.drain, ActionKind.reset_gpu, ActionKind.diag, ActionKind.uncordon,
                                        ActionKind.ticket]  # fmt: skip
    assert hang[-1].ticket_kind == "repair"  # a hang alone is no proof the board is bad
    for name in ("gpu-hang-recovered", "gpu-ras-watch", "gpu-ras-app"):  # they only tell people
        assert [s.action for s in rb[name].spec.steps] == [ActionKind.notify]
    assert [s.action for s in rb["scaleup-link-errors"].spec.steps] == [ActionKind.cordon, ActionKind.ticket]


def test_gpu_ras_runbook_on_the_twin(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    report = rem.apply(incident(RootCause.gpu_ras, "n-002", gpu=1, action="RESET_GPU"))
    assert {s.step: s.decision for s in report.steps} == {
        "cordon": "done", "drain": "done", "reset": "done", "diag": "passed", "uncordon": "done", "rma": "skipped",
    }  # fmt: skip
    assert not twin.cluster.node("n-002").unschedulable  # back in service: the re-test passed


class _NoReset(RemediationBackend, Cordons, Drains):
    """A backend that can take a node out but cannot reset a GPU (a scheduler's controller)."""

    name = "scheduler"

    def __init__(self, model: str) -> None:
        self.model = model

    def now(self) -> float:
        return 0.0

    def nodes(self) -> list[str]:
        return ["n-0", "n-1", "n-2", "n-3"]

    def placement(self) -> dict[str, NodeLocation]:
        return {}

    def unavailable(self) -> set[str]:
        return set()

    def node_ready(self, node: str) -> bool:
        return True

    def gpu_model(self, node: str) -> str:
        return self.model

    def cordon(self, node: str, reason: str, incident: str | None) -> str:
        return f"cordoned {node}"

    def uncordon(self, node: str, incident: str | None) -> str:
        return f"uncordoned {node}"

    def drain(self, node: str, reason: str, incident: str | None) -> str:
        return f"drained {node}"


@pytest.mark.parametrize(
    ("model", "hint"),
    [
        ("mi300x", "reset it on the node (amd-smi reset -G -g 3)"),
        ("gaudi2", "reset it on the node (hl-smi -i <bus id of device 3> -r)"),
        ("h100-sxm", "reset it on the node (nvidia-smi -r -i 3)"),
        ("", "with its vendor's tool (nvidia-smi -r -i N, amd-smi reset -G -g N, hl-smi -i BUS_ID -r)"),
        ("no-such-gpu", "with its vendor's tool"),
    ],
)
def test_a_reset_the_backend_cannot_do_names_the_vendors_tool(tmp_path: Path, model: str, hint: str) -> None:
    rem = Remediator(_NoReset(model), RemediationStore(tmp_path / "r.db"), policy(dryRun=False))
    report = rem.apply(incident(RootCause.gpu_hang, "n-1", gpu=3, action="RESET_GPU"))
    reset = next(s for s in report.steps if s.step == "reset")
    assert reset.decision == "unsupported"
    assert "the scheduler backend cannot reset GPU 3 on n-1" in reset.reason and hint in reset.reason
