"""A node: capacity, labels, taints, cordon state and conditions."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.model.fabric import Nic
from gpufleet.model.gpu import Gpu

GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA's; a node's own is `Node.gpu_resource`


class TaintEffect(StrEnum):
    no_schedule = "NoSchedule"
    prefer_no_schedule = "PreferNoSchedule"
    no_execute = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


@dataclass(slots=True)
class NodeCondition:
    type: str  # Ready, GpuHealthy, FabricHealthy, ...
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    message: str = ""
    since: float = 0.0  # seconds since the cluster clock's epoch


@dataclass(slots=True)
class SoftwareFacts:
    """What a node runs: mismatches here are a classic cause of failed jobs."""

    driver_version: str = "550.90.07"
    cuda_version: str = "12.4"
    kernel: str = "5.15.0-119-generic"
    fabric_manager_version: str = "550.90.07"
    nccl_version: str = "2.21.5"


@dataclass(slots=True)
class Node:
    name: str
    pool: str
    cpu_milli: int
    memory_mib: int
    gpus: list[Gpu] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    unschedulable: bool = False  # cordoned
    conditions: list[NodeCondition] = field(default_factory=list)
    rack: str = ""
    software: SoftwareFacts = field(default_factory=SoftwareFacts)

    @property
    def gpu_model(self) -> str | None:
        return self.gpus[0].model.name if self.gpus else None

    @property
    def gpu_vendor(self) -> str | None:
        return self.gpus[0].model.vendor if self.gpus else None

    @property
    def gpu_resource(self) -> str:
        """The resource its accelerators' device plugin advertises (nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi)."""
        return self.gpus[0].model.resource if self.gpus else GPU_RESOURCE

    def capacity(self) -> dict[str, int]:
        res = {"cpu": self.cpu_milli, "memory": self.memory_mib * 1024 * 1024}
        if self.gpus:
            res[self.gpu_resource] = len(self.gpus)
        return res

    def allocatable(self) -> dict[str, int]:
        """Unhealthy GPUs reduce allocatable, never capacity (as the device plugin reports them)."""
        res = self.capacity()
        if self.gpus:
            res[self.gpu_resource] = sum(1 for g in self.gpus if g.schedulable)
        return res

    def condition(self, type_: str) -> NodeCondition | None:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        return None

    def set_condition(self, cond: NodeCondition) -> None:
        self.conditions = [c for c in self.conditions if c.type != cond.type] + [cond]

    @property
    def ready(self) -> bool:
        cond = self.condition("Ready")
        return cond is None or cond.status == "True"
