"""Training detectors: a stalled job, the rank that hung it, and stragglers.

A job is stalled when its last step is older than both a floor and a few of its own step times. Who hung it:
- a rank whose GPU reports nothing (lost) or whose node or link already has an incident: the stall is that
  incident's effect (the incident book attaches it);
- otherwise NCCL's own signature: the ranks that arrived spin in NCCL kernels at full utilization while the rank
  that never arrived sits idle. That quiet rank is the root cause;
- neither: a stall with no hardware explanation (data loader, checkpoint storage, a deadlock in the program).
A straggler is a rank whose compute takes clearly longer than the job's median for a sustained time.
"""

from __future__ import annotations

import numpy as np

from gpufleet.health.detectors.base import FleetSetup, fleet_detector
from gpufleet.health.detectors.seen import FleetSeen, JobView
from gpufleet.health.thresholds import Thresholds
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.observe import Finding

STRAGGLER_EVERY_S = 5.0  # per-rank step times arrive every few seconds; the hold is a minute


def slow_ranks(times: np.ndarray, ratio: float) -> tuple[float, np.ndarray]:
    """The median of the ranks' compute times and which ranks take more than `ratio` times it (an unknown time
    is never slow). Some time must be known."""
    median = float(np.nanmedian(times))
    return median, np.isfinite(times) & (times > ratio * median)


@fleet_detector("training", needs=("jobs", "rank_util"))
class TrainingDetectors:
    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds.training
        self._stragglers_at = -np.inf
        self._signature_since: dict[str, float] = {}
        self.slow_since: dict[str, np.ndarray] = {}  # per job: when each rank became slow (NaN: not slow)

    @classmethod
    def build(cls, setup: FleetSetup) -> TrainingDetectors:
        return cls(setup.thresholds)

    def detect(self, now: float, seen: FleetSeen) -> list[Finding]:
        out: list[Finding] = []
        jobs, rank_util = seen.jobs, seen.rank_util
        if rank_util is None:
            return out
        current = {job.name for job in jobs}
        for gone in [name for name in self.slow_since if name not in current]:
            del self.slow_since[gone]  # a job that stopped and came back starts its holds afresh
        for gone in [name for name in self._signature_since if name not in current]:
            del self._signature_since[gone]
        stragglers_due = now - self._stragglers_at >= STRAGGLER_EVERY_S
        for job in jobs:
            finding = self._hang(now, job, rank_util(job), now - job.last_step_time, job.step_seconds)
            if finding is not None:
                finding.began = job.last_step_time
                out.append(finding)
            if stragglers_due:
                out += self._stragglers(now, job)
        if stragglers_due:
            self._stragglers_at = now
        return out

    def _hang(self, now: float, job: JobView, rank_util: np.ndarray, age: float, step: float) -> Finding | None:
        """A hang is named as soon as a step is clearly overdue and the ranks say why; a stall without a
        signature waits for the longer threshold."""
        quiet = np.flatnonzero(rank_util < self.t.quiet_rank_util)
        busy = int((rank_util >= self.t.busy_rank_util).sum())
        signature = quiet.size > 0 and busy >= 0.5 * np.isfinite(rank_util).sum()
        if signature:
            since = self._signature_since.setdefault(job.name, now)
        else:
            self._signature_since.pop(job.name, None)
            since = now
        overdue = age > max(self.t.hang_min_s, self.t.hang_step_multiple * step)
        stalled = age > max(self.t.stall_min_s, self.t.stall_step_multiple * step)
        job_entity = Entity(EntityKind.job, name=job.name)
        detail = f"last step {age:.0f} s ago (a step takes {step:.1f} s)"
        silent = np.flatnonzero(np.isnan(rank_util))
        if silent.size and overdue:  # a GPU that reads nothing: lost; its incident explains the hang
            node, gpu = job.ranks[int(silent[0])]
            return Finding(
                now,
                RootCause.training_stall,
                job_entity,
                Severity.critical,
                f"job {job.name} hung: rank {int(silent[0])} on {node}/gpu{gpu} is unreachable",
                detail,
                "training",
                job=job.name,
                effect=True,
            )
        if signature and overdue and now - since >= self.t.hang_signature_s:
            rank = int(quiet[0])
            node, gpu = job.ranks[rank]
            return Finding(
                now,
                RootCause.nccl_hang,
                Entity(EntityKind.gpu, node, gpu),
                Severity.critical,
                f"job {job.name} hung in a collective: rank {rank} ({node}/gpu{gpu}) never arrived",
                f"{detail}; rank {rank} at {rank_util[rank]:.0f}% while {busy} ranks spin in NCCL at "
                f">= {self.t.busy_rank_util:g}%",
                "training",
                action="REQUEUE_EXCLUDING_NODE",
                job=job.name,
                effect=True,
            )
        if stalled:
            return Finding(
                now,
                RootCause.training_stall,
                job_entity,
                Severity.critical,
                f"job {job.name} stalled",
                detail,
                "training",
                action="REQUEUE",
                job=job.name,
                effect=True,
            )
        return None

    def _stragglers(self, now: float, job: JobView) -> list[Finding]:
        times = np.array(job.rank_compute, dtype=np.float64)
        since = self.slow_since.get(job.name)
        if since is None or since.size != times.size:
            since = self.slow_since[job.name] = np.full(times.size, np.nan)
        if np.isnan(times).all():
            since[:] = np.nan
            return []
        median, slow = slow_ranks(times, self.t.straggler_ratio)
        since[:] = np.where(slow, np.where(np.isnan(since), now, since), np.nan)
        out = []
        for rank in np.flatnonzero(slow & (now - since >= self.t.straggler_hold_s)):
            node, gpu = job.ranks[int(rank)]
            out.append(
                Finding(
                    now,
                    RootCause.straggler,
                    Entity(EntityKind.gpu, node, gpu),
                    Severity.warning,
                    f"rank {rank} of {job.name} ({node}/gpu{gpu}) is a straggler",
                    f"compute {times[rank]:.2f} s per step vs the job's median {median:.2f} s for "
                    f"{now - since[rank]:.0f} s",
                    "training",
                    action="REQUEUE_EXCLUDING_NODE",
                    job=job.name,
                    effect=True,
                )
            )
        return out
