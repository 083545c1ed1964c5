"""What GPU time costs and who pays for it: the operator's cost config (prices per GPU model, provider and offering
over the catalog's public list prices, namespace -> team, which node label names a pool, the waste thresholds) and
the price book that answers "what does a GPU-hour of this model cost on this node"."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import yaml_input
from gpufleet.catalog.gpu_prices import DEFAULT_PROVIDER, ON_DEMAND, GpuPrice, load_gpu_prices
from gpufleet.catalog.gpus import get_gpu_model, model_for_product_name
from gpufleet.errors import ManifestError, NotFoundError

UNASSIGNED = "unassigned"  # the team of a namespace the config maps to none
Rate = Callable[[str, str], float | None]  # (node, model) -> US$ per GPU-hour there; None when no price covers it
# Node labels that name a node's pool, first found wins: Karpenter's NodePool, EKS and GKE node groups, the
# instance type, then the pool gpufleet's own inventory reports. Without any, a node's pool is its GPU model.
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "node.kubernetes.io/instance-type",
    "pool",
)
# Labels that say how a node is bought, and the offering each value means.
CAPACITY_LABELS = ("karpenter.sh/capacity-type", "eks.amazonaws.com/capacityType")
CAPACITY_VALUES = {"on-demand": ON_DEMAND, "on_demand": ON_DEMAND, "spot": "spot", "reserved": "reserved"}


class WasteThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idle_node_hours: float = Field(1.0, gt=0, description="A node idle at a stretch this long is listed.")
    low_util_pct: float = Field(25.0, ge=0, le=100, description="A workload averaging below this is underused...")
    min_gpus: float = Field(4.0, gt=0, description="...when it holds at least this many GPUs at once.")
    mig_idle_share: float = Field(0.9, gt=0, le=1, description="A MIG slice idle this share of its held time.")


class ScaleDown(BaseModel):
    model_config = ConfigDict(extra="forbid")

    after_minutes: float = Field(30.0, gt=0, description="How long a node stays empty before it goes.")


class PoolPricing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str | None = None
    offering: str | None = None


class CostConfig(BaseModel):
    """The operator's file. Every field has a default: an empty file prices at the catalog's AWS on-demand rates."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(DEFAULT_PROVIDER, description="Whose prices apply to a node no pool entry names.")
    offering: str = ON_DEMAND
    prices: list[GpuPrice] = Field(default_factory=list, description="Override the catalog's list prices.")
    default_usd_per_gpu_hour: float | None = Field(None, ge=0, description="For a GPU no price entry covers.")
    pools: dict[str, PoolPricing] = Field(default_factory=dict, description="Provider and offering per node pool.")
    teams: dict[str, str] = Field(default_factory=dict, description="Namespace -> team.")
    idle_below_pct: float = Field(10.0, ge=0, le=100, description="A GPU below this utilization is idle.")
    pool_labels: list[str] = Field(default_factory=lambda: list(POOL_LABELS))
    waste: WasteThresholds = Field(default_factory=WasteThresholds)
    scale_down: ScaleDown = Field(default_factory=ScaleDown)

    @classmethod
    def from_file(cls, path: Path) -> CostConfig:
        return cls.from_data(yaml_input.load_file(path), str(path))

    @classmethod
    def from_data(cls, raw: object, source: str) -> CostConfig:
        """A cost config read elsewhere (a file, the Helm chart's cost.config), refused with its field named."""
        raw = raw or {}
        if not isinstance(raw, dict):
            raise ManifestError(source, "expected a mapping", fix="see `gpufleet cost report -h` for the fields")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise _explain(source, exc) from None

    def team_of(self, namespace: str) -> str:
        return self.teams.get(namespace, UNASSIGNED)

    def pool_of(self, labels: Mapping[str, str], model: str) -> str:
        for key in self.pool_labels:
            if labels.get(key):
                return labels[key]
        return model

    def purchase_of(self, pool: str, labels: Mapping[str, str]) -> tuple[str, str]:
        """(provider, offering) of a node: its pool's entry, else the defaults; a capacity-type label wins for
        the offering (a spot node in an on-demand pool is still spot)."""
        entry = self.pools.get(pool, PoolPricing())
        offering = entry.offering or self.offering
        for key in CAPACITY_LABELS:
            value = labels.get(key, "").lower()
            if value in CAPACITY_VALUES:
                offering = CAPACITY_VALUES[value]
                break
        return entry.provider or self.provider, offering


def _explain(path: str, exc: ValidationError) -> ManifestError:
    """The first problem of a cost config, naming the field (and, for a misspelled one, the field it resembles)."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a typo explains a missing field
    loc = [str(p) for p in err["loc"]]
    where = ".".join(loc) or "(file)"
    if err["type"] != "extra_forbidden":
        return ManifestError(path, f"{where}: {err['msg']}", fix="see `gpufleet cost report -h` for the fields")
    model: type[BaseModel] = CostConfig
    for part in loc[:-1]:  # down to the model the unknown key sits in; list indices and dict keys stay on it
        field = model.model_fields.get(part)
        annotation: Any = field.annotation if field is not None else None
        inner = [a for a in (annotation, *getattr(annotation, "__args__", ())) if _is_model(a)]
        model = inner[0] if inner else model
    names = list(model.model_fields)
    close = difflib.get_close_matches(loc[-1], names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ManifestError(path, f"unknown field {where!r}{hint}", fix=f"allowed here: {', '.join(names)}")


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def model_key(name: str) -> str:
    """The catalog name a model or product name stands for, else the name itself in lower case: prices and GPUs
    meet on this key."""
    found = model_for_product_name(name)
    if found is not None:
        return found.name
    try:
        return get_gpu_model(name).name
    except NotFoundError:
        return " ".join(name.lower().split())


class PriceBook:
    """Prices by (model, provider, offering): the catalog's list, then the operator's entries over it."""

    def __init__(self, config: CostConfig, catalog: Sequence[GpuPrice] | None = None) -> None:
        self.config = config
        self._prices: dict[tuple[str, str, str], GpuPrice] = {}
        for price in (*(load_gpu_prices() if catalog is None else catalog), *config.prices):
            self._prices[(model_key(price.model), price.provider.lower(), price.offering.lower())] = price

    def listed(self, model: str, provider: str, offering: str) -> GpuPrice | None:
        """The operator's or the catalog's entry for a GPU-hour of this model, without the default rate."""
        return self._prices.get((model_key(model), provider.lower(), offering.lower()))

    def price(self, model: str, provider: str, offering: str) -> GpuPrice | None:
        """The price of a GPU-hour, or the operator's default rate, or None when neither covers it."""
        found = self.listed(model, provider, offering)
        if found is not None:
            return found
        rate = self.config.default_usd_per_gpu_hour
        if rate is None:
            return None
        return GpuPrice(model=model, provider=provider, offering=offering, usd_per_gpu_hour=rate,
                        source="default_usd_per_gpu_hour in the cost config")  # fmt: skip
