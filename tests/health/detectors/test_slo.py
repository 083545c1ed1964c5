"""The SLO detector on hand-built replica reports: cumulative histograms and counts grown a second at a time, as
agents push them. Each objective fires when missed over its window and stays quiet on the near-misses (low traffic
with slow requests, one slow replica among fast ones, a replica restart resetting its counters, inconsistent
buckets, a service that stopped reporting). Objectives are the SLO config's defaults unless a test sets its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from gpufleet.health.detectors.seen import FleetSeen
from gpufleet.health.detectors.slo import JUDGE_EVERY_S, ServiceSloDetector
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.instrument import names
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, HistogramFact, ServiceFact
from gpufleet.telemetry.monitoring.objectives import BURN_WINDOWS, ServiceObjectives, SloConfig

T0 = 1_800_000_000.0
T = load_thresholds()
S = T.application.services
DEFAULTS = SloConfig().defaults
LLAMA = Entity(EntityKind.service, name="llama")


class Replica:
    """One replica's cumulative counts: `serve(n, seconds)` adds n requests that each took `seconds`."""

    def __init__(
        self, service: str = "llama", version: str = "v1", bounds: Sequence[float] = names.REQUEST_DURATION_BUCKETS
    ):
        self.service, self.version, self.bounds = service, version, np.asarray(bounds, dtype=np.float64)
        self.ttft_bounds = np.asarray(names.TIME_TO_FIRST_TOKEN_BUCKETS)
        self.restart()

    def restart(self) -> None:
        self.requests = self.errors = self.count = self.ttft_count = 0.0
        self.counts = np.zeros(self.bounds.size)
        self.ttft = np.zeros(self.ttft_bounds.size)

    def serve(self, n: float, seconds: float, errors: float = 0.0, ttft: float = 0.05) -> None:
        self.requests += n
        self.errors += errors
        self.counts += n * (self.bounds >= seconds)
        self.count += n
        self.ttft += n * (self.ttft_bounds >= ttft)
        self.ttft_count += n

    def fact(self) -> ServiceFact:
        return ServiceFact(
            service=self.service,
            version=self.version,
            requests=int(self.requests),
            errors=int(self.errors),
            latency=HistogramFact(self.bounds.tolist(), self.counts.tolist(), self.count),
            ttft=HistogramFact(self.ttft_bounds.tolist(), self.ttft.tolist(), self.ttft_count),
            queue_depth=2.0,
        )


Traffic = Callable[[int, str, Replica], None]  # (second, node, replica): what it served that second


class Fleet:
    """Replicas that report every second from T0 on (their first report, before any traffic, is at T0)."""

    def __init__(self, config: SloConfig | None = None, thresholds: Thresholds = T, **replicas: Replica) -> None:
        self.detector = ServiceSloDetector(config or SloConfig(), thresholds)
        self.replicas = replicas or {"n0": Replica()}
        self.t = 0
        assert self.judge(T0, [(n, r.fact()) for n, r in self.replicas.items()]) == []

    def judge(self, now: float, facts: list[tuple[str, ServiceFact]]) -> list[Finding]:
        return self.detector.detect(now, FleetSeen(services=lambda: facts))

    def run(self, seconds: int, traffic: Traffic, reporting: Sequence[str] | None = None) -> list[list[Finding]]:
        """A second at a time: every replica serves, those `reporting` report (all by default); the findings of
        each judgement (every JUDGE_EVERY_S)."""
        out = []
        for _ in range(seconds):
            self.t += 1
            for node, replica in self.replicas.items():
                traffic(self.t, node, replica)
            facts = [(n, r.fact()) for n, r in self.replicas.items() if reporting is None or n in reporting]
            found = self.judge(T0 + self.t, facts)
            if self.detector.judged_at == T0 + self.t:
                out.append(found)
            else:
                assert found == []
        return out


def causes(findings: list[Finding]) -> list[RootCause]:
    return sorted(f.cause for f in findings)


def steady(fast: float, slow: float = 0.0, slow_s: float = 2.5, errors: float = 0.0) -> Traffic:
    """Per second: `fast` requests of 50 ms and `slow` of `slow_s`, `errors` of them failed."""

    def serve(t: int, node: str, r: Replica) -> None:
        r.serve(fast, 0.05, errors)
        if slow:
            r.serve(slow, slow_s)

    return serve


def test_the_documented_defaults() -> None:
    o = DEFAULTS
    assert (o.p99_s, o.p95_s, o.ttft_s, o.ttft_quantile) == (2.0, 0.5, 0.3, 0.95)
    assert (o.error_ratio, o.availability, o.latency_window_s, o.availability_window_s) == (0.001, 0.999, 300, 3600)
    assert (S.stale_s, S.min_requests, S.latency_needs_both) == (60, 20, True)


# -- latency ------------------------------------------------------------------------------------------------------


def test_p99_over_2s_and_p95_over_500ms_over_5_minutes_is_a_latency_breach() -> None:
    fleet = Fleet()
    found = fleet.run(300, steady(94, 6))[-1]  # 6 % at 2.5 s: p95 2.17 s, p99 2.83 s
    assert causes(found) == [RootCause.slo_latency]
    (f,) = found
    assert (f.entity, f.severity, f.source) == (LLAMA, Severity.warning, "service")
    assert f.summary == "service llama v1 is slow: p99 2.83 s, p95 2.17 s"
    assert f.evidence == "p99 2.83 s > 2 s and p95 2.17 s > 0.5 s over 5 min, 30,000 requests"
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.breaches == (RootCause.slo_latency,)
    assert status.p99_s == pytest.approx(2 + 0.05 / 0.06) and status.p95_s == pytest.approx(2 + 0.01 / 0.06)


@pytest.mark.parametrize(
    ("fast", "slow", "slow_s", "why"),
    [(98.5, 1.5, 2.5, "only p99 over"), (94, 6, 0.75, "only p95 over"), (100, 0, 0.0, "fast")],
)
def test_latency_needs_both_percentiles_over(fast: float, slow: float, slow_s: float, why: str) -> None:
    found = Fleet().run(300, steady(fast, slow, slow_s))
    assert [f for f in found if f] == [], why


def test_latency_with_either_percentile_over_when_configured(tmp_path: Path) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text("application:\n  services: {latency_needs_both: false}\n")
    found = Fleet(thresholds=load_thresholds(path)).run(300, steady(98.5, 1.5))[-1]
    assert causes(found) == [RootCause.slo_latency]
    assert found[0].evidence.startswith("p99 2.33 s > 2 s and p95 0.0491 s <= 0.5 s")


def test_low_traffic_with_slow_requests_is_said_not_alerted() -> None:
    fleet = Fleet()
    slow_and_rare: Traffic = lambda t, node, r: r.serve(1, 5.0, errors=1) if t % 20 == 0 else None  # noqa: E731
    assert [f for f in fleet.run(600, slow_and_rare) if f] == []
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.p99_s is None and status.error_ratio is None and status.breaches == ()
    assert status.note.startswith("too little traffic: 15 requests in 5 min (at least 30 to judge)")


def test_the_inf_bucket_quantile_is_the_highest_finite_bound() -> None:
    fleet = Fleet()
    found = fleet.run(300, lambda t, node, r: r.serve(10, 100.0))[-1]
    assert causes(found) == [RootCause.slo_latency]
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.p99_s == status.p95_s == names.REQUEST_DURATION_BUCKETS[-1]


def test_two_replicas_are_summed_one_slow_replica_with_little_traffic_does_not_breach() -> None:
    fast_and_slow: Traffic = lambda t, node, r: r.serve(100, 0.05) if node == "n0" else r.serve(1, 2.5)  # noqa: E731
    fleet = Fleet(n0=Replica(), n1=Replica())
    assert [f for f in fleet.run(300, fast_and_slow) if f] == []  # 1 % of requests slow: p99 just within
    heavy: Traffic = lambda t, node, r: r.serve(100, 0.05) if node == "n0" else r.serve(10, 2.5)  # noqa: E731
    fleet = Fleet(n0=Replica(), n1=Replica())
    assert causes(fleet.run(300, heavy)[-1]) == [RootCause.slo_latency]
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.replicas == 2 and status.queue_depth == 4.0


def test_a_replica_restart_counts_its_new_values_as_the_increase() -> None:
    fleet = Fleet(n0=Replica(), n1=Replica())
    fleet.run(600, steady(10))
    fleet.replicas["n1"].restart()  # its counters begin again; the next second it serves 10 more
    found = fleet.run(300, steady(10))
    assert [f for f in found if f] == []
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.requests == status.latency_requests == 2 * 10 * 300
    assert status.error_ratio == 0.0 and status.p99_s is not None and status.p99_s <= 0.05


def test_slow_requests_after_a_restart_are_judged() -> None:
    fleet = Fleet()
    fleet.run(600, steady(100))
    fleet.replicas["n0"].restart()
    assert causes(fleet.run(300, steady(90, 10))[-1]) == [RootCause.slo_latency]


def test_a_replica_with_other_buckets_is_left_out_of_the_percentiles_and_said() -> None:
    other = Replica(bounds=(0.1, 1.0, 10.0))
    fleet = Fleet(n0=Replica(), n1=Replica(), n2=other)
    found = fleet.run(300, lambda t, node, r: r.serve(10, 0.05) if node != "n2" else r.serve(50, 5.0))
    assert [f for f in found if f] == []  # n2's slow requests are not read with the others' buckets
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.latency_requests == 2 * 10 * 300 and status.requests == 70 * 300
    assert any("n2: latency buckets differ" in p for p in status.problems)


def test_buckets_that_change_start_the_replicas_window_again() -> None:
    fleet = Fleet()
    fleet.run(100, steady(10))
    fleet.replicas["n0"] = Replica(bounds=(0.1, 1.0, 10.0))
    fleet.run(100, steady(10))
    status = fleet.detector.status("llama", "v1")
    # counted from its first report with the new bounds (the first judgement after the change), not across it
    assert status is not None and status.latency_requests == 10 * (200 - 105)
    assert any("latency buckets changed (16 -> 3 bounds)" in p for p in status.problems)


# -- time to first token, errors, availability --------------------------------------------------------------------


@pytest.mark.parametrize(("ttft", "expect"), [(0.5, True), (0.3, False)])
def test_time_to_first_token_over_its_objective(ttft: float, expect: bool) -> None:
    fleet = Fleet()
    found = fleet.run(300, lambda t, node, r: r.serve(10, 0.05, ttft=ttft))[-1]
    assert causes(found) == ([RootCause.slo_ttft] if expect else [])
    if expect:
        assert found[0].evidence == "time to first token p95 0.49 s > 0.3 s over 5 min, 3,000 requests"


@pytest.mark.parametrize(("errors", "expect"), [(0.5, True), (0.1, False)])  # of 100 a second: 0.5 % and 0.1 %
def test_errors_over_their_ratio_over_5_minutes(errors: float, expect: bool) -> None:
    fleet = Fleet()
    fleet.run(3300, steady(100))
    found = fleet.run(300, steady(100, errors=errors))[-1]
    assert causes(found) == ([RootCause.slo_errors] if expect else [])
    if expect:  # an hour at 0.04 %: the fast burn does not fire, a warning
        assert found[0].severity is Severity.warning
        assert found[0].evidence.startswith("error ratio 0.50% > 0.10% over 5 min (150 of 30,000 requests)")


def test_an_hour_of_errors_misses_availability_and_burns_the_budget_fast() -> None:
    fleet = Fleet()
    found = fleet.run(3600, steady(100, errors=2))[-1]  # 2 % failed
    assert causes(found) == [RootCause.slo_availability, RootCause.slo_errors]
    assert {f.cause: f.severity for f in found} == {
        RootCause.slo_errors: Severity.critical,  # 20 times the budget over the hour and 5 minutes
        RootCause.slo_availability: Severity.critical,
    }
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.availability == pytest.approx(0.98, abs=1e-3)
    fast, slow = status.burn
    assert [(b.long_s, b.short_s) for b in status.burn] == [(w.long_s, w.short_s) for w in BURN_WINDOWS]  # the rules'
    assert (fast.threshold, slow.threshold) == (pytest.approx(14.4), pytest.approx(6.0))
    assert fast.firing and slow.firing and fast.long == pytest.approx(20.0, rel=1e-3)


def test_availability_within_its_objective_is_quiet() -> None:
    fleet = Fleet()
    # one failure in 2,000 over the hour (0.05 %), none in the last 5 minutes
    found = fleet.run(3600, lambda t, node, r: r.serve(100, 0.05, errors=1.0 if t % 20 == 0 and t < 3000 else 0))
    assert [f for f in found if f] == []
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.availability is not None and status.availability > DEFAULTS.availability


def test_each_service_against_its_own_objectives() -> None:
    config = SloConfig(services=[ServiceObjectives(model="chat", p99_s=5.0, p95_s=3.0)])
    fleet = Fleet(config, n0=Replica(), n1=Replica(service="chat"))
    found = fleet.run(300, steady(94, 6))[-1]
    assert [(f.cause, f.entity.name) for f in found] == [(RootCause.slo_latency, "llama")]


# -- stale services -----------------------------------------------------------------------------------------------


def test_a_service_whose_replicas_stopped_reporting_is_stale_not_idle() -> None:
    fleet = Fleet()
    fleet.run(300, steady(94, 6))
    silent = fleet.run(int(S.stale_s + JUDGE_EVERY_S), steady(94, 6), reporting=[])
    assert all(causes(found) == [RootCause.slo_latency] for found in silent[:-1])  # its last 5 minutes, until stale
    (f,) = silent[-1]
    assert (f.cause, f.entity, f.severity) == (RootCause.service_stale, LLAMA, Severity.warning)
    assert "reported for 65 s (over 60 s)" in f.evidence
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.stale and status.availability is None and status.p99_s is None
    assert status.requests == 0.0 and status.breaches == ()


def test_a_replica_that_stopped_while_others_report_is_said_not_stale() -> None:
    fleet = Fleet(n0=Replica(), n1=Replica())
    fleet.run(100, steady(10))
    found = fleet.run(300, steady(10), reporting=["n0"])
    assert [f for f in found if f] == []
    status = fleet.detector.status("llama", "v1")
    assert status is not None and status.note.startswith("1 of 2 replicas not reporting (n1)")


def test_a_finished_rollout_is_not_stale_and_a_forgotten_service_is_quiet() -> None:
    fleet = Fleet(n0=Replica(version="v1"), n1=Replica(version="v2"))
    fleet.run(60, steady(10))
    found = fleet.run(int(S.forget_after_s + JUDGE_EVERY_S), steady(10), reporting=["n1"])  # v1 is gone
    assert [f for f in found if f] == []
    assert fleet.detector.status("llama", "v1") is None  # forgotten after an hour
    v2 = fleet.detector.status("llama", "v2")
    assert v2 is not None and not v2.stale
    silent = fleet.run(int(S.forget_after_s + JUDGE_EVERY_S), steady(10), reporting=[])
    stale_from = int(S.stale_s / JUDGE_EVERY_S)  # the first judgement more than stale_s after the last report
    assert silent[stale_from - 1] == [] and causes(silent[stale_from]) == [RootCause.service_stale]
    assert silent[-1] == [] and fleet.detector.statuses() == []
