"""Accelerator model specifications (gpu_models.yaml), and finding the model a product name stands for.

Every model names its vendor; the scale-up fields (links, bandwidth, topology) describe NVLink, AMD's Infinity
Fabric (XGMI) and Gaudi's on-chip RoCE ports alike.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog._files import read_text
from gpufleet.catalog.vendors import VendorName, VendorSpec, get_vendor
from gpufleet.errors import NotFoundError

# Where no capture gives a model's idle draw, the twin takes this share of its power limit (an estimate, not a fact).
IDLE_SHARE_OF_TDP = 0.12


ScaleUp = Literal["nvlink", "xgmi", "roce", "none"]
ScaleUpTopology = Literal["switch", "mesh", "bridge", "none"]


class GpuModelSpec(BaseModel):
    """What an accelerator model is: the facts a twin, a scheduler and a health check need.

    Facts a vendor does not publish for a model (thermal thresholds, some clocks, SM counts) are left out of the data
    file rather than guessed; they read as None here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    vendor: VendorName = "nvidia"
    product_name: str  # what the vendor's SMI tool and library print (nvidia-smi `name`, amd-smi MARKET_NAME, ...)
    product_names: tuple[str, ...] = ()  # other names the same model prints (board variants, older drivers)
    aliases: tuple[str, ...] = ()
    arch: str
    compute_capability: str = ""  # NVIDIA's CUDA compute capability; empty for other vendors
    gfx_target: str = ""  # AMD's LLVM target (gfx942)
    compute_units: int | None = Field(None, gt=0)  # AMD compute units
    pci_device_id: str = ""  # "0x2330"; empty where no public source gives it
    memory_mib: int = Field(gt=0)
    tdp_w: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    max_sm_clock_mhz: int | None = Field(None, gt=0)
    max_mem_clock_mhz: int | None = Field(None, gt=0)
    # the GPU sensor's slowdown and shutdown limits (NVML's thresholds); on AMD the hotspot (junction) sensor's
    # CRITICAL and EMERGENCY limits, as `amd-smi static --limit` prints them
    slowdown_temp_c: float | None = None
    shutdown_temp_c: float | None = None
    max_operating_temp_c: float | None = None
    sm_count: int | None = Field(None, gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: int = Field(ge=1, le=32)
    nvlink_gen: int = Field(0, ge=0)
    # scale-up links per device and GB/s per direction per link: NVLink, Infinity Fabric (XGMI) or Gaudi's RoCE ports
    nvlink_links: int = Field(ge=0, validation_alias=AliasChoices("nvlink_links", "scaleup_links"))
    nvlink_bw_gbps_per_link: float = Field(
        ge=0, validation_alias=AliasChoices("nvlink_bw_gbps_per_link", "scaleup_bw_gbps_per_link")
    )
    nvswitch: bool = False
    scaleup: ScaleUp | None = None  # None: nvlink where there are links, else none
    scaleup_topology: ScaleUpTopology | None = None  # None: switch with an NVSwitch, bridge with links, else none
    scaleout_ports: int = Field(0, ge=0)  # RoCE scale-out ports on the device itself (Gaudi)
    mig_geometry: str | None = None
    mig_instances: int | None = Field(None, ge=0, le=7)  # the most GPU instances NVIDIA lists; None: not recorded
    compute_partitions: tuple[str, ...] = ()  # AMD compute partition modes (SPX, DPX, QPX, CPX)
    memory_partitions: tuple[str, ...] = ()  # AMD memory (NPS) modes
    fp16_dense_tflops: float = Field(gt=0)
    disclosed: bool = True
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _estimate_idle(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("idle_w") is None and data.get("tdp_w") is not None:
            data = {**data, "idle_w": round(float(data["tdp_w"]) * IDLE_SHARE_OF_TDP)}
        return data

    @model_validator(mode="after")
    def _vendor_facts(self) -> GpuModelSpec:
        # mig-parted configurations select GPUs by PCI device id
        if self.mig_geometry is not None and not self.pci_device_id:
            raise ValueError(f"{self.name}: a MIG geometry needs pci_device_id")
        if self.vendor == "nvidia" and not self.compute_capability:
            raise ValueError(f"{self.name}: an NVIDIA model needs compute_capability")
        if self.vendor != "nvidia" and (self.mig_geometry or self.nvswitch or self.compute_capability):
            raise ValueError(f"{self.name}: MIG, NVSwitch and compute capability are NVIDIA's; this is {self.vendor}")
        if self.vendor != "amd" and (self.compute_partitions or self.memory_partitions):
            raise ValueError(f"{self.name}: compute and memory partition modes are AMD's; this is {self.vendor}")
        return self

    @property
    def vendor_spec(self) -> VendorSpec:
        return get_vendor(self.vendor)

    @property
    def resource(self) -> str:
        """The extended resource its device plugin advertises for a whole device."""
        return self.vendor_spec.resource

    @property
    def scaleup_kind(self) -> ScaleUp:
        if self.scaleup is not None:
            return self.scaleup
        return "nvlink" if self.nvlink_links else "none"

    @property
    def scaleup_shape(self) -> ScaleUpTopology:
        """How the scale-up links join devices: through a switch, a full mesh, bridged pairs, or not at all."""
        if self.scaleup_topology is not None:
            return self.scaleup_topology
        if not self.nvlink_links:
            return "none"
        return "switch" if self.nvswitch else "bridge"

    @property
    def all_to_all(self) -> bool:
        """Every device of a node reaches every other over scale-up links (an NVSwitch or a full mesh)."""
        return self.scaleup_shape in ("switch", "mesh") and self.nvlink_links > 0

    @property
    def partition_capable(self) -> bool:
        """The device can be split: MIG, or AMD's compute partition modes."""
        return self.mig_geometry is not None or len(self.compute_partitions) > 1

    @property
    def mig_capable(self) -> bool:
        return self.mig_geometry is not None

    @property
    def nvlink_bw_gbps(self) -> float:
        """Total scale-up bandwidth per direction, GB/s (NVLink, XGMI or Gaudi's scale-up ports)."""
        return self.nvlink_links * self.nvlink_bw_gbps_per_link

    @property
    def memory_gb_label(self) -> int:
        """Memory in GB as product names round it (80 for 81559 MiB)."""
        return round(self.memory_mib / 1024)

    @property
    def compute_major(self) -> int:
        """CUDA compute capability's major number; 0 for other vendors."""
        return int(self.compute_capability.split(".")[0]) if self.compute_capability else 0


@cache
def load_gpu_models() -> dict[str, GpuModelSpec]:
    raw = yaml.safe_load(read_text("gpu_models.yaml"))
    return {name: GpuModelSpec(name=name, **fields) for name, fields in raw.items()}


@cache
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for name, spec in load_gpu_models().items():
        index[name] = name
        for product in (spec.product_name, *spec.product_names):
            index[product.lower()] = name
        for alias in spec.aliases:
            index[alias] = name
    return index


def _normalised(text: str) -> str:
    """Lower case, single spaces, no leading vendor name: how product names are compared."""
    text = " ".join(text.lower().split())
    for prefix in ("nvidia ", "amd ", "intel "):
        text = text.removeprefix(prefix)
    return text


@cache
def _product_names() -> dict[str, str]:
    names: dict[str, str] = {}
    for name, spec in load_gpu_models().items():
        for product in (spec.product_name, *spec.product_names):
            names[_normalised(product)] = name
    return names


@cache
def _product_pattern() -> re.Pattern[str]:
    # longest first, and whole words only: "a10" must not match inside "a100", nor "l40" inside "l40s"
    names = sorted(_product_names(), key=len, reverse=True)
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")


def model_for_product_name(text: str) -> GpuModelSpec | None:
    """The catalog model a product name stands for, as nvidia-smi, NVML or an nccl-tests header print it.

    Tolerates case, spacing and the "NVIDIA " prefix, finds the name inside a longer line ("device 0 [0x1b]
    NVIDIA H100 80GB HBM3"), and reads a name nvidia-smi's table cut short ("NVIDIA RTX PRO 6000 Blac...") when
    only one model starts that way. None when nothing matches.
    """
    key = _normalised(text)
    models = load_gpu_models()
    exact = _product_names().get(key)
    if exact is not None:
        return models[exact]
    found = _product_pattern().search(key) or _product_pattern().search(" ".join(text.lower().split()))
    if found is not None:
        return models[_product_names()[found.group(1)]]
    return _cut_short(" ".join(text.lower().split()))


def _cut_short(line: str) -> GpuModelSpec | None:
    """A name nvidia-smi's table ended with "...": the one model whose name starts with the words before it."""
    dots = re.search(r"\.\.\.|\u2026", line)
    if dots is None:
        return None
    before = line[: dots.start()].rstrip()
    for start in [0] + [m.end() for m in re.finditer(r"\s", before)]:
        stem = before[start:].removeprefix("nvidia ")
        if len(stem) < 4:
            break
        starts = {name for product, name in _product_names().items() if product.startswith(stem)}
        if len(starts) == 1:
            return load_gpu_models()[starts.pop()]
    return None


def get_gpu_model(name: str) -> GpuModelSpec:
    """Look a model up by short name, alias or product name (case-insensitive)."""
    key = _alias_index().get(name.strip().lower())
    if key is None:
        allowed = ", ".join(sorted(load_gpu_models()))
        raise NotFoundError(f"unknown GPU model {name!r}", fix=f"use one of: {allowed}")
    return load_gpu_models()[key]
