"""The agent on a real GPU node: NVML for the GPUs, plus this host's InfiniBand ports and kernel log."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent.collector import EventSource, MetricSource
from gpufleet.agent.runtime import Agent, _assemble
from gpufleet.sources.nvml import NvmlSource
from gpufleet.telemetry.exposition import ExpositionConfig


def host_agent(
    *,
    host: str,
    port: int,
    interval: float,
    data_dir: Path,
    control_plane: str | None,
    token: Callable[[], str | None],
    exposition: ExpositionConfig | None = None,
) -> Agent:
    hostname = socket.gethostname()
    nvml = NvmlSource(hostname)
    frame = nvml.new_frame()
    sources: list[MetricSource] = [nvml]
    events: list[EventSource] = []
    return _assemble(
        frame, sources, events, interval, exposition, host, port, data_dir, control_plane, token, agent_id=hostname
    )
