"""Assemble an agent: its sources (the twin, or NVML and the host), the collector, the HTTP endpoint, the pusher."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.collector import Collector, EventSource, MetricSource
from gpufleet.agent.http import make_server, serve_in_thread
from gpufleet.agent.pusher import EventPusher
from gpufleet.agent.spool import EventSpool
from gpufleet.telemetry.exposition import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame


@dataclass
class Agent:
    collector: Collector
    host: str
    port: int
    pusher: EventPusher | None = None
    stoppers: list[object] = field(default_factory=list)  # objects with .stop(), stopped in reverse order
    _server: object | None = None

    def start(self) -> None:
        for obj in self.stoppers:
            getattr(obj, "start", lambda: None)()
        self.collector.collect_once()  # serve a full body from the first scrape on
        self.collector.start()
        if self.pusher is not None:
            self.collector.on_events = self.pusher.wake
            self.pusher.start()
        server = make_server(self.collector, self.host, self.port)
        self.port = server.server_address[1]
        self._server = server
        serve_in_thread(server)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # type: ignore[attr-defined]
            self._server.server_close()  # type: ignore[attr-defined]
        self.collector.stop()
        if self.pusher is not None:
            self.pusher.stop()
        for obj in reversed(self.stoppers):
            obj.stop()  # type: ignore[attr-defined]


class _TwinClock:
    """Steps an agent's own twin in real time (times `speed`), under a lock the collector shares."""

    def __init__(self, twin: object, speed: float) -> None:
        from gpufleet.sim.twin import Twin

        assert isinstance(twin, Twin)
        self.twin = twin
        self.speed = speed
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="twin-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        import time

        start_wall, start_sim = time.monotonic(), self.twin.time
        while not self._stop.is_set():
            target = start_sim + (time.monotonic() - start_wall) * self.speed
            with self.lock:
                while self.twin.time + self.twin.tick <= target:
                    self.twin.step()
            self._stop.wait(min(0.2, self.twin.tick / self.speed))


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
) -> Agent:
    from gpufleet.sim.twin import Twin
    from gpufleet.sources.twin import TwinEvents, TwinSource

    twin, _ = Twin.from_scenario(scenario)
    clock = _TwinClock(twin, speed)
    source = TwinSource(twin, node=node)
    frame = source.new_frame()
    events: list[EventSource] = [TwinEvents(twin, node)]
    return _assemble(
        frame,
        [source],
        events,
        interval,
        exposition,
        host,
        port,
        data_dir,
        control_plane,
        token,
        agent_id=node or f"{socket.gethostname()}-sim",
        guard=_locked(clock.lock),
        stoppers=[clock],
    )


def _locked(lock: threading.Lock):  # type: ignore[no-untyped-def]
    def guard(fn):  # type: ignore[no-untyped-def]
        with lock:
            fn()

    return guard


def _assemble(
    frame: MetricFrame,
    sources: list[MetricSource],
    events: list[EventSource],
    interval: float,
    exposition: ExpositionConfig | None,
    host: str,
    port: int,
    data_dir: Path,
    control_plane: str | None,
    token: Callable[[], str | None],
    *,
    agent_id: str,
    guard: object = None,
    stoppers: list[object] | None = None,
) -> Agent:
    spool = EventSpool(data_dir / f"spool-{agent_id}.db")
    collector = Collector(frame, sources, events, spool, interval=interval, exposition=exposition, guard=guard)  # type: ignore[arg-type]
    pusher = EventPusher(spool, control_plane, token, agent_id) if control_plane else None
    agent = Agent(collector, host, port, pusher=pusher, stoppers=list(stoppers or []))
    agent.stoppers.append(_Closer(spool))
    return agent


class _Closer:
    def __init__(self, spool: EventSpool) -> None:
        self.spool = spool

    def stop(self) -> None:
        self.spool.close()
