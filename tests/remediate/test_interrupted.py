"""A step whose intent was written but whose result never was (the control plane died in between, or a leader was
replaced) is never run again: the runbook stops there and says what a person must check."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model.incident import RootCause
from gpufleet.remediate.store import StepRecord
from tests.remediate.helpers import incident, remediator
from tests.twins import small_twin


def test_the_intent_is_written_before_the_action(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=2)
    rem = remediator(twin, tmp_path)
    inc = incident(RootCause.row_remap_failure, "n-001", gpu=5, action="CONTACT_SUPPORT", xid=64)
    seen: list[str | None] = []
    cordon = twin.set_cordon

    def watching(node: str, unschedulable: bool, holders: list[str]) -> None:  # the books when the backend acts
        rec = rem.books().step(inc.id, "cordon")
        seen.append(rec.outcome if rec else None)
        cordon(node, unschedulable, holders)

    twin.set_cordon = watching  # type: ignore[method-assign]
    rem.apply(inc)
    assert seen == ["started"]
    rec = rem.books().step(inc.id, "cordon")
    assert rec is not None and rec.outcome == "done"


def test_an_unconfirmed_step_is_never_repeated(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=2)
    rem = remediator(twin, tmp_path)
    inc = incident(RootCause.row_remap_failure, "n-001", gpu=5, action="CONTACT_SUPPORT", xid=64)
    rem.books().record_step(StepRecord(inc.id, "cordon", "cordon", "node/n-001", "started", 10.0, "begun"))
    report = rem.apply(inc)
    assert [(s.step, s.decision) for s in report.steps] == [("cordon", "interrupted")]
    assert "never confirmed" in report.steps[0].reason and "by hand" in report.steps[0].reason
    assert not twin.cluster.node("n-001").unschedulable  # not cordoned (again)
    again = rem.apply(inc)
    assert [(s.step, s.decision) for s in again.steps] == [("cordon", "interrupted")]
    entries = [e for e in rem.books().audit_entries(incident=inc.id) if e.decision == "interrupted"]
    assert len(entries) == 1  # said once, not at every pass
