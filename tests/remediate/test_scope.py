"""The drain's scope, decided once: one GPU's work for a fault on one GPU whose runbook takes no node-wide step,
the whole node otherwise; and `plan` says which and why."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model.incident import RootCause
from gpufleet.model.observation import EntityKind
from gpufleet.remediate import RunbookSet
from gpufleet.remediate.scope import drain_scope
from tests.remediate.helpers import incident, remediator
from tests.twins import small_twin

RUNBOOKS = RunbookSet.builtin()


def _scope(**kw: object) -> tuple[int | None, str]:
    inc = incident(**kw)  # type: ignore[arg-type]
    scope = drain_scope(inc, RUNBOOKS.select(inc))
    return scope.gpu, scope.why


def test_a_reset_runbook_on_one_gpu_drains_that_gpu() -> None:
    gpu, why = _scope(cause=RootCause.ecc_dbe, node="n", gpu=3, xid=48)
    assert gpu == 3 and why == "the fault is on GPU 3 and runbook ecc-dbe takes no node-wide step"
    assert _scope(cause=RootCause.gpu_xid, node="n", gpu=1, action="RESET_GPU")[0] == 1


def test_a_reboot_drains_the_node() -> None:
    gpu, why = _scope(cause=RootCause.gpu_lost, node="n", gpu=3, xid=79)
    assert gpu is None and why == "runbook gpu-lost takes a node-wide step (reboot: reboot-node)"
    assert _scope(cause=RootCause.gpu_xid, node="n", gpu=3, action="RESTART_BM")[0] is None


def test_a_guarded_reboot_that_cannot_run_for_this_incident_does_not_count() -> None:
    # Xid 154's runbook reboots only for the reboot recovery actions
    assert _scope(cause=RootCause.recovery_action, node="n", gpu=2, action="DRAIN_AND_RESET")[0] == 2
    assert _scope(cause=RootCause.recovery_action, node="n", gpu=2, action="NODE_REBOOT")[0] is None


def test_an_incident_on_the_node_drains_the_node() -> None:
    gpu, why = _scope(cause=RootCause.row_remap_failure, node="n", gpu=None, kind=EntityKind.node)
    assert gpu is None and why == "the incident is on a node, not one GPU"


def test_plan_says_which_scope_and_why(tmp_path: Path) -> None:
    rem = remediator(small_twin(nodes=3, job_nodes=0), tmp_path)
    gpu = {s.step: s.reason for s in rem.plan(incident(RootCause.ecc_dbe, "n-001", gpu=5, xid=48)).steps}
    assert gpu["drain"].startswith("drain GPU 5 of n-001 only: the fault is on GPU 5 and runbook ecc-dbe takes no")
    node = {s.step: s.reason for s in rem.plan(incident(RootCause.gpu_lost, "n-001", gpu=5, xid=79)).steps}
    assert node["drain"].startswith("drain whole node n-001: runbook gpu-lost takes a node-wide step (reboot")
