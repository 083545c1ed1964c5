"""Findings: what a detector saw at one moment. The incident book turns them into incidents."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model import Entity, RootCause, Severity


@dataclass(slots=True)
class Finding:
    time: float
    cause: RootCause
    entity: Entity
    severity: Severity
    summary: str
    evidence: str  # the real line, or the measurement against its threshold
    source: str  # kmsg, telemetry, fabric, training, software
    action: str = ""
    xid: int | None = None
    job: str | None = None  # for job-level findings: which job
    effect: bool = False  # a consequence (a hang, a stall) to attach to its root cause when one is known
    began: float | None = None  # when the effect started (a stalled job's last step)

    @property
    def key(self) -> str:
        return f"{self.cause.value}:{self.entity}"
