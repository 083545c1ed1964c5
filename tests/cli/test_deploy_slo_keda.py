"""`gpufleet deploy slo` and `gpufleet deploy keda`: printed and written objects, and bad input as one clean error."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli.test_deploy import assert_clean_error
from tests.clirun import gpufleet


def test_slo_prints_a_prometheus_rule_by_default() -> None:
    result = gpufleet("deploy", "slo")
    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    assert obj["kind"] == "PrometheusRule" and obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"] for g in obj["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {"InferenceSloBurnRateFast", "InferenceSloBurnRateSlow", "InferenceTrafficTooLowForSlo"} <= alerts
    assert {"InferenceLatencyP99High", "InferenceLatencyP95High", "InferenceTtftHigh"} <= alerts


def test_slo_rule_file_from_stdin_as_json() -> None:
    config = "services:\n  - model: llama-3-70b\n    p99_s: 5\n"
    result = gpufleet("deploy", "slo", "-f", "-", "--format", "rules", "-o", "json", input=config)
    assert result.returncode == 0, result.stderr
    groups = json.loads(result.stdout)["groups"]
    assert [g["name"] for g in groups] == ["gpufleet-slo-llama-3-70b", "gpufleet-slo"]
    p99 = next(r for r in groups[0]["rules"] if r.get("alert") == "InferenceLatencyP99High")
    assert '{model="llama-3-70b"}[5m]))) > 5 and' in p99["expr"]


def test_slo_writes_a_file_with_the_rules_config_labels(tmp_path: Path) -> None:
    rules_config = tmp_path / "rules-config.yaml"
    rules_config.write_text("namespace: observability\nmonitor_labels:\n  release: prom\n")
    out = tmp_path / "slo-rule.yaml"
    result = gpufleet("deploy", "slo", "--rules-config", str(rules_config), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    obj = yaml.safe_load(out.read_text())
    assert obj["metadata"]["namespace"] == "observability" and obj["metadata"]["labels"]["release"] == "prom"


def test_slo_bad_config_is_one_error_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "slo.yaml"
    bad.write_text("defaults:\n  p99: 2\n")
    assert_clean_error(gpufleet("deploy", "slo", "-f", str(bad)), "unknown field 'defaults.p99'", "'p99_s'")
    bad.write_text("services:\n  - model: a\n    ttft_s: 0.25\n")
    assert_clean_error(gpufleet("deploy", "slo", "-f", str(bad)), "services[0].ttft_s = 0.25 s is not a bucket bound")
    bad.write_text("services:\n  - model: a\n  - model: a\n")
    assert_clean_error(gpufleet("deploy", "slo", "-f", str(bad)), "services[1] (a) repeats services[0]")
    assert_clean_error(gpufleet("deploy", "slo", "-o", "wide"), "-o wide is not a manifest format")


def test_slo_unknown_format_is_a_usage_error() -> None:
    result = gpufleet("deploy", "slo", "--format", "grafana")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "grafana" in result.stderr


def test_keda_prints_a_checked_scaled_object() -> None:
    result = gpufleet("deploy", "keda", "--deployment", "llm-serve", "--model", "llama-3-70b", "-n", "ml")
    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    assert obj["kind"] == "ScaledObject" and obj["metadata"] == {
        "name": "llm-serve",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/managed-by": "gpufleet", "app.kubernetes.io/component": "autoscaling"},
    }
    (trigger,) = obj["spec"]["triggers"]
    assert trigger["metricType"] == "Value" and "histogram_quantile(0.99" in trigger["metadata"]["query"]


def test_keda_queue_to_zero_as_json() -> None:
    result = gpufleet(
        "deploy", "keda", "--deployment", "llm-serve", "--model", "llama", "--model-version", "v3",
        "--signal", "queue", "--target", "8", "--min-replicas", "0", "--max-replicas", "16",
        "--prometheus", "https://prom.example.com", "--auth", "prom-creds", "--cluster-auth", "-o", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    (trigger,) = obj["spec"]["triggers"]
    assert trigger["metadata"] == {
        "serverAddress": "https://prom.example.com",
        "query": 'sum(gpufleet_inference_queue_depth{model="llama", version="v3"})',
        "threshold": "8",
        "activationThreshold": "0",
    }
    assert trigger["authenticationRef"] == {"name": "prom-creds", "kind": "ClusterTriggerAuthentication"}
    assert obj["spec"]["minReplicaCount"] == 0 and obj["spec"]["maxReplicaCount"] == 16


def test_keda_bad_input_is_one_clean_error() -> None:
    base = ("deploy", "keda", "--model", "m")
    assert_clean_error(gpufleet(*base, "--deployment", "LLM_serve"), "--deployment 'LLM_serve' is not a valid")
    assert_clean_error(
        gpufleet(*base, "--deployment", "llm", "--min-replicas", "0"), "--signal p99 cannot scale from zero"
    )
    assert_clean_error(
        gpufleet(*base, "--deployment", "llm", "--min-replicas", "3", "--max-replicas", "2"), "do not make a range"
    )
    missing = gpufleet("deploy", "keda", "--model", "m")
    assert missing.returncode == 2 and "--deployment" in missing.stderr
