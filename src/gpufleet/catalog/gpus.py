"""GPU model specifications (gpu_models.yaml)."""

from __future__ import annotations

from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog._files import read_text
from gpufleet.errors import NotFoundError


class GpuModelSpec(BaseModel):
    """What a GPU model is: the facts a twin, a scheduler and a health check need."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    product_name: str
    aliases: tuple[str, ...] = ()
    arch: str
    compute_capability: str
    pci_device_id: str
    memory_mib: int = Field(gt=0)
    tdp_w: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    max_sm_clock_mhz: int = Field(gt=0)
    max_mem_clock_mhz: int = Field(gt=0)
    slowdown_temp_c: float
    shutdown_temp_c: float
    max_operating_temp_c: float
    sm_count: int = Field(gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: int = Field(ge=1, le=32)
    nvlink_gen: int = Field(ge=0)
    nvlink_links: int = Field(ge=0)
    nvlink_bw_gbps_per_link: float = Field(ge=0)
    nvswitch: bool
    mig_geometry: str | None = None
    fp16_dense_tflops: float = Field(gt=0)
    disclosed: bool = True

    @property
    def mig_capable(self) -> bool:
        return self.mig_geometry is not None

    @property
    def nvlink_bw_gbps(self) -> float:
        """Total NVLink bandwidth per direction, GB/s."""
        return self.nvlink_links * self.nvlink_bw_gbps_per_link

    @property
    def memory_gb_label(self) -> int:
        """Memory in GB as product names round it (80 for 81559 MiB)."""
        return round(self.memory_mib / 1024)

    @property
    def compute_major(self) -> int:
        return int(self.compute_capability.split(".")[0])


@cache
def load_gpu_models() -> dict[str, GpuModelSpec]:
    raw = yaml.safe_load(read_text("gpu_models.yaml"))
    return {name: GpuModelSpec(name=name, **fields) for name, fields in raw.items()}


@cache
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for name, spec in load_gpu_models().items():
        index[name] = name
        index[spec.product_name.lower()] = name
        for alias in spec.aliases:
            index[alias] = name
    return index


def get_gpu_model(name: str) -> GpuModelSpec:
    """Look a model up by short name, alias or product name (case-insensitive)."""
    key = _alias_index().get(name.strip().lower())
    if key is None:
        allowed = ", ".join(sorted(load_gpu_models()))
        raise NotFoundError(f"unknown GPU model {name!r}", fix=f"use one of: {allowed}")
    return load_gpu_models()[key]
