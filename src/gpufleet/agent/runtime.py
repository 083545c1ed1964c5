"""Assemble an agent: its sources, the collector and /metrics, and (with a control plane to report to) the edge
detectors, the kernel-log follower, the durable spool and the pusher."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from gpufleet.agent.collector import Collector, MetricSource
from gpufleet.agent.edge import EdgeAgent
from gpufleet.agent.http import make_server, serve_in_thread
from gpufleet.agent.kernel import KernelLog
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.model.observe import JobFact, NodeInventory, SchedulerReport
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.agent")

DEV_KMSG = Path("/dev/kmsg")


class Stoppable(Protocol):
    def stop(self) -> None: ...


@dataclass
class Agent:
    collector: Collector
    host: str
    port: int
    node: str
    pusher: BatchPusher | None = None
    edge: EdgeAgent | None = None
    spool: RecordSpool | None = None
    stoppers: list[Stoppable] = field(default_factory=list)  # started in order, stopped in reverse
    _server: object | None = None

    def start(self) -> None:
        for obj in self.stoppers:
            getattr(obj, "start", lambda: None)()
        self.collector.collect_once()  # serve a full body from the first scrape on
        self.collector.start()
        if self.pusher is not None:
            self.pusher.start()
        server = make_server(self.collector, self.host, self.port, self._push_status)
        self.port = server.server_address[1]
        self._server = server
        serve_in_thread(server)

    def _push_status(self) -> dict[str, object]:
        if self.pusher is None or self.spool is None:
            return {}
        return {
            "control_plane": {
                "url": self.pusher.url,
                "connected": self.pusher.connected,
                "acked": self.pusher.acked,
                "waiting": len(self.spool),
                "incarnation": self.spool.incarnation,
            }
        }

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # type: ignore[attr-defined]
            self._server.server_close()  # type: ignore[attr-defined]
        self.collector.stop()
        if self.pusher is not None:
            self.pusher.stop()
        for obj in reversed(self.stoppers):
            obj.stop()
        if self.spool is not None:
            self.spool.close()


def assemble(
    node: str,
    frame: MetricFrame,
    sources: list[MetricSource],
    *,
    inventory: Callable[[], NodeInventory],
    interval: float,
    host: str,
    port: int,
    data_dir: Path,
    control_plane: str | None,
    token: Callable[[], str | None],
    exposition: ExpositionConfig | None = None,
    kernel_log: Path | None = DEV_KMSG,
    jobs: Callable[[], list[JobFact] | None] | None = None,
    scheduler: Callable[[], SchedulerReport | None] | None = None,
    port_speeds_gbps: np.ndarray | None = None,
    guard: Callable[[Callable[[], None]], None] | None = None,
    stoppers: list[Stoppable] | None = None,
) -> Agent:
    """An agent for `node`. Without a control plane it only serves /metrics; with one it also detects at the edge,
    follows `kernel_log` (None: not at all) and pushes."""
    collector = Collector(frame, sources, interval=interval, exposition=exposition, guard=guard)
    agent = Agent(collector, host, port, node, stoppers=list(stoppers or []))
    if control_plane is None:
        return agent
    spool = RecordSpool(data_dir / f"spool-{node}.db")
    if spool.new:
        log.warning(
            "no spool in %s: this agent starts a new stream (%s); the kernel log is read from its start, and the "
            "control plane takes the lines it already has once",
            data_dir,
            spool.incarnation,
        )
    state = NodeState()
    pusher = BatchPusher(spool, state, control_plane, token, agent=node, node=node, interval=interval)
    edge = EdgeAgent(
        node,
        frame,
        spool,
        state,
        inventory,
        jobs=jobs,
        scheduler=scheduler,
        port_speeds_gbps=port_speeds_gbps,
        wake=pusher.wake,
    )
    collector.after.append(edge.after_collect)
    agent.pusher, agent.edge, agent.spool = pusher, edge, spool
    if kernel_log is not None:
        follower = KernelLog(
            edge.kernel_events,
            spool,
            path=None if kernel_log == DEV_KMSG else kernel_log,
            host=node,
            status=lambda ok, why: collector.report("kmsg", ok, why),
        )
        agent.stoppers.append(follower)
    return agent


def locked(lock: threading.RLock | threading.Lock) -> Callable[[Callable[[], None]], None]:
    """A collector guard that reads the sources under `lock` (the twin's, for a simulated node)."""

    def guard(fn: Callable[[], None]) -> None:
        with lock:
            fn()

    return guard
