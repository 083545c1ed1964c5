"""Whose cordon a node's is: the one rule the Kubernetes, Slurm and twin backends apply, on hand-built states."""

from __future__ import annotations

from gpufleet.remediate.backends.cordons import on_cordon, on_uncordon


def test_an_incident_joins_a_node_it_or_another_incident_cordoned() -> None:
    first = on_cordon("n", False, (), "a")
    assert (first.unschedulable, first.holders, first.write) == (True, ("a",), True)
    second = on_cordon("n", True, ("a",), "b")
    assert second.holders == ("a", "b") and second.write
    again = on_cordon("n", True, ("a", "b"), "a")
    assert again.holders == ("a", "b") and not again.write  # a retried step changes nothing


def test_a_node_someone_else_cordoned_is_left_theirs() -> None:
    found = on_cordon("n", True, (), "a")
    assert found.holders == () and not found.write and "already cordoned by someone else" in found.detail
    kept = on_uncordon("n", True, (), "a")
    assert kept.unschedulable and not kept.write
    assert kept.detail == "node n kept cordoned: cordoned by someone else (no gpufleet annotation)"
    slurm = on_uncordon("n", True, (), "a", foreign="drained by someone else (reason: rack work)")
    assert slurm.detail == "node n kept cordoned: drained by someone else (reason: rack work)"


def test_the_node_returns_with_its_last_holder() -> None:
    kept = on_uncordon("n", True, ("a", "b"), "a")
    assert (kept.unschedulable, kept.holders, kept.write) == (True, ("b",), True)
    assert kept.detail == "node n kept cordoned: still held by b"
    back = on_uncordon("n", True, ("b",), "b")
    assert (back.unschedulable, back.holders, back.write) == (False, (), True)


def test_a_node_returned_meanwhile_only_loses_the_record() -> None:
    cleared = on_uncordon("n", False, ("a",), "a")
    assert (cleared.unschedulable, cleared.holders, cleared.write) == (False, (), True)
    assert "already schedulable" in cleared.detail
    idle = on_uncordon("n", False, (), "a")
    assert not idle.write and idle.detail == "node n in service: it was not cordoned"


def test_a_person_acts_whoever_holds_the_node() -> None:
    back = on_uncordon("n", True, ("a", "b"), None)
    assert (back.unschedulable, back.holders, back.write) == (False, (), True)
    assert back.detail == "node n uncordoned by a person; cleared gpufleet's cordon for a, b"
    theirs = on_cordon("n", False, ("a",), None)
    assert theirs.unschedulable and theirs.holders == ("a",) and theirs.write
