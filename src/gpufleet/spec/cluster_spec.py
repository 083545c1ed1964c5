"""The `kind: Cluster` manifest: node pools and a fabric."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.errors import NotFoundError
from gpufleet.model.fabric import Transport
from gpufleet.model.node import TaintEffect
from gpufleet.spec.base import API_VERSION, Manifest, Metadata


class GpuSpec(Manifest):
    model: str
    count: int = Field(ge=1, le=72)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        try:
            return get_gpu_model(value).name
        except NotFoundError as exc:
            raise ValueError(f"{exc.message}; {exc.fix}") from None


class NicSpec(Manifest):
    count: int = Field(default=0, ge=0, le=32)
    speed_gbps: float = Field(default=400.0, gt=0)


class TaintSpec(Manifest):
    key: str
    value: str = ""
    effect: TaintEffect


class SoftwareSpec(Manifest):
    driver_version: str = "550.90.07"
    cuda_version: str = "12.4"
    kernel: str = "5.15.0-119-generic"
    fabric_manager_version: str | None = None  # defaults to the driver version
    nccl_version: str = "2.21.5"


class NodePoolSpec(Manifest):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    count: int = Field(ge=1, le=20000)
    gpu: GpuSpec | None = None
    nics: NicSpec = NicSpec()
    cpu_milli: int = Field(default=224_000, gt=0)
    memory_mi_b: int = Field(default=2_000_000, gt=0, alias="memoryMiB")
    labels: dict[str, str] = {}
    taints: list[TaintSpec] = []
    nodes_per_rack: int = Field(default=4, ge=1)
    software: SoftwareSpec | None = None


class FabricSpec(Manifest):
    topology: Literal["rail-optimized-fat-tree", "fat-tree", "none"] = "rail-optimized-fat-tree"
    transport: Transport = Transport.ib
    leaf_radix: int = Field(default=64, ge=4)
    link_speed_gbps: float = Field(default=400.0, gt=0)
    nodes_per_scalable_unit: int | None = Field(default=None, ge=1)
    sharp: bool = False

    @property
    def nodes_per_su(self) -> int:
        return self.nodes_per_scalable_unit or self.leaf_radix // 2


class ClusterBody(Manifest):
    node_pools: list[NodePoolSpec] = Field(min_length=1)
    fabric: FabricSpec = FabricSpec()
    software: SoftwareSpec = SoftwareSpec()
    ambient_c: float = Field(default=25.0, ge=-10, le=60)
    cost_per_gpu_hour: dict[str, float] = {}

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterBody:
        names = [p.name for p in self.node_pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique; repeated: {', '.join(dupes)}")
        return self


class ClusterManifest(Manifest):
    api_version: Literal["gpufleet.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Cluster"]
    metadata: Metadata
    spec: ClusterBody


def default_api_version() -> str:
    return API_VERSION
