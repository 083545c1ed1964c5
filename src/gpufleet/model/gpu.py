"""A GPU and its MIG instances."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.catalog.gpus import GpuModelSpec


class GpuHealth(StrEnum):
    healthy = "Healthy"
    degraded = "Degraded"  # usable but needs attention (e.g. row remap pending)
    unhealthy = "Unhealthy"  # must not receive new work
    lost = "Lost"  # fell off the bus; NVML cannot reach it


@dataclass(slots=True)
class MigInstance:
    """A GPU instance carved out of a MIG-enabled GPU, placed on the 8-wide memory-slice axis."""

    profile: str
    gi_id: int
    start: int
    size: int
    uuid: str


@dataclass(slots=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str  # 00000000:18:00.0, as NVML prints it
    serial: str
    model: GpuModelSpec
    minor: int
    nvlink_peers: list[int] = field(default_factory=list)
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = field(default_factory=list)
    health: GpuHealth = GpuHealth.healthy
    health_reason: str = ""

    @property
    def memory_mib(self) -> int:
        return self.model.memory_mib

    @property
    def vendor(self) -> str:
        return self.model.vendor

    @property
    def device(self) -> str:
        """The device node's name: nvidiaN (dcgm-exporter's `device` label), renderD<128+N> for an AMD GPU, accelN
        for a Gaudi."""
        if self.model.vendor == "amd":
            return f"renderD{128 + self.minor}"
        if self.model.vendor == "intel":
            return f"accel{self.minor}"
        return f"nvidia{self.minor}"

    @property
    def pci_short(self) -> str:
        """The form kernel lines are matched on: 0000:18:00 (Xid lines; amdgpu and habanalabs print the function
        too, which normalising drops)."""
        domain, bus, rest = self.pci_bus_id.lower().split(":")
        return f"{domain[-4:]}:{bus}:{rest.split('.')[0]}"

    @property
    def schedulable(self) -> bool:
        return self.health in (GpuHealth.healthy, GpuHealth.degraded)
