"""The control plane compares its nodes' clocks: the agents' clock reports and send stamps come through ingest, and
a job whose nodes disagree by more than 1 ms, or a node whose clock is not synchronised, opens an incident."""

from __future__ import annotations

from gpufleet.control.clock_skew import ClockComparison
from gpufleet.health.detectors.seen import JobView
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import RootCause
from gpufleet.model.observe import ClockFact, JobFact, RankFact
from gpufleet.state import Database
from tests.control.helpers import T0, Clock, batch, plane_at


def _clock(offset_s: float, synchronised: bool = True) -> ClockFact:
    return ClockFact(time=T0, source="chrony", synchronised=synchronised, offset_s=offset_s,
                     error_s=abs(offset_s) + 0.0003, leap="Normal" if synchronised else "Not synchronised")  # fmt: skip


def _job(node: str, first_rank: int) -> list[JobFact]:
    ranks = [RankFact(first_rank + g, g) for g in range(2)]
    return [JobFact("train-7", ranks, world_size=4, last_step_time=T0, step_seconds=1.0)]


def test_a_jobs_nodes_two_milliseconds_apart_open_a_clock_skew_incident(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    plane.ingest(batch("n1", [], jobs=_job("n1", 0), clock=_clock(0.0001)))
    plane.ingest(batch("n2", [], jobs=_job("n2", 2), clock=_clock(-0.0019)))
    plane.tick()
    incidents = plane.incidents()
    skew = [i for i in incidents if i["cause"] == RootCause.clock_skew.value]
    assert len(skew) == 1 and "train-7" in skew[0]["summary"] and "2.0 ms" in skew[0]["summary"]
    assert not [i for i in incidents if i["cause"] == RootCause.clock_unsynchronised.value]
    clock.now += 10
    plane.tick()  # still skewed: not filed again within control.finding_repeat_s
    again = [i for i in plane.incidents() if i["cause"] == RootCause.clock_skew.value]
    assert [i["count"] for i in again] == [1]


def test_an_unsynchronised_node_opens_an_incident_of_its_own(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    plane.ingest(batch("n1", [], clock=_clock(0.0, synchronised=False)))
    plane.tick()
    found = [i for i in plane.incidents() if i["cause"] == RootCause.clock_unsynchronised.value]
    assert len(found) == 1 and "n1" in found[0]["summary"]


def test_nodes_in_step_are_no_incident(state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    plane.ingest(batch("n1", [], jobs=_job("n1", 0), clock=_clock(0.00004)))
    plane.ingest(batch("n2", [], jobs=_job("n2", 2), clock=_clock(-0.00003)))
    plane.tick()
    assert not [i for i in plane.incidents() if i["cause"].startswith("clock-")]


def test_send_stamps_bound_the_clock_difference_from_below() -> None:
    """sent - received = (node clock - plane clock) - one-way delay: the greatest over pushes is the tightest bound."""
    thresholds = load_thresholds()
    compare = ClockComparison(thresholds.clock, thresholds.control.finding_repeat_s)
    for k, delay in enumerate((0.030, 0.002, 0.011)):
        received = T0 + k
        true_send = received - delay
        compare.heard(batch("n1", [], when=true_send + 3.0), received)  # n1's clock runs 3 s ahead
        compare.heard(batch("n2", [], when=true_send), received)
    n1, n2 = compare.clock("n1", T0 + 3), compare.clock("n2", T0 + 3)
    assert n1.received_s is not None and n2.received_s is not None
    assert round(n1.received_s, 6) == 3.0 - 0.002 and round(n2.received_s, 6) == -0.002
    job = JobView("train-7", (("n1", 0), ("n2", 0)), T0, 1.0)
    found = compare.findings(T0 + 3, [job])
    assert [f.cause for f in found] == [RootCause.clock_skew] and "receive times" in found[0].evidence
    # a restarted agent (a new stream) starts its window afresh
    compare.heard(batch("n1", [], incarnation="inc-2", when=T0 + 10.0), T0 + 10.0)
    assert compare.clock("n1", T0 + 10).received_s == 0.0


def test_the_skew_incident_resolves_once_the_clocks_agree_again(state_db: Database) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    for offset in (0.0001, -0.0019):
        node = "n1" if offset > 0 else "n2"
        plane.ingest(batch(node, [], jobs=_job(node, 0 if node == "n1" else 2), clock=_clock(offset)))
    plane.tick()
    assert [i["state"] for i in plane.incidents() if i["cause"] == RootCause.clock_skew.value] == ["open"]
    for _ in range(12):  # chrony stepped n2 back in line: six minutes of agreeing reports
        clock.now += 30
        plane.ingest(batch("n1", [], jobs=_job("n1", 0), clock=_clock(0.0001), when=clock.now))
        plane.ingest(batch("n2", [], jobs=_job("n2", 2), clock=_clock(0.00005), when=clock.now))
        plane.tick()
    assert [i["state"] for i in plane.incidents() if i["cause"] == RootCause.clock_skew.value] == ["resolved"]
