"""Clocks that disagree across a job's nodes, and a node whose clock is not synchronised: the one judgement of both.

Why it matters: a distributed job's timeouts (NCCL's and the framework's watchdogs, a barrier's deadline, a lease)
compare a time stamped on one node with the clock of another, and traces and logs from several nodes are aligned by
their wall clocks; a skew of milliseconds misorders the events of one collective (its kernels last tens of
microseconds to milliseconds) and a skew of seconds makes a timeout fire early or late. The fix is the time service:
chrony (or PTP, ptp4l + phc2sys, where microseconds matter) running on every node against the same sources.

Two measurements, each with what it can tell:

- What each node's time daemon reports (`ClockFact.offset_s`): its estimate of its clock minus true time, good to its
  own error bound (`error_s`, chrony's |offset| + root dispersion + root delay / 2). Two nodes synchronised to the same
  sources differ by at most the sum of their bounds; the offsets' spread is the skew when both are synchronised.
- The control plane's receive times against the agents' send stamps: for each push, sent - received = (the node's
  clock - the control plane's) - the one-way delay, so the greatest of it over recent pushes (the least of received -
  sent) is the clock difference less the smallest one-way delay. Between two nodes the difference of those values is
  their skew, off by at most the larger of their smallest one-way delays (milliseconds over HTTP, more behind a
  proxy). It cannot tell a sub-millisecond skew, nor which node is wrong, nor the delay itself; it does catch a clock
  seconds off on a node whose daemon claims all is well, or that has none. So it is judged only past its own, larger
  limit.

The limits are thresholds.yaml's `clock` section (skew_limit_s 1 ms, receive_skew_s 250 ms, with their reasons).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.health.thresholds import Clock
from gpufleet.model import RootCause, Severity
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.model.observe import Finding

FIX = (
    "FIX_TIME_SYNC: run chrony (or ptp4l + phc2sys where sub-microsecond time matters) on every node against the same "
    "servers; check `chronyc tracking` and `chronyc sources` on the nodes named, and that no other daemon (ntpd, "
    "systemd-timesyncd) fights it; until then, timeouts and merged traces across these nodes are not to be trusted"
)
ACTION = "FIX_TIME_SYNC"


@dataclass(frozen=True, slots=True)
class NodeClock:
    """A node's clock as the control plane knows it: its daemon's report and the receive-time estimate."""

    node: str
    source: str = ""  # chrony, ntpd, timesyncd, kernel ("" when the node reported none)
    synchronised: bool | None = None
    offset_s: float | None = None  # the daemon's estimate: the clock minus true time
    error_s: float | None = None
    received_s: float | None = None  # max over recent pushes of (sent - received): clock difference less delay


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:+.3f} ms"


def job_skew(job: str, clocks: list[NodeClock], now: float, limits: Clock) -> Finding | None:
    """A finding when the clocks of a job's nodes disagree by more than `limits.skew_limit_s` (daemon offsets of
    synchronised nodes), or by more than `limits.receive_skew_s` by the receive times; None otherwise or when fewer
    than two say."""
    limit_s = limits.skew_limit_s
    reported = [c for c in clocks if c.offset_s is not None and c.synchronised is not False]
    received = [c for c in clocks if c.received_s is not None]
    lines: list[str] = []
    worst = 0.0
    nodes: list[str] = []
    if len(reported) >= 2:
        lo = min(reported, key=lambda c: c.offset_s or 0.0)
        hi = max(reported, key=lambda c: c.offset_s or 0.0)
        spread = (hi.offset_s or 0.0) - (lo.offset_s or 0.0)
        if spread > limit_s:
            worst, nodes = spread, [hi.node, lo.node]
            lines.append(
                f"time daemons: {hi.node} {_ms(hi.offset_s or 0.0)} ({hi.source}), {lo.node} {_ms(lo.offset_s or 0.0)} "
                f"({lo.source}) from true time: {spread * 1e3:.3f} ms apart > {limit_s * 1e3:g} ms"
            )
    if len(received) >= 2:
        lo = min(received, key=lambda c: c.received_s or 0.0)
        hi = max(received, key=lambda c: c.received_s or 0.0)
        spread = (hi.received_s or 0.0) - (lo.received_s or 0.0)
        if spread > limits.receive_skew_s:
            if spread > worst:
                worst, nodes = spread, [hi.node, lo.node]
            lines.append(
                f"receive times: {hi.node}'s pushes arrive stamped {spread * 1e3:.1f} ms later than {lo.node}'s "
                f"(greatest of sent - received over recent pushes: {_ms(hi.received_s or 0.0)} vs "
                f"{_ms(lo.received_s or 0.0)}; off by at most a push's one-way delay) > "
                f"{limits.receive_skew_s * 1e3:g} ms"
            )
    if not lines:
        return None
    return Finding(
        time=now,
        cause=RootCause.clock_skew,
        entity=Entity(EntityKind.job, name=job),
        severity=Severity.warning,
        summary=f"clocks of job {job}'s nodes differ by {worst * 1e3:.1f} ms ({' vs '.join(nodes)}): timeouts and "
        "trace alignment across them break",
        evidence="; ".join(lines),
        source="clock",
        action=ACTION,
        job=job,
    )


def unsynchronised(clock: NodeClock, now: float) -> Finding | None:
    """A finding when a node's daemon (or kernel) says its clock is not synchronised."""
    if clock.synchronised is not False:
        return None
    said = {
        "chrony": "chrony's leap status is Not synchronised",
        "ntpd": "ntpd's leap indicator is 11 (unsynchronised)",
        "timesyncd": "systemd-timesyncd has no synchronised server",
        "kernel": "the kernel's maxerror has reached 16 s: no time daemon disciplines the clock",
    }.get(clock.source, f"{clock.source} says the clock is not synchronised")
    return Finding(
        time=now,
        cause=RootCause.clock_unsynchronised,
        entity=Entity(EntityKind.node, node=clock.node),
        severity=Severity.warning,
        summary=f"{clock.node}'s clock is not synchronised: it drifts from the other nodes' unchecked",
        evidence=said + (f"; error bound {clock.error_s:.3f} s" if clock.error_s is not None else ""),
        source="clock",
        action=ACTION,
    )
