"""Observations from the digital twin, in the shape real agents deliver them."""

from __future__ import annotations

import numpy as np

from gpufleet.health.detectors.software import NodeFacts
from gpufleet.health.detectors.training import JobFacts
from gpufleet.health.engine import Observations
from gpufleet.model import JobState
from gpufleet.sim.twin import Twin
from gpufleet.sources.twin import EPOCH, TwinSource


class TwinFeed:
    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.source = TwinSource(twin)
        self.frame = self.source.new_frame()
        self._kmsg_seen = {n: 0 for n in twin.kmsg}
        self._event_seen = 0
        self._jobs: dict[tuple[str, tuple[str, ...]], JobFacts] = {}

    def _job_facts(self, j: int, name: str, nodes: tuple[str, ...]) -> JobFacts:
        cached = self._jobs.get((name, nodes))
        if cached is None:
            twin = self.twin
            ranks = twin.training.ranks_of(j)
            cached = self._jobs[(name, nodes)] = JobFacts(
                name,
                tuple(
                    (twin.cluster.nodes[int(twin.gpus.node_of[k])].name, int(twin.gpus.index_on_node[k])) for k in ranks
                ),
            )
        return cached

    def port_speeds(self) -> np.ndarray:
        return np.array([self.twin.ports.speed_gbps[p] for p in self.source.port_idx])

    def observe(self) -> Observations:
        twin = self.twin
        self.frame.clear_values()
        self.source.collect(self.frame)
        now = EPOCH + twin.time
        kernel = {}
        for node, lines in twin.kmsg.items():
            seen = self._kmsg_seen[node]
            if len(lines) > seen:
                kernel[node] = lines[seen:]
                self._kmsg_seen[node] = len(lines)
        host_log = [(e.entity.node, e.message) for e in twin.events[self._event_seen :] if e.kind == "syslog"]
        self._event_seen = len(twin.events)
        jobs = [
            self._job_facts(j, job.name, tuple(job.nodes))
            for j, job in enumerate(twin.training.jobs)
            if job.state in (JobState.running, JobState.hung)
        ]
        # Node facts (versions) change rarely: take the inventory once a minute.
        inventory = twin.time % 60 < twin.tick
        nodes = [
            NodeFacts(
                n.name,
                n.software.driver_version,
                n.software.cuda_version,
                n.software.kernel,
                n.software.fabric_manager_version,
            )
            for n in twin.cluster.nodes
            if n.gpus and inventory
        ]
        return Observations(now, self.frame, kernel, host_log, jobs, nodes)
