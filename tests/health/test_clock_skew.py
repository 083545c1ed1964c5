"""The clock judgement on hand-built clocks: a job's nodes more than 1 ms apart, by their daemons' offsets or (past
the receive-time margin) by when their pushes arrive, and a node whose clock is not synchronised."""

from __future__ import annotations

from gpufleet.health.clock_skew import NodeClock, job_skew, unsynchronised
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import RootCause, Severity
from gpufleet.model.observation import EntityKind

LIMITS = load_thresholds().clock


def _chrony(node: str, offset_s: float, synchronised: bool = True) -> NodeClock:
    return NodeClock(node, "chrony", synchronised, offset_s, abs(offset_s) + 0.0003)


def test_nodes_within_a_millisecond_are_no_finding() -> None:
    clocks = [_chrony("a", 40e-6), _chrony("b", -30e-6), _chrony("c", 0.0009)]
    assert job_skew("train", clocks, 0.0, LIMITS) is None


def test_daemon_offsets_more_than_a_millisecond_apart_are_skew() -> None:
    found = job_skew("train", [_chrony("a", 40e-6), _chrony("b", -0.0012), _chrony("c", 0.0)], 9.0, LIMITS)
    assert found is not None and found.cause is RootCause.clock_skew and found.severity is Severity.warning
    assert found.entity.kind is EntityKind.job and found.job == "train" and found.time == 9.0
    assert "a" in found.summary and "b" in found.summary and "1.2 ms" in found.summary
    assert "time daemons" in found.evidence and found.action == "FIX_TIME_SYNC"
    assert LIMITS.skew_limit_s == 1e-3  # the 1 ms


def test_an_unsynchronised_nodes_own_offset_is_not_trusted_for_skew() -> None:
    assert job_skew("train", [_chrony("a", 0.0), _chrony("b", 0.5, synchronised=False)], 0.0, LIMITS) is None


def test_receive_times_catch_a_clock_off_by_seconds_that_its_daemon_does_not_report() -> None:
    quiet = [NodeClock("a", received_s=-0.004), NodeClock("b", received_s=2.5)]
    found = job_skew("train", quiet, 0.0, LIMITS)
    assert found is not None and "receive times" in found.evidence and "2504.0 ms" in found.summary


def test_receive_times_within_a_pushs_delay_say_nothing() -> None:
    within = [NodeClock("a", received_s=-0.004), NodeClock("b", received_s=-0.004 + LIMITS.receive_skew_s * 0.9)]
    assert job_skew("train", within, 0.0, LIMITS) is None


def test_one_node_is_no_comparison() -> None:
    assert job_skew("train", [_chrony("a", 5.0)], 0.0, LIMITS) is None


def test_unsynchronised_says_which_daemon_said_so() -> None:
    found = unsynchronised(NodeClock("n1", "kernel", False, None, 16.0), 3.0)
    assert found is not None and found.cause is RootCause.clock_unsynchronised and found.entity.node == "n1"
    assert "maxerror" in found.evidence and "16.000 s" in found.evidence
    assert unsynchronised(NodeClock("n1", "chrony", True, 0.0, 0.001), 3.0) is None
    assert unsynchronised(NodeClock("n1"), 3.0) is None  # nothing reported: nothing said
