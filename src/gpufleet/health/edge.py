"""Detect at the edge: the node-local detectors, run where a node's data is (in its agent).

One collection in (the node's MetricFrame, the kernel-log reports parsed since the last one, the node's inventory
when it changed), observations out: findings, kernel reports and link events, each naming its node. A frame may
hold one node (a real agent) or many (the twin's agents, run vectorized): the detectors are the same and so is
every answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.health.detectors.fabric import FabricDetectors
from gpufleet.health.detectors.gpu import GpuDetectors
from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.detectors.software import SoftwareDetector
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.health.xid_policy import XidPolicy
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import Finding, KernelReport, LinkEvent, NodeInventory
from gpufleet.model.pci import normalise_pci
from gpufleet.telemetry.frame import MetricFrame


@dataclass(slots=True)
class EdgeOutput:
    findings: list[Finding] = field(default_factory=list)
    kernel: list[KernelReport] = field(default_factory=list)
    links: list[LinkEvent] = field(default_factory=list)

    def by_node(self) -> dict[str, list[Finding | KernelReport | LinkEvent]]:
        """Observations grouped by the node they are about, kernel reports first (the cause's own line)."""
        out: dict[str, list[Finding | KernelReport | LinkEvent]] = {}
        for report in self.kernel:
            out.setdefault(report.node, []).append(report)
        for link in self.links:
            out.setdefault(link.node, []).append(link)
        for finding in self.findings:
            out.setdefault(finding.entity.node or finding.entity.name, []).append(finding)
        return out


class NodeHealth:
    def __init__(
        self,
        frame: MetricFrame,
        thresholds: Thresholds | None = None,
        policy: XidPolicy | None = None,
        port_speeds_gbps: np.ndarray | None = None,
    ) -> None:
        self.thresholds = thresholds or load_thresholds()
        gpu_by_pci = {}
        for e in frame.entities:
            pci = normalise_pci(e.pci_bus_id) if e.pci_bus_id else None
            if pci:
                gpu_by_pci[(e.hostname, pci)] = e.gpu
        self.gpu = GpuDetectors(frame, self.thresholds)
        self.fabric = FabricDetectors(frame, self.thresholds, port_speeds_gbps)
        self.kernel = KernelDetector(gpu_by_pci, policy, correctable_per_minute=self.thresholds.ecc.sbe_per_minute)
        self.software = SoftwareDetector(self.thresholds)
        self.repeat_s = self.thresholds.control.finding_repeat_s
        self._reported: dict[str, tuple[float, int]] = {}  # finding key -> (when last reported, severity rank)

    def latched(self) -> dict[str, float]:
        """The detectors' state that outlives a restart of the agent (`restore` takes it back)."""
        return self.gpu.latched()

    def restore(self, latched: Mapping[str, float]) -> None:
        self.gpu.restore(latched)

    def observe(
        self,
        now: float,
        frame: MetricFrame,
        kernel: Mapping[str, Sequence[KernelEvent]] | None = None,
        inventories: Sequence[NodeInventory] = (),
    ) -> EdgeOutput:
        """Run every node-local detector on one collection. `inventories`: nodes whose inventory is new or due
        for its periodic check (the software checks run on those)."""
        out = EdgeOutput()
        for node, events in (kernel or {}).items():
            if events:
                findings, reports = self.kernel.judge(now, node, list(events))
                out.findings += findings
                out.kernel += reports
        measured = self.gpu.observe(now, frame) + self.fabric.observe(now, frame, out.links)
        if inventories:
            measured += self.software.node_checks(now, inventories)
        out.findings += self._gate(now, measured)
        return out

    def _gate(self, now: float, findings: list[Finding]) -> list[Finding]:
        """A condition is reported when it starts, then confirmed every `repeat_s` while it lasts (at once if it
        grows more severe): the control plane hears of it without a record every second."""
        passed = []
        for f in findings:
            key, rank = f.key, f.severity.rank
            last = self._reported.get(key)
            if last is not None and now - last[0] < self.repeat_s and rank <= last[1]:
                continue
            self._reported[key] = (now, rank)
            passed.append(f)
        if len(self._reported) > 10_000:
            self._reported = {k: v for k, v in self._reported.items() if now - v[0] < self.repeat_s}
        return passed
