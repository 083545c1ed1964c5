"""The agent on a real node: NVML for the GPUs, sysfs for the InfiniBand ports, the kernel log, and the node's
inventory; with a job-map directory, which Slurm jobs use each GPU. Each part is isolated: a missing NVML library or
driver, a host without InfiniBand, an unreadable kernel log or job map is one log line and
`gpufleet_source_up{source=...} 0`, never a stopped agent."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

from gpufleet.agent.collector import MetricSource
from gpufleet.agent.runtime import DEV_KMSG, Agent, assemble
from gpufleet.errors import GpufleetError
from gpufleet.model.observe import SchedulerReport
from gpufleet.sources.app_scrape import AppMetricsSource, AppScrape
from gpufleet.sources.host import SYSFS_IB, IbSysfsSource, ib_ports, port_speeds, read_inventory
from gpufleet.sources.slurm_jobmap import JobMapSource
from gpufleet.telemetry.exposition import ExpositionConfig
from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.agent")


def host_agent(
    *,
    host: str,
    port: int,
    interval: float,
    data_dir: Path,
    control_plane: str | None,
    token: Callable[[], str | None],
    exposition: ExpositionConfig | None = None,
    node: str | None = None,
    kmsg_file: Path | None = None,
    ib_sysfs: Path = SYSFS_IB,
    labels: dict[str, str] | None = None,
    scheduler: Callable[[], SchedulerReport | None] | None = None,
    job_map_dir: Path | None = None,
    app_targets: list[str] | None = None,
) -> Agent:
    name = node or socket.gethostname()
    nvml = None
    down: list[tuple[str, str]] = []
    try:
        from gpufleet.sources.nvml import NvmlSource

        nvml = NvmlSource(name)
        entities = nvml.entities()
    except GpufleetError as exc:
        down.append(("nvml", exc.message))
        entities = []
    try:
        ports = ib_ports(ib_sysfs, name)
    except GpufleetError as exc:
        down.append(("ib-sysfs", exc.message))
        ports = []
    frame = MetricFrame(tuple(entities), tuple(ports))
    sources: list[MetricSource] = []
    if nvml is not None:
        sources.append(nvml)
    if ports:
        sources.append(IbSysfsSource(ib_sysfs))
    if job_map_dir is not None:
        sources.append(JobMapSource(job_map_dir))
    scrape = AppScrape(app_targets, every_s=max(interval, 5.0)) if app_targets else None
    if scrape is not None:
        sources.append(AppMetricsSource(scrape))
    inventory = lambda: read_inventory(name, nvml, ib_sysfs, labels)  # noqa: E731
    agent = assemble(
        name,
        frame,
        sources,
        inventory=inventory,
        interval=interval,
        host=host,
        port=port,
        data_dir=data_dir,
        control_plane=control_plane,
        token=token,
        exposition=exposition,
        kernel_log=kmsg_file or DEV_KMSG,
        scheduler=scheduler,
        port_speeds_gbps=port_speeds(frame, inventory()) if ports else None,
    )
    if scrape is not None:
        agent.stoppers.insert(0, scrape)
    for source, why in down:  # said once, and kept visible in /metrics and /healthz
        agent.collector.report(source, False, why)
    return agent
