"""One price of a GPU-hour wherever gpufleet names one: the cost report, the idle-cost series an agent or the twin
exports (gpufleet_gpu_idle_cost_dollars_per_hour) and the idle-cost alert rules all ask the price book (the
operator's cost config over the catalog's list prices, cost/config.py) the same question, so the alert, the series
and `gpufleet cost report` agree for every model.

A node's price follows the report's rules: its pool (a pool label, else its GPU model) gives the provider and
offering, a capacity-type label the offering. The alert rules match on modelName alone, so they price each model as
a node whose labels name no pool; a pool the cost config prices otherwise is the report's to tell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.catalog.gpu_prices import GpuPrice
from gpufleet.catalog.gpus import get_gpu_model, load_gpu_models, model_for_product_name
from gpufleet.cost.config import CostConfig, PriceBook, model_key
from gpufleet.errors import NotFoundError
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig


def node_price(book: PriceBook, model: str, labels: Mapping[str, str]) -> GpuPrice | None:
    """What the cost report charges for a GPU-hour of `model` on a node with these labels (None: no price)."""
    config = book.config
    provider, offering = config.purchase_of(config.pool_of(labels, model_key(model)), labels)
    return book.price(model, provider, offering)


def prices_by_model(
    config: CostConfig, models: Sequence[str], labels: Mapping[str, str] | None = None
) -> dict[str, float]:
    """US$ per GPU-hour of each model (or product name) on a node with these labels; a model no price covers is
    left out, so its GPUs have no idle-cost series rather than a cost of 0."""
    book = PriceBook(config)
    out = {}
    for model in sorted(set(models)):
        price = node_price(book, model, labels or {})
        if price is not None:
            out[model] = price.usd_per_gpu_hour
    return out


def gpu_prices(config: CostConfig, models: Sequence[str], labels: Mapping[str, str] | None = None) -> np.ndarray:
    """Each device's US$ per GPU-hour, by its model or product name (NaN: no price)."""
    found = prices_by_model(config, models, labels)
    return np.array([found.get(m, np.nan) for m in models], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class AlertPrices:
    """The idle-cost alert's prices: by the model name NVML reports, and for any other GPU (None: no price)."""

    by_model: dict[str, float]
    default: float | None
    source: str


def alert_prices(config: CostConfig, where: str = "") -> AlertPrices:
    """The prices of the idle-cost alert rules, as the report charges a node of each NVIDIA model whose labels name
    no pool. `where` names the cost config for the rules' descriptions."""
    book = PriceBook(config)
    by_model: dict[str, float] = {}
    for spec in load_gpu_models().values():
        if spec.vendor != "nvidia":
            continue  # the idle rules read DCGM_FI_DEV_GPU_UTIL
        for name in (spec.product_name, *spec.product_names):
            price = _listed(book, name)
            if price is not None:
                by_model[name] = price
    for entry in config.prices:  # the operator's prices of GPUs the catalog does not know, by the name NVML prints
        if not _in_catalog(entry.model):
            price = _listed(book, entry.model)
            if price is not None:
                by_model[entry.model] = price
    purchase = f"{config.provider} {config.offering}"
    source = f"{purchase} price from the cost config {where}" if where else f"{purchase} list price from the catalog"
    return AlertPrices(by_model, config.default_usd_per_gpu_hour, source)


def priced_rules(rules: RulesConfig, config: CostConfig, where: str = "") -> RulesConfig:
    """The alert rules' config with the idle-cost prices the cost report charges under this cost config."""
    prices = alert_prices(config, where)
    update = {"usd_per_gpu_hour": prices.by_model, "default_usd_per_gpu_hour": prices.default,
              "price_source": prices.source}  # fmt: skip
    return rules.model_copy(update=update)


def _listed(book: PriceBook, model: str) -> float | None:
    config = book.config
    provider, offering = config.purchase_of(config.pool_of({}, model_key(model)), {})
    price = book.listed(model, provider, offering)
    return None if price is None else price.usd_per_gpu_hour


def _in_catalog(name: str) -> bool:
    if model_for_product_name(name) is not None:
        return True
    try:
        get_gpu_model(name)
    except NotFoundError:
        return False
    return True
