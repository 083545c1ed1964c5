"""Assemble an agent: its sources, the collector and /metrics with the kernel log's Xid series, and (with a control
plane to report to) the edge detectors, the durable spool and the pusher, the kernel-log follower handing its reports
to both."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpufleet.agent.actions import Commands, NodeActionRunner, NodeFacts
from gpufleet.agent.bmc import BmcWatch
from gpufleet.agent.clock import ClockWatch
from gpufleet.agent.collector import Collector, MetricSource
from gpufleet.agent.edge import EdgeAgent
from gpufleet.agent.enroll import NodeToken
from gpufleet.agent.http import make_server, serve_in_thread
from gpufleet.agent.kernel import KernelLog, MemoryPositions, Positions
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.agent.xids import XidWindow
from gpufleet.model.kernel import KernelEvent
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
    guard: Callable[[Callable[[], None]], None] | None = None,
    stoppers: list[Stoppable] | None = None,
    bmc: BmcWatch | None = None,
    clock: ClockWatch | None = None,
    action_commands: Commands | None = None,
    enroll: bool = True,
) -> Agent:
    """An agent for `node`. It serves /metrics, the Xids of `kernel_log` (None: not followed) and the BMC's sensors
    (`bmc`, read in its own thread) and the clock's (`clock`, likewise) among them; with a control plane it also
    detects at the edge, hands the kernel log's reports and the BMC's reads to the edge (the SEL's position kept
    in the spool), and pushes."""
    xids = None
    if kernel_log is not None:  # /dev/kmsg's uptime stamps are this boot's, on the monotonic clock
        xids = XidWindow(node, window_ms=frame.window_ms, boot_clock=time.monotonic if kernel_log == DEV_KMSG else None)
    all_sources = [*sources, xids] if xids is not None else list(sources)
    if bmc is not None:
        all_sources.append(bmc)
    if clock is not None:  # read in its own thread; the collector serves its last reading
        all_sources.append(clock)
    collector = Collector(frame, all_sources, interval=interval, exposition=exposition, guard=guard)
    agent = Agent(collector, host, port, node, stoppers=list(stoppers or []))
    if bmc is not None:
        agent.stoppers.append(bmc)
    if clock is not None:
        agent.stoppers.insert(0, clock)  # started first: the first push carries its reading
    if control_plane is None:
        if kernel_log is not None and xids is not None:  # for the Xid series alone: a file is begun at its end
            follow = _follower(kernel_log, xids.observe, MemoryPositions(), node, xids, from_start=False)
            agent.stoppers.append(follow)
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
    if clock is not None:
        state.read_clock = lambda: clock.latest
    runner = NodeActionRunner(data_dir / f"actions-{node}", node, _facts(state), action_commands)
    own = NodeToken(data_dir / f"token-{node}", token, control_plane, node, enroll=enroll)
    pusher = BatchPusher(spool, state, control_plane, own, agent=node, node=node, interval=interval, actions=runner)
    runner.wake = pusher.wake
    edge = EdgeAgent(
        node,
        frame,
        spool,
        state,
        inventory,
        jobs=jobs,
        scheduler=scheduler,
        wake=pusher.wake,
    )
    collector.after.append(edge.after_collect)
    agent.pusher, agent.edge, agent.spool = pusher, edge, spool
    if bmc is not None:  # started with the agent, after this: its first read finds the spool
        bmc.positions, bmc.deliver = spool, edge.bmc_read
    if kernel_log is not None and xids is not None:
        window = xids

        def deliver(events: list[KernelEvent]) -> None:
            edge.kernel_events(events)  # to the control plane first, as without the Xid series
            try:
                window.observe(events)
            except Exception:  # the metrics' side never stops the follower the control plane depends on
                log.exception("the Xid series missed a kernel-log read")

        agent.stoppers.append(_follower(kernel_log, deliver, spool, node, xids))
    return agent


def _facts(state: NodeState) -> NodeFacts:
    """What node actions check against: the pods holding each GPU and the GPUs, from the latest collection."""

    def holders() -> dict[int, str]:
        with state.lock:
            m = state.metrics
        return {} if m is None or not m.held else {g: pod for g, pod in zip(m.gpus, m.held, strict=True) if pod}

    def gpus() -> list[int]:
        with state.lock:
            m = state.metrics
        return [] if m is None else list(m.gpus)

    def gpu_model() -> str:
        with state.lock:
            inventory = state.inventory
        return inventory.gpus[0].model if inventory is not None and inventory.gpus else ""

    return NodeFacts(holders, gpus, gpu_model)


def _follower(
    kernel_log: Path,
    deliver: Callable[[list[KernelEvent]], None],
    positions: Positions,
    node: str,
    xids: XidWindow,
    *,
    from_start: bool = True,
) -> KernelLog:
    """The kernel-log follower: its reports to `deliver`, its state to the Xid source, which says it on /metrics as
    `gpufleet_source_up{source="kmsg"}` at each collection."""
    return KernelLog(
        deliver,
        positions,
        path=None if kernel_log == DEV_KMSG else kernel_log,
        host=node,
        status=xids.status,
        from_start=from_start,
    )


def locked(lock: threading.RLock | threading.Lock) -> Callable[[Callable[[], None]], None]:
    """A collector guard that reads the sources under `lock` (the twin's, for a simulated node)."""

    def guard(fn: Callable[[], None]) -> None:
        with lock:
            fn()

    return guard
