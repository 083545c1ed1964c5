"""The nodes' clocks compared: each push's clock report (`Batch.clock`) and its send stamp against the control
plane's receive time, judged per job by health/clock_skew.py. A job's skew and a node's unsynchronised clock are
findings like any other (incidents, the API's and CLI's incident lists), filed when they begin and again every
`control.finding_repeat_s` while they last, so the incident resolves on its own once the clocks agree again
(`control.resolve_after_s`).

The receive-time part keeps, per node, sent - received for the last RECENT pushes. Each is the node's clock minus
this plane's, less that push's one-way delay, so the greatest of them (the least of received - sent) is the clock
difference less the smallest one-way delay among them (see health/clock_skew.py for what that can
and cannot tell). A new agent stream (a restarted agent) starts the window afresh."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpufleet.health.clock_skew import NodeClock, job_skew, unsynchronised
from gpufleet.health.detectors.seen import JobView
from gpufleet.health.thresholds import Clock
from gpufleet.model.observe import Batch, ClockFact, Finding

RECENT = 30  # pushes per node the receive-time bound is taken over
STALE_S = 300.0  # a clock report older than this (by the plane's clock) is not compared


@dataclass(slots=True)
class _Node:
    fact: ClockFact | None = None
    heard: float = 0.0  # this plane's time when the fact came
    incarnation: str = ""
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))


class ClockComparison:
    def __init__(self, limits: Clock, repeat_s: float) -> None:
        self.limits, self.repeat_s = limits, repeat_s
        self.nodes: dict[str, _Node] = {}
        self._filed: dict[str, float] = {}  # finding key -> when it was last filed

    def reported(self, batch: Batch, now: float) -> None:
        """A push's clock report (from this replica's ingest or another's, through the feed)."""
        if batch.clock is not None:
            node = self.nodes.setdefault(batch.node, _Node())
            node.fact, node.heard = batch.clock, now

    def received(self, batch: Batch, received: float) -> None:
        """A push this replica took itself: its send stamp against `received`, this plane's clock when it came."""
        node = self.nodes.setdefault(batch.node, _Node())
        if node.incarnation != batch.incarnation:
            node.incarnation = batch.incarnation
            node.gaps.clear()
        node.gaps.append(batch.sent - received)

    def heard(self, batch: Batch, received: float) -> None:
        """Both, for a push taken here."""
        self.reported(batch, received)
        self.received(batch, received)

    def clock(self, name: str, now: float) -> NodeClock:
        node = self.nodes.get(name)
        if node is None:
            return NodeClock(name)
        fact = node.fact if node.fact is not None and now - node.heard <= STALE_S else None
        return NodeClock(
            name,
            source=fact.source if fact else "",
            synchronised=fact.synchronised if fact else None,
            offset_s=fact.offset_s if fact else None,
            error_s=fact.error_s if fact else None,
            received_s=max(node.gaps) if node.gaps else None,
        )

    def view(self, now: float) -> list[dict[str, object]]:
        """Every node's clock as compared: for the API."""
        return [
            {"node": c.node, "source": c.source, "synchronised": c.synchronised, "offset_s": c.offset_s,
             "error_s": c.error_s, "sent_minus_received_s": c.received_s}
            for c in (self.clock(name, now) for name in sorted(self.nodes))
        ]  # fmt: skip

    def findings(self, now: float, jobs: list[JobView]) -> list[Finding]:
        """Skewed jobs and unsynchronised nodes, each filed when it begins and every `repeat_s` while it lasts."""
        out: list[Finding] = []
        for name, node in self.nodes.items():
            if node.fact is not None and node.fact.synchronised is False:  # most nodes: nothing to build
                found = unsynchronised(self.clock(name, now), now)
                if found is not None:
                    out.append(found)
        for job in jobs:
            hosts = sorted({node for node, _ in job.ranks})
            if len(hosts) < 2:
                continue
            found = job_skew(job.name, [self.clock(h, now) for h in hosts], now, self.limits)
            if found is not None:
                out.append(found)
        due = [f for f in out if now - self._filed.get(f.key, -1e18) >= self.repeat_s]
        current = {f.key for f in out}
        self._filed = {k: t for k, t in self._filed.items() if k in current}  # ended: filed at once if it returns
        for f in due:
            self._filed[f.key] = now
        return due
