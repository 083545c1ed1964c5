"""Application detectors for training jobs: what a job's own metrics say, each judged against the job's own history.

- loss NaN or infinite (or the gradient norm, or the validation loss): at once;
- loss not improving over a window of steps, once past warmup: frozen at one value while steps advance (a stall: a
  broken logger or data), or flat within noise (a plateau: neither the window's mean nor its best improves on the
  window before by the tolerance);
- loss diverging: many times its recent best for several readings (blowing up), or validation loss rising over its
  last evaluations (or well above its best) while the training loss falls;
- gradient norm out of range for several readings in a row;
- samples/s well below the job's own baseline for a hold time: an effect, which the incident book attaches to a
  slowing fault on one of the job's GPUs or nodes when one is open;
- checkpoint writes failing (the failure counter went up; a counter that went down started again);
- GPUs starved by the input pipeline: the ranks' GPUs idle while the step waits on data.

History grows only with progress: a reading counts when the step advanced, so a job that stopped stepping is never
judged on its frozen last values (a hang is the training detector's), and neither is a job whose signals stopped
arriving. A step that goes back is a restart: the history starts again. Values the job does not export (None) are
skipped, never read as zero.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from operator import itemgetter

import msgspec
import numpy as np

from gpufleet.health.detectors.base import FleetSetup, fleet_detector
from gpufleet.health.detectors.seen import FleetSeen, HostLoads, JobView, RankUtil
from gpufleet.health.thresholds import JobChecks, Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding, TrainingSignals

SOURCE = "application"
NONFINITE = ("loss", "grad_norm", "validation_loss")  # a NaN here is a broken model, not a missing value
BASELINE_EVERY_S = 10.0  # the throughput baseline takes one reading this often, so an hour is 360 of them
LOSS_POINTS = 8192  # at most this many loss readings per job, however long its window
EVALUATIONS = 64
_LOSS = itemgetter(1)  # of a (step, loss) reading


@dataclass(frozen=True, slots=True)
class JobSignalsView:
    """A job as the training detectors see it (its ranks and progress), with its own signals and when the node
    exporting them last reported."""

    view: JobView
    signals: TrainingSignals
    reported: float

    @property
    def name(self) -> str:
        return self.view.name


@dataclass(frozen=True, slots=True)
class _Evaluation:
    step: int
    validation: float
    training: float | None  # the training loss when it was evaluated


@dataclass(slots=True)
class _History:
    """One job's readings since it started (or restarted), bounded."""

    name: str
    checks: JobChecks
    step: int | None = None
    last_step_time: float = -math.inf
    first_step: int | None = None  # the first step with a loss reading since the history began
    losses: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))
    evaluations: deque[_Evaluation] = field(default_factory=lambda: deque(maxlen=EVALUATIONS))
    blowup_run: int = 0
    grad_run: int = 0
    standing: list[Finding] = field(default_factory=list)  # what the last reading showed, until the next one
    unit: str = ""
    recent: deque[float] = field(default_factory=deque)
    baseline: deque[float] = field(default_factory=deque)
    baseline_at: float = -math.inf
    # the baseline's quantile and the recent median, computed once per change of either (judged every turn, they
    # change only on a new reading): (baseline appends, recent appends, quantile, median)
    paces: tuple[int, int, float, float] = (-1, -1, math.nan, math.nan)
    baseline_added: int = 0
    recent_added: int = 0
    low_since: float | None = None
    drop_summary: str = ""  # as first found: an effect's summary names it on its incident, so it stays the same
    starved_since: float | None = None
    checkpoints_failed: int | None = None  # kept across restarts: its counter judges them itself

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.step, self.last_step_time, self.first_step = None, -math.inf, None
        self.losses.clear()
        self.evaluations.clear()
        self.blowup_run = self.grad_run = 0
        self.standing = []
        self.unit = ""
        self.recent = deque(maxlen=self.checks.throughput_recent_points)
        size = math.ceil(self.checks.throughput_baseline_s / BASELINE_EVERY_S)
        self.baseline = deque(maxlen=max(size, self.checks.throughput_baseline_min_points))
        self.baseline_at = -math.inf
        self.baseline_added += 1
        self.recent_added += 1
        self.hold_off()

    def hold_off(self) -> None:
        """Conditions held over time start again (the job's values stopped being current)."""
        self.low_since = self.starved_since = None
        self.drop_summary = ""

    def advanced(self, step: int | None, last_step_time: float) -> bool:
        """Whether this report is a new reading: its step went forward (or, with no step exported, its last step
        time did). A step that went back is a restart."""
        if step is not None and self.step is not None and step < self.step:
            self.restart()
        if step is not None:
            new = self.step is None or step > self.step
            self.step = step
        else:
            new = last_step_time > self.last_step_time
        self.last_step_time = max(self.last_step_time, last_step_time)
        return new


@fleet_detector("application", needs=("jobs", "rank_util", "signals"))
class ApplicationDetectors:
    """The training jobs' own signals, each job against its thresholds (`application` in the thresholds, with its
    per-job overrides) and its own history. The ranks' hosts' load (`seen.host_load`), when known, is evidence on a
    job starved by its input pipeline."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.app = thresholds.application
        self.jobs: dict[str, _History] = {}

    @classmethod
    def build(cls, setup: FleetSetup) -> ApplicationDetectors:
        return cls(setup.thresholds)

    def detect(self, now: float, seen: FleetSeen) -> list[Finding]:
        if seen.rank_util is None or seen.signals is None:
            return []
        said = seen.signals()
        views = [JobSignalsView(job, *said[job.name]) for job in seen.jobs if job.name in said]
        return self._observe(now, views, seen.rank_util, seen.host_load)

    def _observe(
        self, now: float, jobs: Sequence[JobSignalsView], rank_util: RankUtil, host_load: HostLoads | None
    ) -> list[Finding]:
        current = {job.name for job in jobs}
        for gone in [name for name in self.jobs if name not in current]:
            del self.jobs[gone]  # a job that comes back starts afresh
        out: list[Finding] = []
        for job in jobs:
            history = self.jobs.get(job.name)
            if history is None:
                history = self.jobs[job.name] = _History(job.name, self.app.for_job(job.name))
            out += self._job(now, job, history, rank_util, host_load)
        return out

    def _job(
        self, now: float, job: JobSignalsView, h: _History, rank_util: RankUtil, host_load: HostLoads | None
    ) -> list[Finding]:
        c, s, view = h.checks, job.signals, job.view
        if now - job.reported > c.stale_s:
            h.hold_off()
            return []
        out = [f for f in (_checkpoints(now, s, h), _nonfinite(now, s, h.name)) if f is not None]
        if now - view.last_step_time > max(c.progress_min_s, c.progress_step_multiple * view.step_seconds):
            h.hold_off()  # not stepping: its last values are not its present
            return out
        if h.advanced(s.step, view.last_step_time):
            _read(now, s, h)
        out += [msgspec.structs.replace(f, time=now) for f in h.standing]
        for f in (_throughput(now, h), _starved(now, job, h, rank_util, host_load)):
            if f is not None:
                out.append(f)
        return out


def _finding(now: float, h: _History, cause: RootCause, severity: Severity, summary: str, evidence: str) -> Finding:
    return Finding(now, cause, Entity(EntityKind.job, name=h.name), severity, summary, evidence, SOURCE, job=h.name)


def _nonfinite(now: float, s: TrainingSignals, name: str) -> Finding | None:
    bad = [n for n in s.nonfinite if n in NONFINITE]
    if not bad:
        return None
    at = f" at step {s.step:,}" if s.step is not None else ""
    return Finding(
        now,
        RootCause.loss_nonfinite,
        Entity(EntityKind.job, name=name),
        Severity.critical,
        f"job {name}'s {' and '.join(bad)} {'are' if len(bad) > 1 else 'is'} NaN or infinite",
        f"{', '.join(bad)} not a finite number{at}: the run has diverged; every further step is wasted",
        SOURCE,
        job=name,
    )


def _checkpoints(now: float, s: TrainingSignals, h: _History) -> Finding | None:
    before, failed = h.checkpoints_failed, s.checkpoints_failed
    h.checkpoints_failed = failed
    if before is None:
        return None  # the first report is the baseline
    new = failed - before if failed >= before else failed  # a counter that went down started again from zero
    if new <= 0:
        return None
    took = f"; the last write took {s.checkpoint_s:.1f} s" if s.checkpoint_s is not None else ""
    return _finding(
        now,
        h,
        RootCause.checkpoint_failure,
        Severity.warning,
        f"job {h.name} failed to write {new} checkpoint{'s' if new > 1 else ''}",
        f"checkpoint failures {before} -> {failed} ({s.checkpoints_ok} written){took}",
    )


def _read(now: float, s: TrainingSignals, h: _History) -> None:
    """A new reading into the history, and what the loss and the gradients show now."""
    c = h.checks
    if s.loss is not None and s.step is not None:
        if h.first_step is None:
            h.first_step = s.step
        h.losses.append((s.step, s.loss))
        while h.losses and h.losses[0][0] < s.step - 2 * c.loss_window_steps:
            h.losses.popleft()
    new_evaluation = not h.evaluations or h.evaluations[-1].validation != s.validation_loss
    if s.validation_loss is not None and s.step is not None and new_evaluation:
        h.evaluations.append(_Evaluation(s.step, s.validation_loss, s.loss))
    if s.grad_norm is not None:
        h.grad_run = h.grad_run + 1 if not c.grad_norm_min <= s.grad_norm <= c.grad_norm_max else 0
    if s.loss is not None and h.losses:
        best = min(map(_LOSS, h.losses))
        h.blowup_run = h.blowup_run + 1 if best > 0 and s.loss > c.blowup_ratio * best else 0
    h.standing = [f for f in (_trend(now, s, h), _divergence(now, s, h), _gradient(now, s, h)) if f is not None]
    _pace(now, s, h)


def _trend(now: float, s: TrainingSignals, h: _History) -> Finding | None:
    c, step, w = h.checks, s.step, h.checks.loss_window_steps
    if step is None or s.loss is None or h.first_step is None or step - h.first_step < w:
        return None
    recent = [loss for at, loss in h.losses if at > step - w]
    if len(recent) >= c.loss_min_points and min(recent) == max(recent):
        return _finding(
            now,
            h,
            RootCause.loss_plateau,
            Severity.warning,
            f"job {h.name}'s loss is frozen at {recent[0]:.6g} over {w:,} steps (a stall: the logger or the data "
            "stopped changing)",
            f"{len(recent)} readings between steps {step - w:,} and {step:,} all {recent[0]:.6g}",
        )
    if step - h.first_step < 2 * w or step - 2 * w < c.warmup_steps:
        return None  # a plateau needs two whole windows of history past warmup
    earlier = [loss for at, loss in h.losses if step - 2 * w < at <= step - w]
    if len(earlier) < c.loss_min_points or len(recent) < c.loss_min_points:
        return None
    m0, m1, b0, b1 = float(np.mean(earlier)), float(np.mean(recent)), min(earlier), min(recent)
    tol = c.plateau_ratio
    if m1 < m0 - tol * abs(m0) or b1 < b0 - tol * abs(b0):
        return None
    return _finding(
        now,
        h,
        RootCause.loss_plateau,
        Severity.warning,
        f"job {h.name}'s loss has plateaued: mean {m0:.4g} -> {m1:.4g}, best {b0:.4g} -> {b1:.4g} over the last "
        f"{w:,} steps",
        f"steps {step - 2 * w:,}-{step - w:,} against {step - w:,}-{step:,} ({len(earlier)} and {len(recent)} "
        f"readings): neither the mean nor the best is {tol:.1%} lower",
    )


def _divergence(now: float, s: TrainingSignals, h: _History) -> Finding | None:
    c = h.checks
    if h.blowup_run >= c.hold_points and s.loss is not None:
        best = min(map(_LOSS, h.losses))
        return _finding(
            now,
            h,
            RootCause.loss_divergence,
            Severity.critical,
            f"job {h.name}'s loss is blowing up: {s.loss:.4g}, {s.loss / best:.1f} times its recent best {best:.4g}",
            f"over {c.blowup_ratio:g} times the best of the last {2 * c.loss_window_steps:,} steps for "
            f"{h.blowup_run} readings in a row",
        )
    evals = list(h.evaluations)
    if len(evals) < 2:
        return None
    last, k = evals[-1], c.validation_evals
    tail = evals[-k:]
    first = tail[0]
    climb = last.validation - first.validation
    rising = (
        len(tail) == k
        and all(a.validation < b.validation for a, b in pairwise(tail))
        and climb > c.validation_min_rise_ratio * abs(first.validation)
    )
    if rising and first.training is not None and last.training is not None and last.training < first.training:
        return _finding(
            now,
            h,
            RootCause.loss_divergence,
            Severity.warning,
            f"job {h.name}'s validation loss is rising while its training loss falls",
            f"validation {' -> '.join(f'{e.validation:.4g}' for e in tail)} over steps {first.step:,}-{last.step:,}; "
            f"training {first.training:.4g} -> {last.training:.4g}",
        )
    top = min(evals, key=lambda e: e.validation)
    above = last.validation - top.validation
    if last.training is None or top.training is None or last.training > top.training:
        return None
    if top.validation != 0 and above > c.validation_rise_ratio * abs(top.validation):
        return _finding(
            now,
            h,
            RootCause.loss_divergence,
            Severity.warning,
            f"job {h.name}'s validation loss is {above / abs(top.validation):.0%} above its best while its training "
            "loss is lower",
            f"validation {last.validation:.4g} at step {last.step:,} against its best {top.validation:.4g} at step "
            f"{top.step:,} (over {c.validation_rise_ratio:.0%}); training {top.training:.4g} -> "
            f"{last.training:.4g}",
        )
    return None


def _gradient(now: float, s: TrainingSignals, h: _History) -> Finding | None:
    c = h.checks
    if h.grad_run < c.hold_points or s.grad_norm is None:
        return None
    high = s.grad_norm > c.grad_norm_max
    what, bound = ("exploding", f"> {c.grad_norm_max:g}") if high else ("vanishing", f"< {c.grad_norm_min:g}")
    return _finding(
        now,
        h,
        RootCause.gradient_norm,
        Severity.warning,
        f"job {h.name}'s gradient norm is {what}: {s.grad_norm:.3g}",
        f"gradient norm {s.grad_norm:.3g} {bound}, outside {c.grad_norm_min:g}..{c.grad_norm_max:g} for "
        f"{h.grad_run} readings in a row",
    )


def _pace(now: float, s: TrainingSignals, h: _History) -> None:
    """A throughput reading: always into the current pace; into the baseline when healthy, past warmup, and not
    more often than every BASELINE_EVERY_S (so the drop being judged never lowers its own baseline)."""
    unit, value = ("samples/s", s.samples_per_s) if s.samples_per_s is not None else ("tokens/s", s.tokens_per_s)
    if value is None:
        return
    if unit != h.unit:
        h.unit = unit
        h.recent.clear()
        h.baseline.clear()
        h.baseline_added += 1
        h.low_since = None
    h.recent.append(value)
    h.recent_added += 1
    c = h.checks
    if (s.step is not None and s.step < c.warmup_steps) or h.low_since is not None:
        return
    if now - h.baseline_at < BASELINE_EVERY_S:
        return
    if len(h.baseline) >= c.throughput_baseline_min_points and value < (1 - c.throughput_drop) * _baseline(h):
        return
    h.baseline.append(value)
    h.baseline_added += 1
    h.baseline_at = now


def _baseline(h: _History) -> float:
    return _paces(h)[0]


def _paces(h: _History) -> tuple[float, float]:
    """(the baseline's quantile, the median of the recent readings), as of the last change to either."""
    if h.paces[:2] != (h.baseline_added, h.recent_added):
        base = (
            float(np.quantile(np.fromiter(h.baseline, float), h.checks.throughput_baseline_quantile))
            if h.baseline
            else math.nan
        )
        pace = float(np.median(np.fromiter(h.recent, float))) if h.recent else math.nan
        h.paces = (h.baseline_added, h.recent_added, base, pace)
    return h.paces[2], h.paces[3]


def _throughput(now: float, h: _History) -> Finding | None:
    c = h.checks
    if len(h.baseline) < c.throughput_baseline_min_points or len(h.recent) < c.throughput_recent_points:
        h.low_since, h.drop_summary = None, ""
        return None
    base, pace = _paces(h)
    if base <= 0 or pace >= (1 - c.throughput_drop) * base:
        h.low_since, h.drop_summary = None, ""
        return None
    if h.low_since is None:
        h.low_since = now
    held = now - h.low_since
    if held < c.throughput_hold_s:
        return None
    fell = 1 - pace / base
    h.drop_summary = h.drop_summary or f"job {h.name}'s {h.unit} fell {fell:.0%} ({_amount(base)} -> {_amount(pace)}/s)"
    finding = _finding(
        now,
        h,
        RootCause.throughput_drop,
        Severity.warning,
        h.drop_summary,
        f"median of the last {len(h.recent)} readings {_amount(pace)} {h.unit}, {fell:.0%} below the job's baseline "
        f"{_amount(base)} ({len(h.baseline)} healthy readings); more than {c.throughput_drop:.0%} below for "
        f"{held:.0f} s",
    )
    finding.effect, finding.began = True, h.low_since
    return finding


def _starved(
    now: float, job: JobSignalsView, h: _History, rank_util: RankUtil, host_load: HostLoads | None
) -> Finding | None:
    c, wait, step_s = h.checks, job.signals.data_wait_s, job.view.step_seconds
    if wait is None or step_s <= 0:
        h.starved_since = None
        return None
    share = wait / step_s
    util = rank_util(job.view) if share > c.starved_wait_share else np.empty(0)
    known = util[np.isfinite(util)]
    busy = float(known.mean()) if known.size else math.nan
    if not busy < c.starved_util_percent:  # NaN (nothing known) is not starved either
        h.starved_since = None
        return None
    if h.starved_since is None:
        h.starved_since = now
    held = now - h.starved_since
    if held < c.starved_hold_s:
        return None
    return _finding(
        now,
        h,
        RootCause.input_starved,
        Severity.warning,
        f"job {h.name}'s GPUs wait on the input pipeline: {busy:.0f}% busy, {share:.0%} of each step spent waiting "
        "for data",
        f"ranks' GPU utilization {busy:.0f}% (under {c.starved_util_percent:g}%) while the slowest rank waited "
        f"{wait:.2f} s of a {step_s:.2f} s step (over {c.starved_wait_share:.0%}) for {held:.0f} s"
        f"{_hosts(job.view, c, host_load)}",
    )


def _hosts(view: JobView, c: JobChecks, host_load: HostLoads | None) -> str:
    """Supporting evidence from the ranks' hosts, when their load is known."""
    if host_load is None:
        return ""
    known, saturated = 0, []
    for node in dict.fromkeys(node for node, _ in view.ranks):
        load = host_load(node)
        if load is None or (load.cpu_busy is None and load.io_wait is None):
            continue
        known += 1
        parts = []
        if load.cpu_busy is not None and load.cpu_busy >= c.host_cpu_busy:
            parts.append(f"CPU {load.cpu_busy:.0%} busy")
        if load.io_wait is not None and load.io_wait >= c.host_io_wait:
            parts.append(f"I/O wait {load.io_wait:.0%}")
        if parts:
            saturated.append(f"{node} {' and '.join(parts)}")
    if saturated:
        return f"; hosts saturated: {', '.join(saturated)}"
    return "; the hosts' CPU and I/O are not saturated (look at storage or the network)" if known else ""


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
