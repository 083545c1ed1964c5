from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from gpufleet.errors import ManifestError
from gpufleet.health.thresholds import detection_limits, load_thresholds
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.monitoring.alert_rules import (
    RULE_FILE,
    RulesConfig,
    dump,
    prometheus_rule,
    rule_groups,
    service_monitor,
)
from gpufleet.telemetry.monitoring.rule_tests import render_annotation, rule_tests
from tests.conftest import require_tool

XIDS = xid_ratings()  # the default Xid policy's ratings
LIMITS = detection_limits()  # the default detection thresholds, as the rules judge by them
PRICED = RulesConfig(  # as a cost config with prices of its own and a default rate makes it (cost/prices.py)
    usd_per_gpu_hour={"NVIDIA H100 80GB HBM3": 4.5, "NVIDIA A100-SXM4-80GB": 4.5, "NVIDIA L40S": 2.0},
    default_usd_per_gpu_hour=2.0,
    hostname_label="Hostname",
)


def alerts(cfg: RulesConfig) -> list[dict]:
    return [r for g in rule_groups(cfg, xids=XIDS, limits=LIMITS)["groups"] for r in g["rules"]]


def test_required_rules_exist() -> None:
    names = {r["alert"] for r in alerts(RulesConfig())}
    for name in (
        "GpuThermalSlowdown",
        "GpuCoolingFault",
        "GpuMemoryNearlyFull",
        "GpuXidFatal",
        "GpuXid",
        "GpuXidLineDependent",
        "GpuIdleCost",
        "GpuIdleCost1h",
        "TrainingStalled",
        "GpuEccDoubleBitError",
        "GpuRowRemapFailure",
        "InfinibandPortDown",
        "InfinibandLinkFlapping",
        "InfinibandSymbolErrors",
        "InfinibandSymbolErrorsOver125m",
        "InfinibandSymbolErrorsRateUnknown",
        "InfinibandReceiveErrorsRising",
        "TrainingLossNotFinite",
        "TrainingThroughputDrop",
        "TrainingLossPlateau",
        "TrainingGradientNormOutOfRange",
        "TrainingCheckpointFailed",
        "TrainingValidationDiverging",
    ):
        assert name in names


def test_the_rules_judge_by_the_detection_thresholds(tmp_path: Path) -> None:
    """Thermal, idle and InfiniBand rules take their thresholds from the detectors' (thresholds.yaml, with a site's
    overrides), never values of their own: a site file moves the rule and the detector together."""
    rules = {r["alert"]: r for r in alerts(RulesConfig())}
    thermal = rules["GpuThermalSlowdown"]
    assert "< 0.9 * max_over_time(DCGM_FI_DEV_SM_CLOCK[1h])" in thermal["expr"] and thermal["for"] == "10s"
    assert "/ 1e9 >= 0.333333" in thermal["expr"]  # 10 s of thermal violation in every 30 s
    assert rules["GpuIdleCost"]["for"] == "10m" and "< 5\n" not in rules["GpuIdleCost"]["expr"]
    assert all(" < 5" in r["expr"] and " < 10" not in r["expr"] for r in alerts(RulesConfig()) if "Idle" in r["alert"])
    assert "* 8 * 720 * 1e-14" in rules["InfinibandSymbolErrors"]["expr"]
    assert rules["InfinibandSymbolErrors"]["labels"] == {"severity": "critical", "cause": "ib-symbol-errors"}
    assert rules["InfinibandSymbolErrorsOver125m"]["labels"]["severity"] == "warning"
    site = tmp_path / "site.yaml"
    site.write_text(
        "thermal: {clock_ratio: 0.8, hold_s: 30}\nidle: {util_percent: 2, hold_s: 1800}\n"
        "symbol_errors: {windows: [{window_s: 600, ber: 1.0e-13}]}\ninfiniband: {rcv_errors_per_window: 25}\n"
    )
    groups = rule_groups(xids=XIDS, limits=detection_limits(load_thresholds(site)))["groups"]
    moved = {r["alert"]: r for g in groups for r in g["rules"]}
    thermal = moved["GpuThermalSlowdown"]
    assert "< 0.8 * max_over_time" in thermal["expr"] and thermal["for"] == "30s"
    assert moved["GpuIdleCost"]["for"] == "30m" and "} < 2" in moved["GpuIdleCost"]["expr"]
    assert "* 8 * 600 * 1e-13" in moved["InfinibandSymbolErrors"]["expr"]
    assert "InfinibandSymbolErrorsOver125m" not in moved
    assert "[10m]) > 25)" in moved["InfinibandReceiveErrorsRising"]["expr"]


def test_a_rules_config_cannot_set_detection_thresholds(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("gpu_temp_c: 80\nidle_util_percent: 10\n")
    with pytest.raises(ManifestError, match="detection thresholds") as err:
        RulesConfig.from_file(path)
    assert "idle_util_percent: idle.util_percent" in (err.value.fix or "") and "--thresholds" in (err.value.fix or "")


def test_idle_rules_quote_prices_per_model() -> None:
    idle = [r for r in alerts(PRICED) if r["alert"] == "GpuIdleCost"]
    # models sharing a price share a rule; the default price covers the rest (L40S is at the default)
    assert len(idle) == 2
    priced = next(r for r in idle if r["labels"]["usd_per_gpu_hour"] == "4.50")
    assert 'modelName=~"NVIDIA A100-SXM4-80GB|NVIDIA H100 80GB HBM3"' in priced["expr"]
    assert "$4.50/hour" in priced["annotations"]["summary"]
    default = next(r for r in idle if r["labels"]["usd_per_gpu_hour"] == "2.00")
    assert "modelName!~" in default["expr"] and "$labels.Hostname" in default["annotations"]["summary"]


def test_idle_rules_price_as_the_cost_report_by_default() -> None:
    """No cost config: each catalog model at its list price, as `gpufleet cost report` charges it, and the models no
    price covers without a price (never an invented rate)."""
    idle = [r for r in alerts(RulesConfig()) if r["alert"] == "GpuIdleCost"]
    h100 = next(r for r in idle if re.search(r"modelName=~\"[^\"]*NVIDIA H100 80GB HBM3", r["expr"]))
    assert h100["labels"]["usd_per_gpu_hour"] == f"{98.32 / 8:.2f}" and "$12.29/hour" in h100["annotations"]["summary"]
    assert "list price from the catalog, as `gpufleet cost report` charges it" in h100["annotations"]["description"]
    rest = next(r for r in idle if "modelName!~" in r["expr"])
    assert "usd_per_gpu_hour" not in rest["labels"] and "price unknown" in rest["annotations"]["summary"]
    assert "$2.00" not in dump(rule_groups(RulesConfig(), xids=XIDS, limits=LIMITS))


def test_a_rules_config_cannot_set_prices_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("default_usd_per_gpu_hour: 2.0\nvram_ratio: 0.9\n")
    with pytest.raises(ManifestError, match="cost report's prices") as err:
        RulesConfig.from_file(path)
    assert "--price-file" in (err.value.fix or "")


def test_every_rule_has_a_quiet_and_a_firing_test() -> None:
    rules = alerts(PRICED)
    tests = rule_tests(PRICED, xids=XIDS, limits=LIMITS)["tests"]
    assert len(tests) == len(rules)
    for test in tests:
        quiet, firing = test["alert_rule_test"]
        assert quiet["exp_alerts"] == [] and len(firing["exp_alerts"]) >= 1


def test_idle_cost_counts_allocated_gpus_only() -> None:
    idle = next(r for r in alerts(PRICED) if r["alert"] == "GpuIdleCost")
    # gpufleet's info series, dcgm-exporter's pod labels, or its HPC job label; joined on the configured hostname label
    assert "and on(UUID, GPU_I_ID, Hostname) (gpufleet_gpu_pod_info or gpufleet_gpu_job_info)" in idle["expr"]
    assert 'pod!=""} < 5' in idle["expr"] and 'hpc_job!=""} < 5' in idle["expr"]
    test = next(t for t in rule_tests(PRICED, xids=XIDS, limits=LIMITS)["tests"] if t["name"].startswith("GpuIdleCost"))
    firing = test["alert_rule_test"][1]["exp_alerts"]
    assert sorted(a["exp_labels"]["gpu"] for a in firing) == ["3", "5", "6", "7"]  # not 4 (unallocated), 1 (busy)
    assert any(s["series"].startswith("gpufleet_gpu_pod_info{") for s in test["input_series"])
    old_uuid = RulesConfig(uuid_label="uuid")
    assert "on(uuid, GPU_I_ID, hostname)" in next(r for r in alerts(old_uuid) if r["alert"] == "GpuIdleCost1h")["expr"]


def test_training_thresholds_come_from_the_config() -> None:
    cfg = RulesConfig(throughput_drop_ratio=0.3, grad_norm_max=50, grad_norm_min=1e-9, loss_plateau_ratio=0.02)
    rules = {r["alert"]: r for r in alerts(cfg)}
    assert (
        "< 0.7 * quantile_over_time(0.5, training_samples_per_second[1h] offset 30m)"
        in (rules["TrainingThroughputDrop"]["expr"])
    )
    assert rules["TrainingGradientNormOutOfRange"]["expr"] == (
        "training_gradient_norm > 50 or training_gradient_norm < 1e-09"
    )
    assert "- 0.02 * abs(" in rules["TrainingLossPlateau"]["expr"]
    assert rules["TrainingLossNotFinite"]["expr"] == "training_loss != training_loss or abs(training_loss) == +Inf"


def test_manifests() -> None:
    rule = prometheus_rule(xids=XIDS, limits=LIMITS)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"] == rule_groups(xids=XIDS, limits=LIMITS)
    mon = service_monitor()
    assert mon["kind"] == "ServiceMonitor"
    assert mon["spec"]["endpoints"][0]["path"] == "/metrics"


def test_annotation_rendering_subset() -> None:
    labels = {"gpu": "1"}
    assert render_annotation("gpu {{ $labels.gpu }} at {{ $value }}", labels, 92.0) == "gpu 1 at 92"
    assert render_annotation("{{ $value | humanizePercentage }}", labels, 0.9875) == "98.75%"
    assert render_annotation('{{ $value | printf "%.0f" }}', labels, 660.2) == "660"


def test_bad_config_file_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("vram_ration: 0.9\n")
    with pytest.raises(ManifestError, match=r"unknown field 'vram_ration' \(did you mean 'vram_ratio'\?\)"):
        RulesConfig.from_file(path)


def write_rules(tmp_path: Path, cfg: RulesConfig) -> None:
    (tmp_path / RULE_FILE).write_text(dump(rule_groups(cfg, xids=XIDS, limits=LIMITS)))
    (tmp_path / "tests.yml").write_text(dump(rule_tests(cfg, xids=XIDS, limits=LIMITS)))


@pytest.mark.real
@pytest.mark.parametrize("cfg", [RulesConfig(), PRICED], ids=["defaults", "priced-Hostname"])
def test_promtool_checks_and_unit_tests_pass(tmp_path: Path, cfg: RulesConfig) -> None:
    require_tool("promtool")
    write_rules(tmp_path, cfg)
    check = subprocess.run(["promtool", "check", "rules", RULE_FILE], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.real
def test_promtool_catches_a_wrong_expectation(tmp_path: Path) -> None:
    require_tool("promtool")
    write_rules(tmp_path, RulesConfig())
    tests = yaml.safe_load((tmp_path / "tests.yml").read_text())
    tests["tests"][0]["alert_rule_test"][1]["exp_alerts"] = []
    (tmp_path / "tests.yml").write_text(dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode != 0


@pytest.mark.real
@pytest.mark.parametrize(
    ("alert", "naive", "wrongly_fires"),
    [
        # idle cost without the allocation check: the unallocated idle GPU 4 would cost money
        ("GpuIdleCost", 'DCGM_FI_DEV_GPU_UTIL{modelName=~".*"} < 10', 'gpu="4"'),
        # a plateau without the step check: a hung job's flat loss would look like one
        (
            "TrainingLossPlateau",
            "min_over_time(training_loss[1h]) > min_over_time(training_loss[1h] offset 1h)"
            " - 0.01 * abs(min_over_time(training_loss[1h] offset 1h))",
            'job="llm-hung"',
        ),
    ],
)
def test_promtool_refuses_a_rule_that_ignores_what_it_must(
    tmp_path: Path, alert: str, naive: str, wrongly_fires: str
) -> None:
    require_tool("promtool")
    write_rules(tmp_path, RulesConfig())
    rules = yaml.safe_load((tmp_path / RULE_FILE).read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = naive
    (tmp_path / RULE_FILE).write_text(dump(rules))
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode != 0
    assert wrongly_fires in run.stdout + run.stderr


@pytest.mark.real
def test_committed_deploy_files_pass_promtool() -> None:
    require_tool("promtool")
    deploy = Path(__file__).resolve().parents[3] / "deploy" / "monitoring"
    run = subprocess.run(
        ["promtool", "test", "rules", "gpufleet-rules-test.yml"], cwd=deploy, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
