"""Safety: the circuit breaker holds under a mass failure, budgets cap unavailable nodes, rate limits space actions,
dry-run changes nothing, and the audit log is durable and append-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model.incident import RootCause, Severity
from gpufleet.remediate import RemediationStore, Remediator
from gpufleet.remediate.config import BreakerSpec, resolve_limit
from gpufleet.remediate.safety import breaker_verdict
from gpufleet.sim.backend import TwinBackend
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import Twin
from gpufleet.spec.scenario_spec import FaultType
from tests.pg import StateTarget
from tests.remediate.helpers import incident, policy, remediator
from tests.twins import small_twin


def _unavailable(twin: Twin) -> set[str]:
    return {n.name for n in twin.cluster.nodes if n.unschedulable}


def test_mass_failure_trips_the_breaker_and_it_holds_until_reset(tmp_path: Path) -> None:
    """40% of a 50-node twin loses a GPU within 2 minutes. Default breaker: 20% of nodes in 10 minutes."""
    failing = [f"n-{k:03d}" for k in range(20)]
    faults = [
        InjectedFault(k, FaultType.gpu_off_bus, 6.0 * (k + 1) - 1, node=n, gpu=k % 8) for k, n in enumerate(failing)
    ]
    twin = small_twin(nodes=50, job_nodes=0, faults=faults)
    # Budget and spacing out of the way so the breaker is the only thing that stops actions.
    pol = policy(budget={"cluster": "100%"}, rateLimits={})
    rem = remediator(twin, tmp_path, pol)
    incidents = []
    for k, node in enumerate(failing):
        twin.run(6)  # 20 failures over 120 s; each reported as the detectors would
        assert not twin.gpus.alive[twin.gpu(node, k % 8)]
        inc = incident(RootCause.gpu_lost, node, gpu=k % 8, xid=79, when=twin.time)
        incidents.append(inc)
        rem.apply(inc)

    # Threshold = 20% of 50 = 10 failing nodes: the 10th trips it, so exactly 9 nodes were drained.
    assert _unavailable(twin) == set(failing[:9])
    entries = rem.store.audit_entries()
    trips = [e for e in entries if e.decision == "breaker-tripped"]
    assert len(trips) == 1 and trips[0].incident == incidents[9].id and "10 of 50 nodes" in trips[0].reason
    refused = [e for e in entries if e.decision == "refused"]
    assert {e.incident for e in refused} == {i.id for i in incidents[9:]}
    assert all("circuit breaker" in e.reason for e in refused)
    assert rem.breaker_status()["state"] == "tripped"

    # No further drains while tripped, even long after the wave and for a single new failure.
    twin.run(700)  # past the 10-minute window
    late = incident(RootCause.ecc_dbe, "n-040", gpu=0, when=twin.time)
    assert [s.decision for s in rem.apply(late).steps] == ["refused"]
    assert "n-040" not in _unavailable(twin)

    # The trip survives a restart: a new engine on the same state file is still tripped.
    reopened = Remediator(TwinBackend(twin), RemediationStore(tmp_path / "remediate.db"), pol, tickets=rem.tickets)
    assert reopened.breaker_status()["state"] == "tripped"
    assert [s.decision for s in reopened.resume()[0].steps if s.decision != "done-earlier"] == ["refused"]

    # A person resets it; paused runbooks continue and the refused nodes get drained.
    reopened.reset_breaker(by="oncall", note="bad driver rollout rolled back")
    assert reopened.breaker_status()["state"] == "closed"
    reports = {r.incident: r for r in reopened.resume()}
    # The refused nodes are now drained and rebooting; the first nine finished their reboot meanwhile, passed
    # diag and went back into service; n-040's ECC runbook ran through (reset, diag passed, uncordon).
    assert _unavailable(twin) == set(failing[9:])
    assert [s.decision for s in reports[late.id].steps][-2:] == ["done", "skipped"]
    resets = [e for e in reopened.store.audit_entries() if e.decision == "breaker-reset"]
    assert len(resets) == 1 and "oncall" in resets[0].reason


def test_breaker_ignores_failures_spread_over_time(tmp_path: Path) -> None:
    twin = small_twin(nodes=20, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(budget={"cluster": "100%"}, rateLimits={}))
    for k in range(8):  # 8 of 20 nodes, but one every 11 minutes: never 4 (20%) inside a 10-minute window
        twin.run(660)
        rem.apply(incident(RootCause.row_remap_failure, f"n-{k:03d}", when=twin.time))
    assert rem.breaker_status()["state"] == "closed"
    assert len(_unavailable(twin)) == 8


def test_a_slow_wave_trips_the_breaker_though_no_window_reaches_the_threshold(tmp_path: Path) -> None:
    """One node every 3 minutes on 60: never 12 (20%) in 10 minutes, but at least 3 (5% of 60, the floor) in each
    of two windows in a row by the 7th failure: the wave rule trips there, after 6 were acted on."""
    twin = small_twin(nodes=60, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(budget={"cluster": "100%"}, rateLimits={}))
    reports = []
    for k in range(10):
        twin.run(180)
        reports.append(rem.apply(incident(RootCause.row_remap_failure, f"n-{k:03d}", when=twin.time)))
    assert [r.breaker for r in reports[:6]] == ["closed"] * 6
    assert reports[6].breaker == "tripped"
    assert len(_unavailable(twin)) == 6
    (trip,) = [e for e in rem.store.audit_entries() if e.decision == "breaker-tripped"]
    assert trip.reason.startswith("a wave: 3, 4 of 60 nodes failed in each of the last 2 windows of 10m")
    status = rem.breaker_status()
    assert status["state"] == "tripped" and status["wave_threshold"] == 3


def test_without_the_wave_rule_the_same_slow_wave_is_let_through(tmp_path: Path) -> None:
    twin = small_twin(nodes=60, job_nodes=0)
    pol = policy(budget={"cluster": "100%"}, rateLimits={}, breaker={"waveThreshold": None})
    rem = remediator(twin, tmp_path, pol)
    for k in range(10):
        twin.run(180)
        rem.apply(incident(RootCause.row_remap_failure, f"n-{k:03d}", when=twin.time))
    assert rem.breaker_status()["state"] == "closed" and len(_unavailable(twin)) == 10


def test_breaker_trip_in_dry_run_is_only_reported(tmp_path: Path) -> None:
    twin = small_twin(nodes=10, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(dryRun=True, budget={"cluster": "100%"}, rateLimits={}))
    for k in range(5):
        rem.apply(incident(RootCause.gpu_lost, f"n-{k:03d}"))
    assert rem.store.breaker().tripped is False
    assert _unavailable(twin) == set()


def test_leaf_budget_never_exceeded(tmp_path: Path) -> None:
    twin = small_twin(nodes=32, job_nodes=0)
    rem = remediator(
        twin, tmp_path, policy(budget={"cluster": "100%", "perLeaf": 2}, rateLimits={}, breaker={"enabled": False})
    )
    places = rem.backend.placement()
    leaf = places["n-000"].leaf
    same_leaf = [n for n, p in places.items() if p.leaf == leaf]
    assert len(same_leaf) >= 5
    for node in same_leaf[:5]:
        rem.apply(incident(RootCause.row_remap_failure, node))
        out_under_leaf = [n for n in _unavailable(twin) if places[n].leaf == leaf]
        assert len(out_under_leaf) <= 2
    assert len([n for n in _unavailable(twin) if places[n].leaf == leaf]) == 2
    refused = [e for e in rem.store.audit_entries() if e.decision == "refused"]
    assert len(refused) == 3 and all("leaf budget" in e.reason and leaf in e.reason for e in refused)
    # A node under another leaf is not held back by this leaf's budget.
    other = next(n for n, p in places.items() if p.leaf != leaf)
    rem.apply(incident(RootCause.row_remap_failure, other))
    assert other in _unavailable(twin)


def test_rack_and_cluster_budgets(tmp_path: Path) -> None:
    twin = small_twin(nodes=20, job_nodes=0)
    rem = remediator(
        twin, tmp_path, policy(budget={"cluster": "15%", "perRack": "50%"}, rateLimits={}, breaker={"enabled": False})
    )
    racks = rem.backend.placement()
    rack0 = [n for n, p in racks.items() if p.rack == racks["n-000"].rack]  # 4 nodes per rack: 50% = 2
    for node in rack0:
        rem.apply(incident(RootCause.driver_mismatch, node, gpu=None))
    assert len(_unavailable(twin) & set(rack0)) == 2
    others = [n for n in racks if n not in rack0]
    for node in others[:3]:
        rem.apply(incident(RootCause.driver_mismatch, node, gpu=None))
    assert len(_unavailable(twin)) == 3  # cluster: 15% of 20 = 3
    reasons = [e.reason for e in rem.store.audit_entries() if e.decision == "refused"]
    assert any(r.startswith("rack budget") for r in reasons) and any(r.startswith("cluster budget") for r in reasons)


def test_a_node_already_out_needs_no_budget(tmp_path: Path) -> None:
    twin = small_twin(nodes=10, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(budget={"cluster": 1}, rateLimits={}))
    rem.apply(incident(RootCause.driver_mismatch, "n-000", gpu=None))
    report = rem.apply(incident(RootCause.row_remap_failure, "n-000", gpu=2))
    assert [s.decision for s in report.steps] == ["done", "done", "done"]


def test_drain_spacing_defers_then_allows(tmp_path: Path) -> None:
    twin = small_twin(nodes=10, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(budget={"cluster": "100%"}, rateLimits={"drain": {"minInterval": "5m"}}))
    rem.apply(incident(RootCause.row_remap_failure, "n-000"))
    second = rem.apply(incident(RootCause.row_remap_failure, "n-001"))
    assert [s.decision for s in second.steps] == ["done", "deferred"]  # cordon is immediate, the drain waits
    assert "spacing is 5m" in second.steps[1].reason
    twin.run(200)
    assert [s.decision for s in rem.resume()[0].steps][1] == "deferred"
    twin.run(101)
    assert [s.decision for s in rem.resume()[0].steps] == ["done-earlier", "done", "done"]


def test_max_per_hour(tmp_path: Path) -> None:
    twin = small_twin(nodes=10, job_nodes=0)
    pol = policy(budget={"cluster": "100%"}, rateLimits={"cordon": {"maxPerHour": 2}})
    rem = remediator(twin, tmp_path, pol)
    for k in range(3):
        rem.apply(incident(RootCause.scaleup_link, f"n-{k:03d}", action="NONE", severity=Severity.warning))
    assert len(_unavailable(twin)) == 2
    assert "2 cordon actions in the past hour" in rem.store.audit_entries()[-1].reason


def test_dry_run_changes_nothing_but_logs_everything(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=2)
    rem = remediator(twin, tmp_path)
    before = (twin.gpus.alive.copy(), [n.unschedulable for n in twin.cluster.nodes], twin.cluster.job("job").state)
    report = rem.apply(incident(RootCause.row_remap_failure, "n-000"), dry_run=True)
    assert report.mode == "dry-run" and [s.decision for s in report.steps] == ["would"] * 3
    after = (twin.gpus.alive.copy(), [n.unschedulable for n in twin.cluster.nodes], twin.cluster.job("job").state)
    assert (before[0] == after[0]).all() and before[1:] == after[1:]
    entries = rem.store.audit_entries()
    assert len(entries) == 3 and all(e.dry_run and e.decision == "would" for e in entries)
    assert not (tmp_path / "tickets").exists()
    assert rem.store.step(report.incident, "cordon") is None  # a later real run still does everything
    real = rem.apply(incident(RootCause.row_remap_failure, "n-000"))
    assert [s.decision for s in real.steps] == ["done"] * 3


def test_audit_log_is_append_only_and_durable(state: StateTarget, tmp_path: Path) -> None:
    twin = small_twin(nodes=2, job_nodes=0)
    rem = remediator(twin, tmp_path, db=state.open())
    rem.apply(incident(RootCause.driver_mismatch, "n-000", gpu=None))
    rem.store.db.close()
    db = state.open()  # as another process would
    with pytest.raises(Exception, match="append-only"):
        db.execute("UPDATE audit SET decision = 'done'")
    with pytest.raises(Exception, match="append-only"):
        db.execute("DELETE FROM audit")
    assert [e.step for e in RemediationStore(db).audit_entries()] == ["cordon", "repair"]


def test_limits_resolve_percentages_and_counts() -> None:
    assert resolve_limit("20%", 50) == 10
    assert resolve_limit("10%", 4, at_least=1) == 1
    assert resolve_limit(3, 100) == 3
    with pytest.raises(ValueError):
        policy(budget={"cluster": "120%"})
    with pytest.raises(ValueError):
        policy(budget={"perLeaf": "two"})


# --- the breaker rule on a 2,048-node fleet (bench/remediate_breaker.py's patterns) ---------------------------------

FLEET = 2048


def _first_trip(spec: BreakerSpec, failures: list[tuple[float, str]]) -> int | None:
    """The index of the failure that trips the breaker (each counted, then judged), or None."""
    seen: list[tuple[str, float]] = []
    for k, (t, node) in enumerate(failures):
        seen.append((node, t))
        if breaker_verdict(spec, seen, FLEET, t).trip:
            return k
    return None


def test_a_cooling_cascade_trips_the_wave_rule_within_twenty_minutes() -> None:
    """1% of the nodes a minute for 40 minutes: 10% a window, never the 20% of the first rule."""
    per_minute = FLEET // 100
    failures = [
        (60.0 * m + 60.0 * k / per_minute, f"n{m * per_minute + k}") for m in range(40) for k in range(per_minute)
    ]
    k = _first_trip(BreakerSpec(), failures)
    assert k is not None and failures[k][0] < 1200.0
    assert _first_trip(BreakerSpec(wave_threshold=None), failures) is None


@pytest.mark.parametrize("nodes", [4, 32, 100])
def test_a_local_fault_at_once_is_let_through_by_both_rules(nodes: int) -> None:
    """A rack PDU (4), a leaf switch (32), and up to 5% of the fleet at once: one window, never two."""
    failures = [(0.0, f"n{k}") for k in range(nodes)]
    failures += [(600.0 * h, f"m{h}") for h in range(1, 30)]  # then one independent fault every 10 minutes
    assert _first_trip(BreakerSpec(), failures) is None


def test_the_wave_rule_needs_each_window_and_keeps_the_floor() -> None:
    spec = BreakerSpec()
    wave = resolve_limit("5%", FLEET)  # 102 nodes a window
    earlier = [(f"a{k}", 100.0 + k) for k in range(wave)]
    later = [(f"b{k}", 700.0 + k) for k in range(wave)]
    verdict = breaker_verdict(spec, earlier + later, FLEET, 900.0)
    assert verdict.trip and verdict.wave == (wave, wave) and verdict.wave_threshold == wave
    assert not breaker_verdict(spec, earlier + later[:-1], FLEET, 900.0).trip
    gap = [(node, t + 600.0) for node, t in later]  # the same count, but a window without failures between them
    assert not breaker_verdict(spec, earlier + gap, FLEET, 1500.0).trip
    small = [(f"n{k}", t) for k, t in enumerate((0.0, 100.0, 700.0, 800.0))]  # 2 and 2 of 20: under the floor of 3
    assert breaker_verdict(spec, small, 20, 900.0).wave == (2, 2)
    assert not breaker_verdict(spec, small, 20, 900.0).trip
    assert not breaker_verdict(BreakerSpec(enabled=False), earlier + later, FLEET, 900.0).trip
