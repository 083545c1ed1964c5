"""Who uses a GPU and what each used: the workload a device or process belongs to, the processes a GPU runs,
and one collection's division of a device among its workloads. Shared by the live readers that find them, the
parsers of tools that list them, and the telemetry that attributes and exports them (`telemetry.attribution`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Attribution:
    """The workload using a GPU, as the kubelet pod-resources API (or a Slurm job map) tells it."""

    pod: str = ""
    namespace: str = ""
    container: str = ""
    workload: str = ""  # the job or service the pod belongs to (its owner), for cost and the application join
    hpc_job: str = ""  # a Slurm job id, for a job's own attribution (no pod)


class Sharing(StrEnum):
    exclusive = "exclusive"  # one holder, one replica
    time_slicing = "time-slicing"
    mps = "mps"
    mig = "mig"  # a MIG instance with one holder
    mig_shared = "mig-time-slicing"  # a MIG instance time-sliced among several


@dataclass(frozen=True, slots=True)
class Allotment:
    """One device ID given to one workload (a container, or a Slurm job)."""

    device_id: str  # GPU-<uuid>, GPU-<uuid>::<replica>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>, or a GPU index
    holder: Attribution
    resource: str = ""  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared, ...


@dataclass(frozen=True, slots=True)
class Allotments:
    """What an allotment reader found: each device ID given to a workload, and how many replicas each GPU offers
    (pod-resources' GetAllocatableResources; empty when unknown)."""

    allotments: tuple[Allotment, ...]
    replicas: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process on a GPU, as NVML lists it."""

    pid: int
    gpu_uuid: str  # the physical GPU
    gpu_instance_id: int | None = None  # the MIG GPU instance it runs in; None outside MIG
    used_memory_mib: float | None = None  # None: the driver does not account it (NVML_VALUE_NOT_AVAILABLE)
    sm_util: float | None = None  # percent of the interval its kernels ran; None: no sample this interval
    mem_util: float | None = None
    mps: bool = False  # an MPS client (nvmlDeviceGetMPSComputeRunningProcesses)
    name: str = ""


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One collection's processes, and which GPUs keep per-process utilization samples (where a process without a
    sample ran no kernel in the interval)."""

    processes: tuple[GpuProcess, ...] = ()
    sampled: frozenset[str] = frozenset()  # UUIDs of GPUs whose samples were read


@dataclass(frozen=True, slots=True)
class Share:
    """What one workload used of one device in one collection."""

    holder: Attribution
    memory_mib: float = math.nan  # NaN: not known (no per-process memory, or no PID map on a shared device)
    compute_pct: float = math.nan
    compute_method: str = ""  # measured | estimated | "" (unknown)
    mem_util_pct: float = math.nan
    power_w: float = math.nan
    power_method: str = ""
    processes: int = 0
    allotted: bool = True  # False: its processes run on a device it was not given (e.g. NVIDIA_VISIBLE_DEVICES=all)


@dataclass(frozen=True, slots=True)
class DeviceAttribution:
    sharing: Sharing
    replicas: int
    shares: tuple[Share, ...]
    unattributed_memory_mib: float = math.nan  # FB_USED less the workloads' processes
    unattributed_compute_pct: float = math.nan
    compute_excess_pct: float = math.nan  # how far measured parts exceeded the device before rescaling (NaN: n/a)

    @property
    def holders(self) -> tuple[Attribution, ...]:
        return tuple(s.holder for s in self.shares)

    def labels_key(self) -> tuple[object, ...]:
        """What the series' labels depend on (not the values)."""
        return (self.sharing, tuple((s.holder, s.allotted, s.compute_method, s.power_method) for s in self.shares))
