"""Public list prices per GPU-hour (gpu_prices.yaml): what a GPU-hour costs by model, provider and offering
(on-demand, reserved, spot), each with where the figure comes from."""

from __future__ import annotations

from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog._files import read_text
from gpufleet.catalog.gpus import get_gpu_model, load_gpu_models

ON_DEMAND = "on-demand"
DEFAULT_PROVIDER = "aws"  # whose list prices apply when the operator's cost config names none


class GpuPrice(BaseModel):
    """One price per GPU-hour. `model` is a catalog model (short name, alias or product name) or, for a GPU the
    catalog does not know, the name NVML prints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    offering: str = ON_DEMAND
    usd_per_gpu_hour: float = Field(ge=0)
    source: str = ""
    instance_type: str = ""
    region: str = ""


class _Listed(BaseModel):
    """An instance type as its provider lists it."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    offering: str
    region: str
    model: str
    instance_type: str
    gpus: int = Field(gt=0)
    usd_per_instance_hour: float = Field(ge=0)


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checked: str
    sources: dict[str, str]
    prices: list[_Listed]

    @model_validator(mode="after")
    def _known(self) -> _PriceFile:
        for entry in self.prices:
            get_gpu_model(entry.model)  # a typo in the data file fails here, naming the choices
            if entry.provider not in self.sources:
                raise ValueError(f"gpu_prices.yaml: {entry.provider} has no entry under sources")
        return self


@cache
def load_gpu_prices() -> tuple[GpuPrice, ...]:
    data = _PriceFile.model_validate(yaml.safe_load(read_text("gpu_prices.yaml")))
    return tuple(
        GpuPrice(
            model=e.model,
            provider=e.provider,
            offering=e.offering,
            usd_per_gpu_hour=round(e.usd_per_instance_hour / e.gpus, 6),
            source=f"{e.instance_type} ${e.usd_per_instance_hour:g}/h / {e.gpus} GPUs ({e.region}); "
            f"{data.sources[e.provider]}, checked {data.checked}",
            instance_type=e.instance_type,
            region=e.region,
        )
        for e in data.prices
    )


@cache
def list_prices_by_product_name(
    provider: str = DEFAULT_PROVIDER, offering: str = ON_DEMAND, vendor: str = "nvidia"
) -> dict[str, float]:
    """The list price of a GPU-hour from this provider and offering, under every name the vendor's library prints
    for the model (what an alert matches modelName on). It is what `gpufleet cost report` charges a node with no
    cost config (gpufleet.cost.prices.alert_prices says the same for any cost config; a test holds the two equal)."""
    listed = {
        get_gpu_model(p.model).name: p.usd_per_gpu_hour
        for p in load_gpu_prices()
        if p.provider.lower() == provider.lower() and p.offering.lower() == offering.lower()
    }
    out: dict[str, float] = {}
    for name, spec in load_gpu_models().items():
        if name in listed and spec.vendor == vendor:
            out.update(dict.fromkeys((spec.product_name, *spec.product_names), listed[name]))
    return out
