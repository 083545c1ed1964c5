"""The catalog's list prices: every entry names a catalog GPU model and where its figure comes from, and a price per
GPU-hour is its instance's price over its GPUs."""

from __future__ import annotations

import pytest

from gpufleet.catalog.gpu_prices import load_gpu_prices
from gpufleet.catalog.gpus import get_gpu_model


def test_every_price_names_a_model_and_its_source() -> None:
    prices = load_gpu_prices()
    assert {p.provider for p in prices} >= {"aws", "lambda"}
    for p in prices:
        get_gpu_model(p.model)
        assert p.offering == "on-demand" and p.usd_per_gpu_hour > 0
        assert "skypilot-catalog" in p.source and "commit" in p.source and "checked" in p.source
    keys = [(get_gpu_model(p.model).name, p.provider, p.offering) for p in prices]
    assert len(keys) == len(set(keys))  # one price per model, provider and offering


@pytest.mark.parametrize(
    ("model", "provider", "per_gpu"),
    [
        ("h100-sxm", "aws", 98.32 / 8),
        ("a100-80gb", "aws", 40.96575 / 8),
        ("l40s", "aws", 30.13118 / 8),
        ("h100-sxm", "lambda", 23.92 / 8),
    ],
)
def test_a_gpu_hour_is_the_instance_hour_over_its_gpus(model: str, provider: str, per_gpu: float) -> None:
    (price,) = [p for p in load_gpu_prices() if p.model == model and p.provider == provider]
    assert price.usd_per_gpu_hour == pytest.approx(per_gpu)
    assert price.instance_type in price.source
