"""A node's health: every node-local detector (`registered_node()`), run where a node's data is (in its agent).

One collection in (the node's MetricFrame, the kernel-log reports parsed since the last one, the node's inventory
when it changed), observations out: findings, kernel reports and link events, each naming its node. A frame may
hold one node (a real agent) or many (the twin's agents, run vectorized): the detectors are the same and so is
every answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.health.detectors.base import Latches, NodeDetector, NodeSetup, registered_node
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.health.xid_policy import XidPolicy
from gpufleet.model.bmc import BmcRead
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import BmcEvent, Finding, KernelReport, LinkEvent, NodeInventory
from gpufleet.telemetry.frame import MetricFrame


@dataclass(slots=True)
class NodeObservations:
    findings: list[Finding] = field(default_factory=list)
    kernel: list[KernelReport] = field(default_factory=list)
    links: list[LinkEvent] = field(default_factory=list)
    bmc: list[BmcEvent] = field(default_factory=list)

    def by_node(self) -> dict[str, list[Finding | KernelReport | LinkEvent | BmcEvent]]:
        """Observations grouped by the node they are about, kernel reports first (the cause's own line)."""
        out: dict[str, list[Finding | KernelReport | LinkEvent | BmcEvent]] = {}
        for report in self.kernel:
            out.setdefault(report.node, []).append(report)
        for link in self.links:
            out.setdefault(link.node, []).append(link)
        for event in self.bmc:
            out.setdefault(event.node, []).append(event)
        for finding in self.findings:
            out.setdefault(finding.entity.node or finding.entity.name, []).append(finding)
        return out


class NodeHealth:
    def __init__(
        self,
        frame: MetricFrame,
        thresholds: Thresholds | None = None,
        policy: XidPolicy | None = None,
    ) -> None:
        self.thresholds = thresholds or load_thresholds()
        setup = NodeSetup(frame, self.thresholds, policy)
        self._run = [(entry, entry.build(setup)) for entry in registered_node()]
        self.detectors: dict[str, NodeDetector] = {entry.name: detector for entry, detector in self._run}
        self.repeat_s = self.thresholds.control.finding_repeat_s
        self._reported: dict[str, tuple[float, int]] = {}  # finding key -> (when last reported, severity rank)

    def latched(self) -> dict[str, float]:
        """The detectors' state that outlives a restart of the agent (`restore` takes it back)."""
        latched: dict[str, float] = {}
        for detector in self.detectors.values():
            if isinstance(detector, Latches):
                latched |= detector.latched()
        return latched

    def restore(self, latched: Mapping[str, float]) -> None:
        for detector in self.detectors.values():
            if isinstance(detector, Latches):
                detector.restore(latched)

    def observe(
        self,
        now: float,
        frame: MetricFrame | None = None,
        kernel: Mapping[str, Sequence[KernelEvent]] | None = None,
        inventories: Sequence[NodeInventory] = (),
        bmc: Mapping[str, BmcRead] | None = None,
    ) -> NodeObservations:
        """Run every node-local detector whose inputs are given on one collection. `inventories`: nodes whose
        inventory is new or due for its periodic check (the software checks run on those). Without a frame, only
        the detectors that need none run (the kernel reports the log follower just parsed, what the BMC source read:
        `bmc`)."""
        seen = NodeSeen(frame, kernel, inventories or None, bmc)
        events: list[Finding] = []
        lasting: list[Finding] = []
        for entry, detector in self._run:
            if entry.ready(seen):
                (lasting if entry.lasting else events).extend(detector.detect(now, seen))
        return NodeObservations(events + self._gate(now, lasting), seen.reports, seen.links, seen.bmc_events)

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
