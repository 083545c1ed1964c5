"""The agent on a real node: the accelerators' library (NVML, AMD SMI or Habana's HLML), sysfs for the InfiniBand ports,
the kernel log, the BMC (ipmitool: fans, power supplies, temperatures, its event log), the clock (chrony, ntpd,
systemd-timesyncd or the kernel's adjtimex state) and the node's inventory; with a job-map directory, which Slurm
jobs use each GPU. Each part is isolated: a missing library or driver, a host without InfiniBand or without a
reachable BMC, an unreadable kernel log or job map is one log line and `gpufleet_source_up{source=...} 0`, never a
stopped agent.

`accelerators="auto"` tries NVML, then amdsmi, then pyhlml, and keeps the first that starts with devices; only
when none does are all of them reported down. Naming a vendor tries that library alone.

On an NVIDIA node DCGM's host engine (sources/gpu/dcgm.py) adds its profiling fields, health watches, policy
violations and per-job statistics: `dcgm="auto"` uses the local nv-hostengine when DCGM is installed and running and
says nothing otherwise; a target asked for explicitly (embedded, host:port) that cannot be read is
`gpufleet_source_up{source="dcgm"} 0` with the reason."""

from __future__ import annotations

import importlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpufleet.agent.actions import Commands
from gpufleet.agent.attribution import AllotmentReader, AttributionSource, OwnerReader, ProcessReader
from gpufleet.agent.bmc import DEFAULT_INTERVAL_S as DEFAULT_BMC_INTERVAL_S
from gpufleet.agent.bmc import BmcWatch
from gpufleet.agent.clock import ClockWatch
from gpufleet.agent.collector import MetricSource
from gpufleet.agent.fabric_settings import SETTINGS_EVERY_S, settings_watch
from gpufleet.agent.runtime import DEV_KMSG, Agent, assemble
from gpufleet.cost.config import CostConfig
from gpufleet.cost.idle import IdleCost
from gpufleet.cost.prices import prices_by_model
from gpufleet.errors import GpufleetError, UserError
from gpufleet.model.affinity import HostAffinity
from gpufleet.model.observe import NodeInventory, SchedulerReport
from gpufleet.sources.gpu.dcgm import DcgmSource, DcgmTarget, open_dcgm
from gpufleet.sources.node.app_scrape import AppMetricsSource, AppScrape
from gpufleet.sources.node.bmc import DEFAULT_TIMEOUT_S as DEFAULT_BMC_TIMEOUT_S
from gpufleet.sources.node.bmc import IpmiTool
from gpufleet.sources.node.clock import ClockReader
from gpufleet.sources.node.inventory import SYSFS_IB, IbSysfsSource, ib_ports, read_inventory
from gpufleet.sources.node.pci_affinity import SYS, read_host_affinity
from gpufleet.sources.workload.slurm_jobmap import JobMapAllotments
from gpufleet.telemetry.exposition.config import ExpositionConfig
from gpufleet.telemetry.frame import GpuEntity, MetricFrame

log = logging.getLogger("gpufleet.agent")

ACCELERATORS = ("auto", "nvidia", "amd", "intel")
POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
KUBELET_PODS = "https://127.0.0.1:10250/pods"


@dataclass(frozen=True, slots=True)
class BmcOptions:
    """How often the node's BMC is read (its sensors and event log, through ipmitool), and how long one ipmitool
    command may take."""

    interval_s: float = DEFAULT_BMC_INTERVAL_S
    timeout_s: float = DEFAULT_BMC_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class AttributionOptions:
    """Where the node's attribution readers read: the kubelet's pod-resources socket (None: not on Kubernetes; the
    default path is used only when it exists), the pod list that names each container (the kubelet's /pods or the
    API server's pods of this node; its CA when verified), and the host's /proc (the host's, with hostPID or
    mounted)."""

    pod_resources: Path | None = POD_RESOURCES_SOCKET
    pod_list: str | None = KUBELET_PODS
    pod_list_ca: str | None = None
    proc_root: Path = Path("/proc")


# vendor -> (source name, module, class): the order `auto` tries them in
GPU_SOURCES: dict[str, tuple[str, str, str]] = {
    "nvidia": ("nvml", "gpufleet.sources.gpu.nvml", "NvmlSource"),
    "amd": ("amdsmi", "gpufleet.sources.gpu.amdsmi", "AmdSmiSource"),
    "intel": ("hlml", "gpufleet.sources.gpu.hlml", "HlmlSource"),
}


def open_gpu_source(hostname: str, accelerators: str = "auto") -> tuple[Any | None, list[tuple[str, str]]]:
    """The node's GPU source and, when there is none, why each library tried is down (for source_up)."""
    if accelerators not in ACCELERATORS:
        raise UserError(f"unknown accelerators {accelerators!r}", fix=f"use one of: {', '.join(ACCELERATORS)}")
    vendors = list(GPU_SOURCES) if accelerators == "auto" else [accelerators]
    down: list[tuple[str, str]] = []
    for vendor in vendors:
        name, module, cls = GPU_SOURCES[vendor]
        try:
            source = getattr(importlib.import_module(module), cls)(hostname)
        except GpufleetError as exc:
            down.append((name, exc.message))
            continue
        if not source.handles and accelerators == "auto":
            down.append((name, "the library started but lists no device"))
            continue
        log.info("accelerators: %s found %d device(s) through %s", vendor, len(source.handles), name)
        return source, []
    tried = "; ".join(f"{name}: {why}" for name, why in down)
    log.info("accelerators: no GPU library found (%s)", tried)
    return None, down


def gpu_inventory_for(name: str, source: Any, ib_sysfs: Path, labels: dict[str, str] | None) -> NodeInventory:
    """The node's inventory: NVML's GPUs through read_inventory, AMD's and Gaudi's from their own sources, and the
    GPU<->NIC<->CPU affinity from the sysfs that holds `ib_sysfs`."""
    if source is None or source.name == "nvml":
        inventory = read_inventory(name, source, ib_sysfs, labels)
    else:
        inventory = read_inventory(name, None, ib_sysfs, labels)
        if source.name == "amdsmi":
            from gpufleet.sources.gpu.amdsmi import amd_gpu_inventory

            gpus = amd_gpu_inventory(source)
        else:
            from gpufleet.sources.gpu.hlml import gaudi_inventory

            gpus = gaudi_inventory(source)
        inventory = msgspec.structs.replace(inventory, gpus=gpus, driver=source.driver or inventory.driver)
    return msgspec.structs.replace(inventory, affinity=host_affinity(inventory, ib_sysfs))


def host_affinity(inventory: NodeInventory, ib_sysfs: Path) -> HostAffinity | None:
    """The affinity of the inventory's GPUs (by their PCI addresses; all of sysfs's when the library gave none),
    read from the sysfs `ib_sysfs` is part of (`<root>/class/infiniband`; an InfiniBand directory elsewhere says
    nothing of the rest of sysfs, and none is read). An unreadable tree is logged, not raised: the inventory goes
    without it."""
    if ib_sysfs.parts[-2:] != ("class", "infiniband"):
        return None
    root = SYS if ib_sysfs == SYSFS_IB else ib_sysfs.parents[1]
    named = [(g.index, g.pci_bus_id) for g in inventory.gpus if g.pci_bus_id and g.parent is None]
    try:
        return read_host_affinity(named or None, root)
    except OSError as exc:
        log.info("affinity: %s unreadable (%s)", root, exc)
        return None


def attribution_source(gpus: Any, job_map_dir: Path | None, options: AttributionOptions) -> AttributionSource:
    """The node's attribution readers: allotments from pod-resources (Kubernetes) or the job map (Slurm), processes
    from NVML, and owners from cgroups (through the pod list on Kubernetes). What is not there is said by the
    source."""
    allotments: list[AllotmentReader] = []
    kubernetes = options.pod_resources is not None and (
        options.pod_resources != POD_RESOURCES_SOCKET or options.pod_resources.exists()
    )
    if kubernetes and options.pod_resources is not None:
        from gpufleet.sources.workload.podresources import PodResourcesReader

        allotments.append(PodResourcesReader(str(options.pod_resources)))
    if job_map_dir is not None:
        allotments.append(JobMapAllotments(job_map_dir))
    processes: ProcessReader | None = None
    if gpus is not None and gpus.name == "nvml":
        from gpufleet.sources.gpu.nvml_processes import NvmlProcesses

        processes = NvmlProcesses.of(gpus)
    owners: OwnerReader | None = None
    if processes is not None:
        from gpufleet.sources.workload.cgroups import CgroupOwners

        pods = None
        if kubernetes and options.pod_list:
            from gpufleet.sources.workload.kubelet_pods import KubeletPodList

            pods = KubeletPodList(options.pod_list, verify=options.pod_list_ca or False).index
        owners = CgroupOwners(pods=pods, proc_root=options.proc_root)
    return AttributionSource(allotments, processes, owners)


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
    accelerators: str = "auto",
    attribution: AttributionOptions | None = AttributionOptions(),
    cost: CostConfig | None = None,
    bmc: BmcOptions | None = BmcOptions(),
    dcgm: DcgmTarget | str | None = "auto",
    action_commands: Commands | None = None,
    enroll: bool = True,
    fabric_settings_every_s: float | None = SETTINGS_EVERY_S,
) -> Agent:
    """`fabric_settings_every_s`: how often the host's fabric settings are read for its inventory (None or 0:
    never; a host without an HCA is never read). `cost`: the cost config its idle-cost series is priced with
    (default: the catalog's list prices), the one
    `gpufleet cost report` reads, so the series, the alert and the report agree. `bmc`: how the node's BMC is read
    (None: not read). `dcgm`: DCGM's host engine (sources/gpu/dcgm.py parse_target: "auto", a target, or None)."""
    name = node or socket.gethostname()
    gpus, down = open_gpu_source(name, accelerators)
    entities = gpus.entities() if gpus is not None else []
    try:
        ports = ib_ports(ib_sysfs, name)
    except GpufleetError as exc:
        down.append(("ib-sysfs", exc.message))
        ports = []
    frame = MetricFrame(tuple(entities), tuple(ports))
    sources: list[MetricSource] = []
    if gpus is not None:
        sources.append(gpus)
        prices = prices_by_model(cost or CostConfig(), [e.model_name for e in entities], labels)
        sources.append(IdleCost(prices))  # after the GPU source: it reads this collection's utilization
    if ports:
        sources.append(IbSysfsSource(ib_sysfs))
    if attribution is not None:
        sources.append(attribution_source(gpus, job_map_dir, attribution))
    dcgm_source = _dcgm_source(gpus, entities, dcgm, interval, down)
    if dcgm_source is not None:  # after attribution: its job statistics follow this collection's Slurm jobs
        sources.append(dcgm_source)
    scrape = AppScrape(app_targets, every_s=max(interval, 5.0)) if app_targets else None
    if scrape is not None:
        sources.append(AppMetricsSource(scrape))
    fabric_settings = settings_watch(name, ib_sysfs, fabric_settings_every_s)

    def inventory() -> NodeInventory:
        read = gpu_inventory_for(name, gpus, ib_sysfs, labels)
        if fabric_settings is None or fabric_settings.latest is None:
            return read
        return msgspec.structs.replace(read, fabric_settings=fabric_settings.latest)

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
        bmc=BmcWatch(name, IpmiTool(timeout_s=bmc.timeout_s), interval_s=bmc.interval_s) if bmc is not None else None,
        clock=ClockWatch(ClockReader().read),
        action_commands=action_commands,
        enroll=enroll,
    )
    if scrape is not None:
        agent.stoppers.insert(0, scrape)
    if fabric_settings is not None:
        agent.stoppers.insert(0, fabric_settings)  # its first read starts before the first collection
        if agent.edge is not None:  # a new read goes out with the next collection, not a minute later
            fabric_settings.changed = agent.edge.inventory.recheck
    if dcgm_source is not None:
        agent.stoppers.append(dcgm_source)  # after the collector stops: unregisters its policy, disconnects
    for source, why in down:  # said once, and kept visible in /metrics and /healthz
        agent.collector.report(source, False, why)
    return agent


def _dcgm_source(
    gpus: Any,
    entities: list[GpuEntity],
    choice: DcgmTarget | str | None,
    interval: float,
    down: list[tuple[str, str]],
) -> DcgmSource | None:
    """DCGM's source for an NVIDIA node's GPUs (they are matched by UUID to NVML's); why there is none goes to
    `down` only when DCGM was asked for explicitly."""
    if choice is None:
        return None
    if gpus is None or gpus.name != "nvml":
        if choice != "auto":
            down.append(("dcgm", "DCGM reads NVIDIA GPUs, and NVML found none here"))
        return None
    source, why = open_dcgm(entities, choice, interval)
    if why:
        down.append(("dcgm", why))
    if source is not None:  # one source per series: NVML's GPM leaves DCGM the profiling fields it fills
        gpus.gpm.hand_over(source.prof_by_gpu(), source.name)
    return source
