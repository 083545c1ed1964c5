"""The health engine: every detector over one tick of observations, findings into the incident book.

Its inputs are what agents deliver and what the control plane knows: a MetricFrame (dcgm-exporter fields and IB
port counters), new kernel-log lines per node, host log lines (link carrier), and facts about jobs and nodes.
`TwinFeed` produces exactly those from the digital twin; agents produce them from real nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufleet.health.detectors.fabric import FabricDetectors
from gpufleet.health.detectors.gpu import GpuDetectors
from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.detectors.software import NodeFacts, SoftwareDetector
from gpufleet.health.detectors.training import JobFacts, TrainingDetectors
from gpufleet.health.findings import Finding
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.health.xid_policy import XidPolicy
from gpufleet.model import Entity, EntityKind, Incident, RootCause, Severity
from gpufleet.nccl.compare import Finding as NcclFinding
from gpufleet.sources.pci import normalise_pci
from gpufleet.telemetry.frame import MetricFrame

SOFTWARE_EVERY_S = 60.0


@dataclass
class Observations:
    """One tick of input."""

    now: float
    frame: MetricFrame
    kernel: dict[str, list[str]] = field(default_factory=dict)  # node -> new kernel-log lines
    host_log: list[tuple[str, str]] = field(default_factory=list)  # (node, line) from syslog/journal
    jobs: list[JobFacts] = field(default_factory=list)
    nodes: list[NodeFacts] = field(default_factory=list)


class HealthEngine:
    def __init__(
        self,
        frame: MetricFrame,
        book: IncidentBook | None = None,
        thresholds: Thresholds | None = None,
        policy: XidPolicy | None = None,
        port_speeds_gbps: np.ndarray | None = None,
    ) -> None:
        self.thresholds = thresholds or load_thresholds()
        self.book = book or IncidentBook()
        gpu_by_pci = {}
        for e in frame.entities:
            pci = normalise_pci(e.pci_bus_id) if e.pci_bus_id else None
            if pci:
                gpu_by_pci[(e.hostname, pci)] = e.gpu
        self.gpu = GpuDetectors(frame, self.thresholds)
        self.fabric = FabricDetectors(frame, self.thresholds, port_speeds_gbps)
        self.kernel = KernelDetector(gpu_by_pci, policy)
        self.training = TrainingDetectors(frame, self.thresholds)
        self.software = SoftwareDetector(self.thresholds)
        self._software_at = -np.inf
        self._jobs: dict[str, list[str]] = {}
        self._resource_cache: dict[JobFacts, list[str]] = {}
        self._owner_key: tuple[JobFacts, ...] = ()
        self._owner: dict[tuple[str, int | None], str] = {}
        self.book.job_resources = self._job_resources
        self.findings = 0

    def _resources(self, job: JobFacts) -> list[str]:
        cached = self._resource_cache.get(job)
        if cached is None:
            keys = {f"gpu/{n}/{g}" for n, g in job.ranks} | {f"node/{n}" for n, _ in job.ranks}
            cached = self._resource_cache[job] = sorted(keys)
        return cached

    def _rank_owner(self, jobs: list[JobFacts]) -> dict[tuple[str, int | None], str]:
        key = tuple(jobs)
        if key != self._owner_key:
            self._owner_key = key
            self._owner = {rank: job.name for job in jobs for rank in job.ranks}
        return self._owner

    def _job_resources(self, job: str) -> list[str]:
        return self._jobs.get(job, [])

    def collective_findings(self, now: float, findings: list[NcclFinding], where: str) -> list[Incident]:
        """Findings of `gpufleet nccl compare` (a run slower than the fabric should give) become incidents: on the
        host when the run covered one host, else on the run itself (`where`, e.g. the results file)."""
        changed = []
        for f in findings:
            entity = Entity(EntityKind.node, f.host) if f.host else Entity(EntityKind.job, name=where)
            severity = Severity.critical if str(f.severity) in ("critical", "error") else Severity.warning
            finding = Finding(
                now,
                RootCause.collective_slow,
                entity,
                severity,
                f"{f.kind}: {f.message}",
                f.message if f.ratio is None else f"{f.message} (measured/expected {f.ratio:.2f})",
                "nccl",
                action="RUN_DIAG",
            )
            changed.append(self.book.add(finding))
        return changed

    def observe(self, obs: Observations) -> list[Incident]:
        """Run every detector on one tick; returns the incidents that opened or changed."""
        now = obs.now
        self._jobs = {j.name: self._resources(j) for j in obs.jobs}
        findings: list[Finding] = []
        for node, lines in obs.kernel.items():
            if lines:
                findings += self.kernel.lines(now, node, lines)
        for node, line in obs.host_log:
            findings += self.fabric.link_event(now, node, line)
        findings += self.gpu.observe(now, obs.frame)
        findings += self.fabric.observe(now, obs.frame)
        if now - self._software_at >= SOFTWARE_EVERY_S and obs.nodes:
            self._software_at = now
            findings += self.software.observe(now, obs.nodes)
        findings += self.training.observe(now, obs.frame, obs.jobs)
        owner = self._rank_owner(obs.jobs)
        for f in findings:
            if f.job is None and f.entity.kind is EntityKind.gpu:
                f.job = owner.get((f.entity.node, f.entity.index))
        # Root causes first, so an effect seen in the same tick finds the incident it belongs to.
        findings.sort(key=lambda f: f.effect)
        self.findings += len(findings)
        changed: dict[str, Incident] = {}
        for finding in findings:
            inc = self.book.add(finding)
            changed[inc.id] = inc
        return list(changed.values())
