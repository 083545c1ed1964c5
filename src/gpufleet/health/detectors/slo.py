"""Inference SLOs, judged in the control plane over its own windows, from every replica's cumulative counts
(requests, errors, the request-duration and time-to-first-token histograms) summed across the nodes serving it.

Each replica's counts are kept as running totals that only grow, the way `rate()` reads a counter: a count that went
down means the replica restarted, and its new value is the increase. A window's increase is the newest total minus
the total at the window's start (interpolated between the points kept around it). Since the counts are cumulative,
reading them every few seconds loses nothing: reports are read, and services judged, every `JUDGE_EVERY_S`.
Percentiles are `histogram_quantile` over the summed window histogram; a replica
whose buckets differ from the others' is left out of them (said, never a crash).

A service is judged against its objectives (`SloConfig.for_service`): latency (p99 and p95), time to first token,
the error ratio over the latency window, availability over the hour; the SRE workbook's multi-window burn rates are
computed for its status, over the windows the SLO rules alert on (`BURN_WINDOWS` of monitoring/objectives.py). Too
little traffic for a percentile or a ratio is said in its status, never alerted. A service none of whose replicas
reported for a while is stale: a finding, and its last numbers are not taken for idleness or for perfect
availability.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpufleet.health.detectors.base import FleetSetup, fleet_detector
from gpufleet.health.detectors.seen import FleetSeen
from gpufleet.health.thresholds import ServiceChecks, Thresholds, load_thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, HistogramFact, ServiceFact
from gpufleet.telemetry.monitoring.objectives import BURN_WINDOWS, Objectives, ServiceObjectives, SloConfig
from gpufleet.telemetry.quantile import histogram_quantile

SOURCE = "service"
LATENCY_QUANTILES = (0.5, 0.95, 0.99)
JUDGE_EVERY_S = 5.0
REPLICA_EVENTS = 8


@dataclass(frozen=True, slots=True)
class BurnRate:
    long_s: float
    short_s: float
    threshold: float  # the burn rate both windows must exceed
    long: float | None  # error ratio over the window / the error budget; None with too little traffic
    short: float | None

    @property
    def firing(self) -> bool:
        return self.long is not None and self.short is not None and min(self.long, self.short) > self.threshold


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """A service (one version of it) as the SLO detector last judged it; None where there was nothing to say."""

    service: str
    version: str
    time: float
    objectives: Objectives
    replicas: int  # replicas reporting
    stale: bool = False
    window_s: float = 0.0  # what the latency window's numbers span (less than the window while history builds)
    requests: float = 0.0  # in the latency window
    errors: float = 0.0
    latency_requests: float = 0.0  # those the percentiles are over (replicas with the common buckets)
    ttft_requests: float = 0.0
    availability_requests: float = 0.0  # in the availability window
    availability_errors: float = 0.0
    p50_s: float | None = None
    p95_s: float | None = None
    p99_s: float | None = None
    ttft_s: float | None = None  # at the objectives' TTFT quantile
    error_ratio: float | None = None
    availability: float | None = None  # over the availability window
    burn: tuple[BurnRate, ...] = ()
    queue_depth: float | None = None  # summed over the reporting replicas
    breaches: tuple[RootCause, ...] = ()
    note: str = ""
    problems: tuple[str, ...] = ()


class _Series:
    """One cumulative vector of a replica (its request and error counts, or a histogram's buckets and count) as
    running totals that only grow, a point kept every `resolution_s`."""

    def __init__(self, resolution_s: float) -> None:
        self.resolution_s = resolution_s
        self.times: deque[float] = deque()
        self.totals: deque[np.ndarray] = deque()
        self.raw: np.ndarray | None = None

    def went_down(self, raw: np.ndarray) -> bool:
        return self.raw is not None and bool((raw < self.raw).any())

    def push(self, now: float, raw: np.ndarray, restarted: bool, keep_s: float) -> None:
        if self.raw is None or not self.totals:
            total = np.zeros_like(raw)  # the first report is the baseline, not traffic
        else:
            total = self.totals[-1] + (raw if restarted else raw - self.raw)
        self.raw = raw
        if len(self.times) >= 2 and self.times[-1] - self.times[-2] < self.resolution_s:
            self.times[-1], self.totals[-1] = now, total  # the newest point moves until it is a resolution old
        else:
            self.times.append(now)
            self.totals.append(total)
        while len(self.times) >= 2 and self.times[1] <= now - keep_s:
            self.times.popleft()
            self.totals.popleft()

    def increase(self, now: float, window_s: float) -> tuple[np.ndarray, float] | None:
        """Growth since the window's start, and the time that spans. The total at the start is interpolated
        between the points around it (they are a resolution apart); before the first point, growth counts from it."""
        if not self.times:
            return None
        start = now - window_s
        i = bisect_right(self.times, start) - 1
        if i < 0:
            return self.totals[-1] - self.totals[0], self.times[-1] - self.times[0]
        base = self.totals[i]
        if i + 1 < len(self.times):
            share = (start - self.times[i]) / (self.times[i + 1] - self.times[i])
            base = base + share * (self.totals[i + 1] - base)
        return self.totals[-1] - base, max(self.times[-1] - start, 0.0)


@dataclass(slots=True)
class _Histogram:
    bounds: tuple[float, ...]
    series: _Series  # the buckets' counts, then the count (the +Inf bucket)


@dataclass(slots=True)
class _Replica:
    node: str
    seen: float
    counts: _Series  # requests, errors
    latency: _Histogram | None = None
    ttft: _Histogram | None = None
    queue_depth: float | None = None
    reported: tuple[str, ...] = ()  # what the agent said was wrong with its series
    events: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=REPLICA_EVENTS))

    def update(self, now: float, fact: ServiceFact, o: Objectives, checks: ServiceChecks) -> None:
        self.seen, self.queue_depth, self.reported = now, fact.queue_depth, tuple(fact.problems)
        vectors: dict[str, np.ndarray] = {}
        for name, hist in (("latency", fact.latency), ("ttft", fact.ttft)):
            if hist is None:
                continue
            why = _unreadable(hist)
            if why:
                self._event(now, f"{name} histogram {why}; skipped")
                continue
            bounds, old = tuple(hist.bounds), getattr(self, name)
            if old is None or old.bounds != bounds:
                if old is not None:
                    self._event(now, f"{name} buckets changed ({len(old.bounds)} -> {len(bounds)} bounds); its "
                                "window starts again")  # fmt: skip
                setattr(self, name, _Histogram(bounds, _Series(checks.resolution_s)))
            vectors[name] = np.array([*hist.counts, hist.count], dtype=np.float64)
        counts = np.array([fact.requests, fact.errors], dtype=np.float64)
        # a restart clears all of a replica's counters; any of them going down says so
        restarted = self.counts.went_down(counts) or any(
            getattr(self, name).series.went_down(vector) for name, vector in vectors.items()
        )
        keep = max(*(w.long_s for w in BURN_WINDOWS), o.availability_window_s, o.latency_window_s) + checks.resolution_s
        self.counts.push(now, counts, restarted, keep)
        for name, vector in vectors.items():
            getattr(self, name).series.push(now, vector, restarted, o.latency_window_s + checks.resolution_s)

    def _event(self, now: float, text: str) -> None:
        if not self.events or self.events[-1][1] != text:
            self.events.append((now, f"{self.node}: {text}"))


def _unreadable(hist: HistogramFact) -> str:
    bounds, counts = np.asarray(hist.bounds, dtype=np.float64), np.asarray(hist.counts, dtype=np.float64)
    if bounds.size == 0 or not np.isfinite(bounds).all() or (np.diff(bounds) <= 0).any():
        return "bounds are not finite and ascending"
    if not np.isfinite(counts).all() or (np.diff(counts) < 0).any() or hist.count < counts[-1]:
        return "counts are not cumulative"
    return ""


@dataclass(slots=True)
class _Group:
    """A service's replicas of one version, keyed by node."""

    service: str
    version: str
    replicas: dict[str, _Replica] = field(default_factory=dict)


@dataclass(slots=True)
class _Window:
    """A histogram summed over the replicas for one window."""

    bounds: tuple[float, ...] = ()
    cumulative: np.ndarray = field(default_factory=lambda: np.empty(0))
    count: float = 0.0

    def quantile(self, q: float) -> float:
        return histogram_quantile(q, self.bounds, self.cumulative, self.count)


@fleet_detector("slo", needs=("services",))
class ServiceSloDetector:
    """The inference services' SLOs, from what every node reports of the replicas it serves."""

    def __init__(self, config: SloConfig, thresholds: Thresholds | None = None, every_s: float = JUDGE_EVERY_S) -> None:
        self.config = config
        self.checks = (thresholds or load_thresholds()).application.services
        self.every_s = every_s
        self.judged_at = -np.inf  # when the reports were last read and the services judged
        self.groups: dict[tuple[str, str], _Group] = {}
        self._status: dict[tuple[str, str], ServiceStatus] = {}
        self._objectives: dict[tuple[str, str], Objectives] = {}
        self._config_seen: SloConfig | None = None

    @classmethod
    def build(cls, setup: FleetSetup) -> ServiceSloDetector:
        return cls(setup.slo, setup.thresholds)

    def detect(self, now: float, seen: FleetSeen) -> list[Finding]:
        """Every replica's latest report, read each call: the objectives services declare, then (at most every
        `every_s`) every service judged."""
        if seen.services is None:
            return []
        replicas = seen.services()
        self._declared_objectives(replicas)
        return self._observe(now, replicas)

    def _declared_objectives(self, replicas: Sequence[tuple[str, ServiceFact]]) -> None:
        """A service that declares its own p99 objective is judged by it, unless the operator's SLO config names
        the service (the operator's word wins; the config's defaults do not)."""
        config = self.config
        named = {s.model for s in config.services}
        declared: dict[str, float] = {}
        for _, fact in replicas:
            if fact.slo_p99_s is not None and fact.service not in named:
                declared[fact.service] = min(fact.slo_p99_s, declared.get(fact.service, fact.slo_p99_s))
        if declared:
            own = [ServiceObjectives(model=name, p99_s=p99) for name, p99 in sorted(declared.items())]
            self.config = config.model_copy(update={"services": [*config.services, *own]})

    def status(self, service: str, version: str = "") -> ServiceStatus | None:
        return self._status.get((service, version))

    def statuses(self) -> list[ServiceStatus]:
        return [self._status[key] for key in sorted(self._status)]

    def objectives(self, service: str, version: str) -> Objectives:
        if self._config_seen is not self.config:
            self._objectives, self._config_seen = {}, self.config
        key = (service, version)
        if key not in self._objectives:
            self._objectives[key] = self.config.for_service(service, version)
        return self._objectives[key]

    def _observe(self, now: float, facts: Sequence[tuple[str, ServiceFact]]) -> list[Finding]:
        """Take every replica's latest report ((node, fact) pairs) and judge every service, at most every
        `every_s` (a call in between returns nothing and reads nothing)."""
        if now - self.judged_at < self.every_s:
            return []
        self.judged_at = now
        taken: Counter[tuple[str, str, str]] = Counter()
        for node, fact in facts:
            taken[(fact.service, fact.version, node)] += 1
            n = taken[(fact.service, fact.version, node)]
            key = node if n == 1 else f"{node}#{n}"  # two replicas of one version on one node
            group = self.groups.setdefault((fact.service, fact.version), _Group(fact.service, fact.version))
            replica = group.replicas.get(key)
            if replica is None:
                replica = group.replicas[key] = _Replica(key, now, _Series(self.checks.resolution_s))
            replica.update(now, fact, self.objectives(fact.service, fact.version), self.checks)
        self._forget(now)
        by_service: dict[str, list[_Group]] = {}
        for group in self.groups.values():
            by_service.setdefault(group.service, []).append(group)
        out: list[Finding] = []
        for service, groups in by_service.items():
            last = max(r.seen for g in groups for r in g.replicas.values())
            if now - last > self.checks.stale_s:
                out.append(self._stale(now, service, groups, last))
                continue
            for group in groups:
                out += self._judge(now, group)
        return out

    def _forget(self, now: float) -> None:
        for key, group in list(self.groups.items()):
            for name in [n for n, r in group.replicas.items() if now - r.seen > self.checks.forget_after_s]:
                del group.replicas[name]
            if not group.replicas:
                del self.groups[key]
                self._status.pop(key, None)

    def _stale(self, now: float, service: str, groups: list[_Group], last: float) -> Finding:
        silent = now - last
        note = f"stale: no replica reported for {silent:.0f} s; its last numbers are not judged"
        for g in groups:
            o = self.objectives(g.service, g.version)
            self._status[(g.service, g.version)] = ServiceStatus(g.service, g.version, now, o, 0, stale=True, note=note)
        nodes = sorted({r.node.split("#")[0] for g in groups for r in g.replicas.values()})
        return Finding(
            now,
            RootCause.service_stale,
            Entity(EntityKind.service, name=service),
            Severity.warning,
            f"service {service} stopped reporting",
            f"no replica of {service} (last on {', '.join(nodes)}) reported for {silent:.0f} s (over "
            f"{self.checks.stale_s:g} s); its traffic and availability are unknown, not idle",
            SOURCE,
        )

    def _need(self, o: Objectives, window_s: float) -> float:
        return max(o.min_requests_per_s * window_s, self.checks.min_requests)

    def _judge(self, now: float, g: _Group) -> list[Finding]:
        o, checks = self.objectives(g.service, g.version), self.checks
        fresh = [r for r in g.replicas.values() if now - r.seen <= checks.stale_s]
        if not fresh:  # this version stopped reporting while others go on: a finished rollout, not a stale service
            self._status[(g.service, g.version)] = ServiceStatus(
                g.service, g.version, now, o, 0, stale=True, note="this version's replicas stopped reporting"
            )
            return []
        problems: list[str] = []
        notes: list[str] = []
        if len(fresh) < len(g.replicas):
            quiet = sorted(r.node for r in g.replicas.values() if r not in fresh)
            notes.append(f"{len(quiet)} of {len(g.replicas)} replicas not reporting ({', '.join(quiet)})")
        lw = o.latency_window_s
        requests, errors, span = self._counts(g, now, lw)
        latency = self._window(g, now, lw, "latency", problems)
        ttft = self._window(g, now, lw, "ttft", problems)
        p50 = p95 = p99 = ttft_q = ratio = availability = None
        need = self._need(o, lw)
        if latency.count >= need:
            p50, p95, p99 = (latency.quantile(q) for q in LATENCY_QUANTILES)
        if ttft.count >= need:
            ttft_q = ttft.quantile(o.ttft_quantile)
        if requests >= need:
            ratio = min(errors / requests, 1.0)
        if max(latency.count, requests) < need:
            notes.append(f"too little traffic: {max(latency.count, requests):,.0f} requests in {_duration(lw)} (at "
                         f"least {need:,.0f} to judge)")  # fmt: skip
        hour_requests, hour_errors, _ = self._counts(g, now, o.availability_window_s)
        hour_need = self._need(o, o.availability_window_s)
        if hour_requests >= hour_need:
            availability = 1.0 - min(hour_errors / hour_requests, 1.0)
        elif requests >= need:
            notes.append(f"too little traffic for availability: {hour_requests:,.0f} requests in "
                         f"{_duration(o.availability_window_s)} (at least {hour_need:,.0f})")  # fmt: skip
        for r in g.replicas.values():
            problems += [f"{r.node}: {p}" for p in r.reported]
            problems += [text for at, text in r.events if now - at <= lw]
        depths = [r.queue_depth for r in fresh if r.queue_depth is not None]
        status = ServiceStatus(
            g.service,
            g.version,
            now,
            o,
            len(fresh),
            window_s=span,
            requests=requests,
            errors=errors,
            latency_requests=latency.count,
            ttft_requests=ttft.count,
            availability_requests=hour_requests,
            availability_errors=hour_errors,
            p50_s=p50,
            p95_s=p95,
            p99_s=p99,
            ttft_s=ttft_q,
            error_ratio=ratio,
            availability=availability,
            burn=self._burn(g, now, o),
            queue_depth=sum(depths) if depths else None,
            note="; ".join(notes),
            problems=tuple(problems),
        )
        findings = _breaches(status, checks.latency_needs_both)
        self._status[(g.service, g.version)] = replace(status, breaches=tuple(f.cause for f in findings))
        return findings

    def _counts(self, g: _Group, now: float, window_s: float) -> tuple[float, float, float]:
        """Requests and errors over the window, summed over the replicas, and the longest span they cover."""
        requests = errors = span = 0.0
        for r in g.replicas.values():
            grown = r.counts.increase(now, window_s)
            if grown is not None:
                requests, errors, span = requests + grown[0][0], errors + grown[0][1], max(span, grown[1])
        return requests, errors, span

    def _window(self, g: _Group, now: float, window_s: float, name: str, problems: list[str]) -> _Window:
        """The replicas' histograms over the window, summed; those whose buckets differ from the most replicas'
        are left out, and said."""
        parts: list[tuple[str, tuple[float, ...], np.ndarray]] = []
        for r in g.replicas.values():
            hist: _Histogram | None = getattr(r, name)
            grown = hist.series.increase(now, window_s) if hist is not None else None
            if hist is not None and grown is not None and grown[0][-1] > 0:
                parts.append((r.node, hist.bounds, grown[0]))
        if not parts:
            return _Window()
        votes: dict[tuple[float, ...], tuple[int, float]] = {}  # replicas using the bounds, and their requests
        for _, own, vector in parts:
            n, seen = votes.get(own, (0, 0.0))
            votes[own] = (n + 1, seen + float(vector[-1]))
        bounds = max(votes, key=lambda b: votes[b])
        total = np.zeros(len(bounds) + 1)
        for node, own, vector in parts:
            if own == bounds:
                total += vector
            else:
                problems.append(f"{node}: {name} buckets differ from the other replicas' ({len(own)} bounds, not "
                                f"{len(bounds)}); left out of the percentiles")  # fmt: skip
        return _Window(bounds, total[:-1], float(total[-1]))

    def _burn(self, g: _Group, now: float, o: Objectives) -> tuple[BurnRate, ...]:
        budget = 1.0 - o.availability if o.availability is not None else o.error_ratio
        if budget is None:
            return ()
        out = []
        for burn in BURN_WINDOWS:  # the windows the SLO rules alert on (monitoring/objectives.py)
            rates: list[float | None] = []
            for window in (burn.long_s, burn.short_s):
                requests, errors, _ = self._counts(g, now, window)
                rates.append(errors / requests / budget if requests >= self._need(o, window) else None)
            threshold = burn.threshold(o.budget_window_days)
            out.append(BurnRate(burn.long_s, burn.short_s, threshold, rates[0], rates[1]))
        return tuple(out)


def _breaches(s: ServiceStatus, needs_both: bool) -> list[Finding]:
    """The objectives a judged service misses, as findings."""
    o, out = s.objectives, []
    label = f"{s.service} {s.version}" if s.version else s.service
    over = _over(s.window_s, o.latency_window_s)

    def add(cause: RootCause, severity: Severity, summary: str, evidence: str) -> None:
        entity = Entity(EntityKind.service, name=s.service)
        out.append(Finding(s.time, cause, entity, severity, f"service {label} {summary}", evidence, SOURCE))

    pairs = (("p99", s.p99_s, o.p99_s), ("p95", s.p95_s, o.p95_s))
    judged = [
        (name, value, objective) for name, value, objective in pairs if objective is not None and value is not None
    ]
    missed = [value > objective for _, value, objective in judged]
    if judged and (all(missed) if needs_both else any(missed)):
        parts = [
            f"{name} {value:.3g} s {'>' if value > objective else '<='} {objective:g} s"
            for name, value, objective in judged
        ]
        slow = [f"{name} {value:.3g} s" for name, value, objective in judged if value > objective]
        add(
            RootCause.slo_latency,
            Severity.warning,
            f"is slow: {', '.join(slow)}",
            f"{' and '.join(parts)} {over}, {s.latency_requests:,.0f} requests",
        )
    if o.ttft_s is not None and s.ttft_s is not None and s.ttft_s > o.ttft_s:
        q = f"p{o.ttft_quantile * 100:g}"
        add(
            RootCause.slo_ttft,
            Severity.warning,
            f"is slow to its first token: {q} {s.ttft_s:.3g} s",
            f"time to first token {q} {s.ttft_s:.3g} s > {o.ttft_s:g} s {over}, {s.ttft_requests:,.0f} requests",
        )
    if o.error_ratio is not None and s.error_ratio is not None and s.error_ratio > o.error_ratio:
        fast, rates = (s.burn[0] if s.burn else None), ""
        if fast is not None and fast.long is not None and fast.short is not None:
            rates = (
                f"; burn rate {fast.long:.3g} ({_duration(fast.long_s)}) and {fast.short:.3g} "
                f"({_duration(fast.short_s)}) against {fast.threshold:.3g}"
            )
        add(
            RootCause.slo_errors,
            Severity.critical if fast is not None and fast.firing else Severity.warning,
            f"fails {s.error_ratio:.2%} of its requests",
            f"error ratio {s.error_ratio:.2%} > {o.error_ratio:.2%} {over} ({s.errors:,.0f} of {s.requests:,.0f} "
            f"requests){rates}",
        )
    if o.availability is not None and s.availability is not None and s.availability < o.availability:
        add(
            RootCause.slo_availability,
            Severity.critical,
            f"is {s.availability:.2%} available",
            f"availability {s.availability:.3%} < {o.availability:.3%} over {_duration(o.availability_window_s)} "
            f"({s.availability_errors:,.0f} of {s.availability_requests:,.0f} requests failed)",
        )
    return out


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:.0f} s"


def _over(span: float, window_s: float) -> str:
    """The window the numbers cover: the whole of it, or what history there is yet."""
    return (
        f"over {_duration(window_s)}"
        if span >= 0.9 * window_s
        else f"over the last {span:.0f} s (of {_duration(window_s)})"
    )
