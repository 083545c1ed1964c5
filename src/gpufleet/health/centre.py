"""Correlate at the centre: the findings every node's agent made, plus the checks that need more than one node,
into one incident per root cause.

Cross-node checks: a training job's hang and the rank that caused it, stragglers against the job's median, a node
whose driver differs from the fleet's. The incident book joins effects to their causes across nodes (a job's hang
on the lost GPU of one of its ranks, wherever that rank runs) and resolves conditions that have cleared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpufleet.health.detectors.software import SoftwareDetector
from gpufleet.health.detectors.training import JobView, RankUtil, TrainingDetectors
from gpufleet.health.fault_history import FaultHistory
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.model import Entity, EntityKind, Incident, RootCause, Severity
from gpufleet.model.observe import Finding, NodeInventory

SOFTWARE_EVERY_S = 60.0
RankOwner = Callable[[str, int | None], str | None]  # (node, GPU index) -> the job whose rank holds it


class Correlator:
    def __init__(
        self,
        book: IncidentBook | None = None,
        thresholds: Thresholds | None = None,
        history: FaultHistory | None = None,
    ) -> None:
        self.thresholds = thresholds or load_thresholds()
        self.book = book or IncidentBook()
        # the Xid escalations judge a report against the GPU's and node's past, rebuilt from kept incidents
        self.history = history or FaultHistory()
        self.history.remember(self.book.incidents.values())
        self.training = TrainingDetectors(self.thresholds)
        self.software = SoftwareDetector(self.thresholds)
        self.holds = self.thresholds.control.resolve_after_s
        self._software_at = -np.inf
        self.findings = 0

    def add(self, findings: Sequence[Finding], owner: RankOwner | None = None) -> list[Incident]:
        """Findings into incidents; returns the incidents that opened or changed. Root causes go in before
        effects, so an effect seen together with its cause finds the incident it belongs to."""
        if owner is not None:
            for f in findings:
                if f.job is None and f.entity.kind is EntityKind.gpu:
                    f.job = owner(f.entity.node, f.entity.index)
        changed: dict[str, Incident] = {}
        for finding in sorted(findings, key=lambda f: f.effect):
            inc = self.book.add(self.history.judge(finding))
            changed[inc.id] = inc
        self.findings += len(findings)
        return list(changed.values())

    def tick(
        self,
        now: float,
        jobs: list[JobView],
        rank_util: RankUtil,
        inventories: Callable[[], Sequence[NodeInventory]],
        owner: RankOwner | None = None,
    ) -> list[Incident]:
        """The cross-node checks for this moment, then the incidents whose condition has cleared."""
        findings = self.training.observe(now, jobs, rank_util)
        if now - self._software_at >= SOFTWARE_EVERY_S:
            self._software_at = now
            findings += self.software.fleet_drift(now, inventories())
        changed = self.add(findings, owner)
        return changed + self.book.resolve_cleared(now, self.holds)


def collective_findings(now: float, findings: Sequence[object], where: str) -> list[Finding]:
    """`gpufleet nccl compare --report`: a run slower than the fabric should give. On the host when the run covered
    one host, else on the run itself (`where`, e.g. the results file)."""
    out = []
    for f in findings:
        host, kind, message = getattr(f, "host", None), getattr(f, "kind", ""), getattr(f, "message", "")
        ratio = getattr(f, "ratio", None)
        entity = Entity(EntityKind.node, host) if host else Entity(EntityKind.job, name=where)
        severity = Severity.critical if str(getattr(f, "severity", "")) in ("critical", "error") else Severity.warning
        out.append(
            Finding(
                now,
                RootCause.collective_slow,
                entity,
                severity,
                f"{kind}: {message}",
                message if ratio is None else f"{message} (measured/expected {ratio:.2f})",
                "nccl",
                action="RUN_DIAG",
            )
        )
    return out
