"""`gpufleet agent --sim`: the agent a real node runs, reading one of the twin's nodes instead (or all of them):
the same collector, edge detectors, spool and pusher, with the twin as its sources and its clock running in real
time times `speed`. Who uses each GPU comes through the agent's own attribution, its readers answered by the twin
node (pod-resources, NVML's processes, cgroups and the pod list), MIG instances as entities of their own."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent.actions import Commands
from gpufleet.agent.clock import ClockWatch
from gpufleet.agent.runtime import Agent, assemble, locked
from gpufleet.background import Background
from gpufleet.cost.config import CostConfig
from gpufleet.model.kernel import KernelEvent
from gpufleet.parsers.kernel.kmsg import KmsgParser
from gpufleet.sim.attribution_source import attribution_source
from gpufleet.sim.clock import TwinClocks
from gpufleet.sim.fleet import node_inventory
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.source import TwinSource
from gpufleet.sim.twin import Twin
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame


class TwinClock(Background):
    """Steps a twin in real time (times `speed`), under a lock the collector shares."""

    thread_name = "twin-clock"

    def __init__(self, twin: Twin, speed: float) -> None:
        super().__init__()
        self.twin = twin
        self.speed = speed
        self.lock = threading.RLock()

    def run(self) -> None:
        start_wall, start_sim = time.monotonic(), self.twin.time
        while not self.stopping.is_set():
            target = start_sim + (time.monotonic() - start_wall) * self.speed
            with self.lock:
                while self.twin.time + self.twin.tick <= target:
                    self.twin.step()
            self.stopping.wait(min(0.2, self.twin.tick / self.speed))


class TwinKernelLog:
    """The twin node's kernel log, read like a real one: new lines through the streaming parser."""

    def __init__(self, twin: Twin, node: str) -> None:
        self.twin, self.node = twin, node
        self.parser = KmsgParser(host=node)
        self.seen = len(twin.kmsg[node])
        self.edge_events: Callable[[list[KernelEvent]], None] | None = None

    def after_collect(self, frame: MetricFrame) -> None:
        lines = self.twin.kmsg[self.node]
        events: list[KernelEvent] = []
        for line in lines[self.seen :]:
            events += self.parser.feed_line(line)
        self.seen = len(lines)
        if events and self.edge_events is not None:
            self.edge_events(events)


def sim_agent(
    scenario: Path,
    *,
    node: str | None,
    host: str,
    port: int,
    interval: float,
    speed: float,
    data_dir: Path,
    control_plane: str | None,
    token: Callable[[], str | None],
    exposition: ExpositionConfig | None = None,
    cost: CostConfig | None = None,
) -> Agent:
    twin, _ = build_twin(scenario, epoch=time.time())  # its jobs' timestamps on the wall clock Prometheus reads
    clock = TwinClock(twin, speed)
    source = TwinSource(twin, node=node, mig_instances=True, attribution=False, cost=cost)
    frame = source.new_frame()
    name = node or f"{socket.gethostname()}-sim"
    clocks = TwinClocks(twin.seed)  # the twin node's chrony, read as a real agent reads its node's
    agent = assemble(
        name,
        frame,
        [source, attribution_source(twin, node)],
        inventory=lambda: node_inventory(twin, node or twin.cluster.nodes[0].name),
        interval=interval,
        host=host,
        port=port,
        data_dir=data_dir,
        control_plane=control_plane,
        token=token,
        exposition=exposition,
        kernel_log=None,
        guard=locked(clock.lock),
        clock=ClockWatch(lambda: clocks.fact(name, time.time())),
        action_commands=Commands({}, None),  # its node is simulated: no command of this host acts for it
        stoppers=[clock],
    )
    if node is not None and agent.edge is not None:
        kernel = TwinKernelLog(twin, node)
        kernel.edge_events = agent.edge.kernel_events
        agent.collector.after.insert(0, kernel.after_collect)
    return agent
