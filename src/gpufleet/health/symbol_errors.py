"""InfiniBand symbol errors against a bit-error-rate budget: the one judgement of a port's SymbolErrorCounter that
the agent's fabric detector, the fabric service's port health and triage's port rules (health.ib_ports) all make.

The windows and their bit error rates are the `symbol_errors` section of the thresholds (sources in its data
file: NVIDIA's UFM PDR plugin, 1e-14 over 12 minutes and 1e-15 over 125 minutes). A port's count within each window
is held against the errors a link of its rate may show there at that rate (`BerWindow.budget`: 2.88 for 400 Gb/s
over 12 minutes, 3 over 125 minutes; a count that covers more than the window is held against that longer time):

- over the first (shortest) window's budget: critical, a bad link to isolate now;
- over only a longer window's: a warning, a link that errs slowly but steadily;
- with no link rate (or no time the count covers) no bit error rate can be told: the count is held against
  infiniband-diags' error threshold for the counter (the IB counter catalog), a warning when over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.catalog.ib_counters import SYMBOL_COUNTER, load_ib_counters
from gpufleet.health.thresholds import BerWindow, SymbolErrors, Thresholds, load_thresholds
from gpufleet.model import Severity


def span_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:g} s"


@dataclass(frozen=True, slots=True)
class Breach:
    """Symbol errors over one window's budget."""

    window: BerWindow
    count: float
    span_s: float  # the time the count covers: the window, or longer when one reading spans more
    rate_gbps: float
    budget: float

    @property
    def measured_ber(self) -> float:
        return self.count / (self.rate_gbps * 1e9 * self.span_s)

    def describe(self) -> str:
        """`3 in 12 min: a bit error rate of about 1.0e-14, over 1e-14 (2.88 allowed at 400 Gb/s)`"""
        return (
            f"{self.count:.0f} in {span_text(self.span_s)}: a bit error rate of about {self.measured_ber:.1e}, over "
            f"{self.window.ber:g} ({self.budget:.2f} allowed at {self.rate_gbps:g} Gb/s)"
        )


@dataclass(frozen=True, slots=True)
class SymbolVerdict:
    """What a port's symbol errors are: over a BER budget (`breaches`), or, without a rate, over the counter's
    threshold (`threshold` set, no breaches)."""

    severity: Severity
    breaches: tuple[Breach, ...] = ()
    count: float = 0.0  # the count judged against the threshold, when no BER could be told
    span_s: float = 0.0
    threshold: int | None = None

    def describe(self) -> str:
        if self.breaches:
            return "; ".join(b.describe() for b in self.breaches)
        return (
            f"{self.count:.0f} in {span_text(self.span_s)} (link rate unknown, so against infiniband-diags' threshold "
            f"of {self.threshold}, not a bit error rate)"
        )


class SymbolErrorBudget:
    """Symbol errors judged against the bit error rate of every `symbol_errors` window (shortest first)."""

    def __init__(self, thresholds: SymbolErrors | Thresholds | None = None) -> None:
        if thresholds is None:
            thresholds = load_thresholds()
        section = thresholds.symbol_errors if isinstance(thresholds, Thresholds) else thresholds
        self.windows: tuple[BerWindow, ...] = tuple(section.windows)
        self.threshold = load_ib_counters()[SYMBOL_COUNTER].threshold or 0

    @property
    def longest_s(self) -> float:
        return self.windows[-1].window_s

    def targets(self) -> str:
        """`1e-14 over 12 min and 1e-15 over 125 min`"""
        return " and ".join(f"{w.ber:g} over {span_text(w.window_s)}" for w in self.windows)

    def judge(self, counts: Sequence[tuple[float, float]], rate_gbps: float | None) -> SymbolVerdict | None:
        """`counts`: per window, the errors counted within it and the time they cover. None: within every budget
        (or under the threshold, without a rate)."""
        if len(counts) != len(self.windows):
            raise ValueError(f"{len(counts)} counts for {len(self.windows)} symbol-error windows")
        if not rate_gbps or rate_gbps <= 0 or np.isnan(rate_gbps):
            count, span = counts[0]
            if count > self.threshold:
                return SymbolVerdict(Severity.warning, count=count, span_s=span, threshold=self.threshold)
            return None
        breaches: list[Breach] = []
        severity: Severity | None = None
        for i, (window, (count, span)) in enumerate(zip(self.windows, counts, strict=True)):
            covered = max(window.window_s, span)
            budget = window.budget(rate_gbps, covered)
            if count > budget:
                breaches.append(Breach(window, count, covered, rate_gbps, budget))
                worse = Severity.critical if i == 0 else Severity.warning
                severity = worse if severity is None or worse.rank > severity.rank else severity
        return SymbolVerdict(severity, tuple(breaches)) if severity is not None else None

    def judge_reading(self, count: float, span_s: float, rate_gbps: float | None) -> SymbolVerdict | None:
        """One reading: `count` errors over `span_s`, which is then the count within each window (at least that
        many there, or held against the longer time the reading covers)."""
        return self.judge([(count, span_s)] * len(self.windows), rate_gbps)
