"""The promtool unit tests of the generated alert rules: for every rule, its own input series (from
data/alert_rules.yaml's `test:`), a time at which it must stay quiet and one at which it must fire with the labels and
annotations Prometheus would render (`render_annotation`, the small subset of alert templating the rules use)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.telemetry.monitoring.alert_rules import (
    RULE_FILE,
    DetectionLimits,
    RulesConfig,
    XidRatings,
    expanded,
    fill,
    rule_labels,
)

TEST_HOST = "gpu-node-01"
TEST_GPU = {"gpu": "3", "uuid": "GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3", "device": "nvidia3"}
TEST_MODEL = "NVIDIA H100 80GB HBM3"
# The vendor rules' test devices, labelled as the AMD Device Metrics Exporter, the Gaudi metric exporter and the
# fleet series label them (empty labels, such as an unused pod, are absent in Prometheus and left out here).
TEST_AMD = {
    "card_model": "AMD Instinct MI300X",
    "deployment_mode": "baremetal",
    "gpu_compute_partition_type": "spx",
    "gpu_id": "3",
    "gpu_memory_partition_type": "nps1",
    "gpu_partition_id": "0",
    "gpu_uuid": "62ff74a1-0000-1000-80e6-b5bb3c3ce000",
    "hostname": TEST_HOST,
    "serial_number": "692251001003",
}
TEST_GAUDI = {"Serial": "AN21010003", "UUID": "01P0-HL3090A0-15-U4V193-22-07-03", "device": "AN21010003", "id": "3"}
TEST_ACCELERATOR = {
    "vendor": "amd",
    "model": "AMD Instinct MI300X",
    "hostname": TEST_HOST,
    "gpu": "3",
    "uuid": TEST_AMD["gpu_uuid"],
}


def _go_float(value: float) -> str:
    """Go's %v for a float64 (what `{{ $value }}` prints)."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e21 else repr(float(value))


def _humanize(value: float) -> str:
    return "%.4g" % value  # noqa: UP031 - Go's humanizePercentage is %.4g of the percentage


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def render_annotation(template: str, labels: Mapping[str, str], value: float | None) -> str:
    """Expand the small subset of Prometheus' alert templating these rules use, for expected test output."""

    def sub(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr.startswith("$labels."):
            return labels.get(expr.removeprefix("$labels."), "")
        if value is None:
            raise ValueError(f"test for annotation {template!r} needs an expected value")
        if expr == "$value":
            return _go_float(value)
        if expr == "$value | humanizePercentage":
            return _humanize(value * 100) + "%"
        printf = re.fullmatch(r'\$value \| printf "(%\.\d+f)"', expr)
        if printf:
            return printf.group(1) % value
        raise ValueError(f"unsupported template {expr!r} in alert_rules.yaml")

    return _TEMPLATE.sub(sub, template)


def _series_labels(scope: str, cfg: RulesConfig, values: Mapping[str, str]) -> dict[str, str]:
    if scope == "job":
        return {"job": "llm-pretrain"}
    if scope == "ib_port":
        return {"hca": "mlx5_0", "port": "1", "rail": "0", "hostname": TEST_HOST}
    if scope == "amd":
        return dict(TEST_AMD)
    if scope == "gaudi":
        return dict(TEST_GAUDI)
    if scope == "accelerator":
        return dict(TEST_ACCELERATOR)
    return {
        "gpu": TEST_GPU["gpu"],
        cfg.uuid_label: TEST_GPU["uuid"],
        "device": TEST_GPU["device"],
        "modelName": values.get("test_model", TEST_MODEL),
        cfg.hostname_label: TEST_HOST,
    }


def _selector(name: str, labels: Mapping[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{body}}}"


def _filled_labels(labels: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, str]:
    return {fill(str(k), values): fill(str(v), values) for k, v in labels.items()}


def _input_series(
    series: Mapping[str, Any], labels: Mapping[str, str], values: Mapping[str, str]
) -> list[dict[str, str]]:
    """promtool input series of one entity: a metric's values, or {labels, values} for a series with labels of its
    own (an info series naming a pod) over the entity's."""
    out = []
    for metric, spec in series.items():
        own = _filled_labels(spec.get("labels", {}), values) if isinstance(spec, dict) else {}
        samples = spec["values"] if isinstance(spec, dict) else spec
        out.append({"series": _selector(fill(metric, values), {**labels, **own}), "values": fill(str(samples), values)})
    return out


def rule_tests(
    cfg: RulesConfig | None = None, rule_file: str = RULE_FILE, *, xids: XidRatings, limits: DetectionLimits
) -> dict[str, Any]:
    """A promtool test file: for each generated rule, one group with a quiet and a firing evaluation."""
    cfg = cfg or RulesConfig()
    tests = []
    for _group, rules in expanded(cfg, xids, limits):
        for rule, values in rules:
            spec = rule["test"]
            labels = {
                **_series_labels(spec.get("scope", "gpu"), cfg, values),
                **_filled_labels(spec.get("labels", {}), values),
            }
            alertname = fill(rule["alert"], values)
            series = _input_series(spec["series"], labels, values)
            entities = [(labels, True, spec.get("value"))]
            for other in spec.get("others", []):
                own = {**labels, **_filled_labels(other.get("labels", {}), values)}
                series += _input_series(other["series"], own, values)
                entities.append((own, bool(other["fires"]), other.get("value")))
            expected = []
            for entity_labels, fires, value in entities:
                if not fires:
                    continue
                alert_labels = {**entity_labels, **rule_labels(rule, values)}
                annotations = {
                    key: render_annotation(fill(rule[key], values), alert_labels, value)
                    for key in ("summary", "description")
                }
                expected.append({"exp_labels": alert_labels, "exp_annotations": annotations})
            variant = (
                values.get("test_model") or values.get("ib_counter") or values.get("ber_window_spoken") or "default"
            )
            tests.append(
                {
                    "name": f"{alertname} ({variant})",
                    "interval": "1m",
                    "input_series": series,
                    "alert_rule_test": [
                        {"eval_time": fill(str(spec["quiet_at"]), values), "alertname": alertname, "exp_alerts": []},
                        {
                            "eval_time": fill(str(spec["fires_at"]), values),
                            "alertname": alertname,
                            "exp_alerts": expected,
                        },
                    ],
                }
            )
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}
