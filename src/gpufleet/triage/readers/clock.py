"""A node's clock as its time daemon reports it (`chronyc tracking`, `ntpq -c rv`, `timedatectl timesync-status`),
judged by health.clock_skew: a daemon that says the clock is not synchronised is its `unsynchronised` finding, and a
synchronised clock whose own offset from true time is past thresholds' `clock.skew_limit_s` puts every job that
spans it and a well-synchronised node past the skew `job_skew` allows. A paste shows one node, so the skew between
a job's nodes itself is not judged here (the control plane compares them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpufleet.health.clock_skew import FIX, NodeClock, unsynchronised
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import RootCause, Severity
from gpufleet.model.observe import ClockFact
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport

NODE = "the node"  # a paste does not name its node
ClockParser = Callable[[str, float], ClockFact]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _evidence(text: str, *keys: str) -> list[str]:
    """The lines that show the verdict: those naming one of `keys`."""
    return [line.strip() for line in text.splitlines() if any(k in line for k in keys)][:4]


def judge_clock(fmt: str, fact: ClockFact, text: str, source: str, evidence_keys: tuple[str, ...]) -> TriageReport:
    """One daemon's report of the node's clock; `evidence_keys` pick the lines of `text` that show the verdict."""
    report = TriageReport(fmt, source)
    now = time.time()
    clock = NodeClock(NODE, fact.source, fact.synchronised, fact.offset_s, fact.error_s)
    found = unsynchronised(clock, now)
    if found is not None:
        report.findings.append(
            TriageFinding(
                "clock",
                found.severity,
                found.summary,
                NODE,
                RootCause.clock_unsynchronised.value,
                FIX,
                [found.evidence, *_evidence(text, *evidence_keys)],
            )
        )
        return report
    limit = load_thresholds().clock.skew_limit_s
    if fact.offset_s is not None and abs(fact.offset_s) > limit:
        ahead = "ahead of" if fact.offset_s > 0 else "behind"
        report.findings.append(
            TriageFinding(
                "clock",
                Severity.warning,
                f"{NODE}'s clock is {_ms(abs(fact.offset_s))} {ahead} true time by {fact.source}'s own estimate, more "
                f"than the {_ms(limit)} a job's nodes may disagree by (thresholds clock.skew_limit_s): every job "
                "spanning it and a well-synchronised node is skewed past it",
                NODE,
                RootCause.clock_skew.value,
                FIX,
                _evidence(text, *evidence_keys),
            )
        )
    if fact.synchronised is None:
        report.notes.append(f"{fact.source} did not say whether the clock is synchronised")
        report.judged = bool(report.findings)
    if fact.offset_s is None:
        report.notes.append(f"{fact.source}'s output holds no offset from true time: only its sync state is judged")
    if fact.error_s is not None:
        bound = f"{fact.source} bounds the clock's error at {_ms(fact.error_s)}"
        if fact.error_s > limit:
            bound += (f", more than clock.skew_limit_s ({_ms(limit)}): two such nodes cannot be shown to agree "
                      "within it (a nearer time source, or PTP, tightens it)")  # fmt: skip
        report.notes.append(bound)
    if fact.reference:
        report.notes.append(f"reference: {fact.reference}" + (f", stratum {fact.stratum}" if fact.stratum else ""))
    return report


def clock_reader(fmt: str, parse: ClockParser, evidence_keys: tuple[str, ...]) -> Callable[..., TriageReport]:
    """A triage reader for one daemon's output: its parser, then `judge_clock`."""

    def read(lines: Iterable[str], source: str) -> TriageReport:
        holder = TriageReport(fmt, source)
        text = bounded_text(lines, holder)
        report = judge_clock(fmt, parse(text, time.time()), text, source, evidence_keys)
        report.notes[:0] = holder.notes
        report.complete = holder.complete
        return report

    return read
