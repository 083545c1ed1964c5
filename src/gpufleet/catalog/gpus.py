"""GPU model specifications (gpu_models.yaml), and finding the model a product name stands for."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog._files import read_text
from gpufleet.errors import NotFoundError

# Where no capture gives a model's idle draw, the twin takes this share of its power limit (an estimate, not a fact).
IDLE_SHARE_OF_TDP = 0.12


class GpuModelSpec(BaseModel):
    """What a GPU model is: the facts a twin, a scheduler and a health check need.

    Facts NVIDIA does not publish for a model (thermal thresholds, some clocks, SM counts) are left out of the data
    file rather than guessed; they read as None here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    product_name: str  # what nvidia-smi and NVML print (`name`)
    product_names: tuple[str, ...] = ()  # other names the same model prints (board variants, older drivers)
    aliases: tuple[str, ...] = ()
    arch: str
    compute_capability: str
    pci_device_id: str = ""  # "0x2330"; empty where no public source gives it
    memory_mib: int = Field(gt=0)
    tdp_w: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    max_sm_clock_mhz: int | None = Field(None, gt=0)
    max_mem_clock_mhz: int | None = Field(None, gt=0)
    slowdown_temp_c: float | None = None
    shutdown_temp_c: float | None = None
    max_operating_temp_c: float | None = None
    sm_count: int | None = Field(None, gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: int = Field(ge=1, le=32)
    nvlink_gen: int = Field(ge=0)
    nvlink_links: int = Field(ge=0)
    nvlink_bw_gbps_per_link: float = Field(ge=0)
    nvswitch: bool
    mig_geometry: str | None = None
    mig_instances: int | None = Field(None, ge=0, le=7)  # the most GPU instances NVIDIA lists; None: not recorded
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
    def _mig_needs_a_device_id(self) -> GpuModelSpec:
        # mig-parted configurations select GPUs by PCI device id
        if self.mig_geometry is not None and not self.pci_device_id:
            raise ValueError(f"{self.name}: a MIG geometry needs pci_device_id")
        return self

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
        for product in (spec.product_name, *spec.product_names):
            index[product.lower()] = name
        for alias in spec.aliases:
            index[alias] = name
    return index


def _normalised(text: str) -> str:
    """Lower case, single spaces, no leading "NVIDIA ": how product names are compared."""
    text = " ".join(text.lower().split())
    return text.removeprefix("nvidia ")


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
