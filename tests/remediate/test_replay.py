"""Rehearsing a policy over a day the twin recorded with remediation on: the policy that ran replays to no
difference, a stricter one shows what it would have done instead, and the breaker trips in event time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.control.remediation import RESUME_EVERY_S
from gpufleet.errors import UserError
from gpufleet.remediate import RemediationPolicy
from gpufleet.remediate.replay import Recording, load_recording, replay
from gpufleet.remediate.replay_report import Comparison, compare
from gpufleet.state import Database, open_state
from tests.remediate.recorded_day import H, record_day

DAY = 86_400.0


def policy(**spec: object) -> RemediationPolicy:
    return RemediationPolicy.model_validate({"spec": spec})


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = open_state(record_day(tmp_path_factory.mktemp("day")), create=False)
    yield db
    db.close()


@pytest.fixture(scope="module")
def recording(state: Database) -> Recording:
    return load_recording(state, DAY)


def rehearse(recording: Recording, candidate: RemediationPolicy) -> Comparison:
    return compare(recording, candidate, resume_every_s=RESUME_EVERY_S)


def test_the_day_is_recorded_with_what_remediation_did(recording: Recording) -> None:
    assert len(recording.incidents) == 6 and len(recording.nodes) == 10
    assert recording.node_event_times and recording.events > len(recording.incidents)
    entries, mode = recording.remediation()
    assert mode == "on"
    # the second of two ECC faults in one tick waited out the drain spacing
    assert [e.incident for e in entries if e.decision == "deferred"] == ["INC-000003"]


def test_the_policy_that_ran_replays_to_no_difference(recording: Recording) -> None:
    result = rehearse(recording, RemediationPolicy())
    assert result.baseline == "recorded"
    assert result.differing() == []
    assert result.current.totals() == result.candidate.totals()
    totals = result.current.totals()
    assert totals["actions"] == 27 and totals["nodes_out"] == 6 and totals["deferrals"] == 1
    # 8 GPUs a node-hour, and a minute of one GPU for each of the three ECC faults' resets
    node_hours, gpu_hours = result.current.node_hours, result.current.gpu_hours
    assert node_hours > 0 and gpu_hours == pytest.approx(node_hours * 8 + 3 / 60)


def test_a_breaker_that_trips_on_two_nodes_stops_the_rest(recording: Recording) -> None:
    result = rehearse(recording, policy(breaker={"threshold": 2, "minFailures": 2, "window": "10m"}))
    cur, cand = result.current.totals(), result.candidate.totals()
    assert (cur["breaker_trips"], cand["breaker_trips"]) == (0, 1)
    # two GPUs with ECC faults on two nodes at once: the second is refused, and so is everything after it (the
    # breaker stays tripped until a person resets it)
    changed = {now.incident: then for now, then in result.differing()}
    assert sorted(changed) == ["INC-000003", "INC-000004", "INC-000005", "INC-000006"]
    assert all(then.actions == [] for then in changed.values())
    assert changed["INC-000003"].steps == {"cordon": "refused"}
    assert cand["refusals"] == 4 and cand["actions"] < cur["actions"]
    assert cand["nodes_out"] == cur["nodes_out"] - 4
    assert cand["gpu_hours"] < cur["gpu_hours"]


@pytest.mark.parametrize(("window", "trips"), [("2h10m", True), ("1h50m", False)])
def test_the_breaker_window_is_event_time(recording: Recording, window: str, trips: bool) -> None:
    """Three nodes fail within two hours (one at 1h, two at 3h): a 3-node breaker looking back over two hours
    trips at the third, one looking back less does not."""
    result = rehearse(recording, policy(breaker={"threshold": 3, "minFailures": 3, "window": window}))
    assert result.candidate.breaker_trips == int(trips)
    changed = [now.incident for now, _ in result.differing()]
    assert changed == (["INC-000003", "INC-000004", "INC-000005", "INC-000006"] if trips else [])


def test_a_slower_drain_spacing_keeps_a_cordoned_node_out_longer(recording: Recording) -> None:
    result = rehearse(recording, policy(rateLimits={"drain": {"minInterval": "45m"}}))
    changed = {now.incident: (now, then) for now, then in result.differing()}
    # the second drain of each pair waits 45 minutes after the first: the same steps, later
    assert sorted(changed) == ["INC-000003", "INC-000005"]
    assert all(then.actions == now.actions for now, then in changed.values())
    now, then = changed["INC-000003"]  # cordoned first, so out of service while its drain waits
    extra = then.node_hours - now.node_hours
    assert 0.75 - 2 * RESUME_EVERY_S / H <= extra <= 0.75 + RESUME_EVERY_S / H
    cur, cand = result.current, result.candidate
    assert cand.gpu_hours - cur.gpu_hours == pytest.approx(8 * (cand.node_hours - cur.node_hours))
    assert (
        result.as_dict()["totals"]["deferrals"]["difference"] == 1
    )  # n-006's drain waited too (it was not cordoned meanwhile)


def test_a_lower_hourly_drain_limit_leaves_drains_undone_at_the_end_of_the_window(state: Database) -> None:
    """Cut the window just after the ECC pair: a limit of one drain an hour leaves the second node cordoned."""
    pair = next(b for b in load_recording(state, DAY).incidents if b["id"] == "INC-000002")["first_seen"]
    short = load_recording(state, 2 * H, until=pair + 600)
    assert [b["id"] for b in short.incidents] == ["INC-000002", "INC-000003"]
    result = rehearse(short, policy(rateLimits={"drain": {"maxPerHour": 1}}))
    cur, cand = result.current.totals(), result.candidate.totals()
    assert cand["actions"] < cur["actions"]
    assert cand["gpu_hours"] > cur["gpu_hours"]  # the node stays cordoned to the window's end
    [(_, then)] = result.differing()
    assert then.steps["drain"] == "deferred"


def test_without_a_recorded_run_the_default_policy_is_the_baseline(recording: Recording) -> None:
    unrecorded = Recording(
        recording.start,
        recording.end,
        recording.incidents,
        recording.node_event_times,
        [e for e in recording.audit if e.actor != "remediation"],
        recording.nodes,
    )
    result = rehearse(unrecorded, RemediationPolicy())
    assert result.baseline == "default policy" and any("no remediation run is recorded" in n for n in result.notes)
    assert result.differing() == [] and result.current.totals()["actions"] == 27


def test_progress_counts_every_event(recording: Recording) -> None:
    seen: list[tuple[int, int]] = []
    replay(recording, RemediationPolicy(), progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (recording.events, recording.events)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_an_empty_state_database_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="holds no incidents") as err:
        load_recording(Database(tmp_path / "empty.db"), DAY)
    assert "data directory" in (err.value.fix or "")


@pytest.mark.parametrize(
    "spec",
    [
        {"budget": {"cluster": 1}, "rateLimits": {"drain": {"maxPerHour": 1}}},
        {"rateLimits": {"drain": {"minInterval": "45m"}, "reboot-node": {"minInterval": "2h"}}},
    ],
)
def test_skipping_quiet_passes_changes_no_decision(recording: Recording, spec: dict[str, object]) -> None:
    """Passes that would change nothing are skipped; every pass run instead decides the same, at the same moments."""
    from gpufleet.remediate.replay_report import summarize

    candidate = policy(**spec)
    fast = replay(recording, candidate, resume_every_s=RESUME_EVERY_S)
    every = replay(recording, candidate, resume_every_s=RESUME_EVERY_S, skip_quiet=False)
    assert fast.applied < every.applied

    def acted(run: Any) -> list[tuple[object, ...]]:
        return [(e.time, e.incident, e.step, e.target, e.decision) for e in run.entries if e.decision != "deferred"]

    assert acted(fast) == acted(every)
    a = summarize(fast.entries, recording, fast.reboot_until)
    b = summarize(every.entries, recording, every.reboot_until)
    assert a.totals() == b.totals() and a.incidents == b.incidents


def test_a_person_returning_a_node_ends_its_time_out_of_service(state: Database) -> None:
    """The candidate leaves n-004 cordoned while its drain waits; a person returns it five minutes in."""
    from gpufleet.state import AuditEntry

    pair = next(b for b in load_recording(state, DAY).incidents if b["id"] == "INC-000003")["first_seen"]
    candidate = policy(rateLimits={"drain": {"maxPerHour": 1}})
    before = rehearse(load_recording(state, 2 * H, until=pair + 600), candidate).candidate
    short = load_recording(state, 2 * H, until=pair + 600)
    short.audit.append(
        AuditEntry(seq=10**9, time=pair + 300, recorded=pair + 300, actor="ops", action="uncordon",
                   target="node/n-004", decision="node n-004 uncordoned", reason="", incident="", cause="",
                   runbook="", step="", dry_run=False, backend="twin", request="")
    )  # fmt: skip
    after = rehearse(short, candidate).candidate
    assert after.node_hours == pytest.approx(before.node_hours - 300 / H)
    assert after.gpu_hours == pytest.approx(before.gpu_hours - 8 * 300 / H)
