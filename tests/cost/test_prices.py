"""One price of a GPU-hour everywhere: for every model of the catalog, the idle-cost alert's price, the agent's and
the twin's idle-cost series and `gpufleet cost report` agree, with the catalog alone and with an operator's cost
config (its own prices, its provider, a pool bought otherwise, a default rate)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpufleet.catalog.gpu_prices import GpuPrice, list_prices_by_product_name
from gpufleet.catalog.gpus import load_gpu_models
from gpufleet.cost.config import CostConfig, PoolPricing, model_key
from gpufleet.cost.prices import alert_prices, gpu_prices, priced_rules, prices_by_model
from gpufleet.cost.report import build_report
from gpufleet.cost.usage import Usage, measure
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.sim.source import TwinSource
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, rule_groups
from tests.clirun import gpufleet
from tests.cost.series import HOUR, STEP, gpu, util
from tests.twins import small_twin

NVIDIA_NAMES = [
    name
    for spec in load_gpu_models().values()
    if spec.vendor == "nvidia"
    for name in (spec.product_name, *spec.product_names)
]
CONFIGS = {
    "catalog": CostConfig(),
    "operator": CostConfig(
        provider="lambda",
        prices=[
            GpuPrice(model="h100-sxm", provider="lambda", usd_per_gpu_hour=3.1, source="our contract"),
            GpuPrice(model="NVIDIA RTX PRO 9999", provider="lambda", usd_per_gpu_hour=1.25, source="a GPU of our own"),
        ],
        default_usd_per_gpu_hour=0.8,
    ),
}


def _usage(models: list[str], labels: dict[str, str] | None = None, config: CostConfig | None = None) -> Usage:
    """An hour of each model on a node of its own (n-<k>) with these labels, idle: what the report prices, each
    node pooled as the cost service pools it (cost/service.py)."""
    series = [util(gpu(f"n-{k}", 0, model=model), [0.0] * 60) for k, model in enumerate(models)]
    nodes = {f"n-{k}": model for k, model in enumerate(models)}
    pools = {n: (config or CostConfig()).pool_of(labels or {}, model_key(m)) for n, m in nodes.items()}
    return measure(series, [], start=0.0, end=HOUR, step=STEP, pools=pools,
                   labels={n: dict(labels or {}) for n in nodes})  # fmt: skip


def _report_prices(config: CostConfig, models: list[str]) -> dict[str, float | None]:
    report = build_report(_usage(models), config)
    return {m.model: m.usd_per_gpu_hour for m in report.by_model}


@pytest.mark.parametrize("which", list(CONFIGS))
def test_the_alert_prices_every_catalog_model_as_the_report_does(which: str) -> None:
    config = CONFIGS[which]
    alert = alert_prices(config)
    report = _report_prices(config, [*NVIDIA_NAMES, "NVIDIA RTX PRO 9999", "Some Other GPU"])
    for name in NVIDIA_NAMES:
        assert alert.by_model.get(name, alert.default) == report[name], name
    assert alert.by_model.get("Some Other GPU", alert.default) == report["Some Other GPU"]  # the default rate, or none
    if which == "operator":
        assert alert.by_model["NVIDIA H100 80GB HBM3"] == 3.1 and alert.by_model["NVIDIA RTX PRO 9999"] == 1.25
        assert alert.default == 0.8 and "cost config" in alert_prices(config, "cost.yaml").source
    else:
        assert alert.by_model == list_prices_by_product_name()  # the rules' default prices are the catalog's
        assert alert.default is None and report["Some Other GPU"] is None
        assert alert.by_model["NVIDIA H100 80GB HBM3"] == pytest.approx(98.32 / 8)


@pytest.mark.parametrize("which", list(CONFIGS))
def test_an_agents_idle_cost_prices_as_the_report_does_on_its_node(which: str) -> None:
    """A node's labels choose its pool and offering for the series as for the report."""
    config = CONFIGS[which].model_copy(update={"pools": {"spot-pool": PoolPricing(offering="spot")}})
    spot_a100 = GpuPrice(model="a100-80gb", provider=config.provider, offering="spot", usd_per_gpu_hour=1.5)
    config = config.model_copy(update={"prices": [*config.prices, spot_a100]})
    labels = {"pool": "spot-pool"}
    models = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    report = build_report(_usage(models, labels, config), config)
    by_report = {m.model: m.usd_per_gpu_hour for m in report.by_model}
    by_agent = prices_by_model(config, models, labels)
    assert by_agent.get(models[1]) == by_report[models[1]] == 1.5
    assert by_agent.get(models[0], config.default_usd_per_gpu_hour) == by_report[models[0]]  # no spot H100 price
    assert np.isnan(gpu_prices(CostConfig(), ["Some Other GPU"])[0])  # no price: no series


def test_the_twins_idle_cost_prices_as_the_report_does() -> None:
    twin = small_twin(nodes=2)
    for config in CONFIGS.values():
        source = TwinSource(twin, cost=config)
        models = [e.model_name for e in source.entities()]
        labels = {n.name: {"pool": n.pool, "rack": n.rack} for n in twin.cluster.nodes}
        nodes = [e.hostname for e in source.entities()]
        for model, node, price in zip(models, nodes, source._price.tolist(), strict=True):
            expected = prices_by_model(config, [model], labels[node]).get(model, np.nan)
            assert price == pytest.approx(expected, nan_ok=True)
        report = _report_prices(config, sorted(set(models)))
        assert {m: report[m] for m in set(models)} == {m: prices_by_model(config, [m]).get(m) for m in set(models)}


def _alert_price(rules: dict[str, Any], model: str) -> str | None:
    """The price the GpuIdleCost rule matching this modelName quotes (its label), None for the unpriced rule."""
    found = []
    for rule in (r for g in rules["groups"] for r in g["rules"] if r["alert"] == "GpuIdleCost"):
        op, pattern = re.search(r'modelName(=~|!~)"((?:[^"\\]|\\.)*)"', rule["expr"]).groups()  # type: ignore[union-attr]
        if (re.fullmatch(pattern, model) is not None) == (op == "=~"):
            found.append(rule["labels"].get("usd_per_gpu_hour"))
    assert len(found) == 1, (model, found)  # every model matches exactly one idle rule
    return found[0]


@pytest.mark.parametrize("which", list(CONFIGS))
def test_the_generated_idle_rules_quote_the_reports_price_for_every_catalog_model(which: str) -> None:
    config = CONFIGS[which]
    rules = rule_groups(priced_rules(RulesConfig(), config), xids=xid_ratings(), limits=detection_limits())
    models = [*NVIDIA_NAMES, "Some Other GPU"]
    report = _report_prices(config, models)
    for model in models:
        price = report[model]
        assert _alert_price(rules, model) == (None if price is None else f"{price:.2f}"), model
    if which == "catalog":  # what the rule file holds without a cost config
        assert rules == rule_groups(RulesConfig(), xids=xid_ratings(), limits=detection_limits())


def test_telemetry_rules_takes_the_prices_of_the_cost_config_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(CONFIGS["operator"].model_dump(mode="json", exclude_defaults=True)))
    res = gpufleet("telemetry", "rules", "--price-file", str(path), "-o", "json")
    assert res.returncode == 0, res.stderr
    rules = json.loads(res.stdout)
    assert _alert_price(rules, "NVIDIA H100 80GB HBM3") == "3.10" and _alert_price(rules, "Some Other GPU") == "0.80"
    assert rules == rule_groups(
        priced_rules(RulesConfig(), CONFIGS["operator"], str(path)), xids=xid_ratings(), limits=detection_limits()
    )
