"""Alert rules for AMD's and Gaudi's critical events and the vendor-neutral fleet rules, run by the real promtool:
against their own firing and quiet cases, with naive versions that must fail those cases, and against what the
agent actually renders for a mixed fleet."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpufleet.agent.fields import gpu_sources
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.model.attribution import Attribution
from gpufleet.telemetry.exposition.dcgm import POD_INFO_METRIC, render
from gpufleet.telemetry.monitoring.alert_rules import RULE_FILE, RulesConfig, dump, rule_groups
from gpufleet.telemetry.monitoring.rule_tests import rule_tests
from gpufleet.telemetry.vendor_metrics import load_vendor_metrics
from tests.conftest import require_tool
from tests.telemetry.exposition.test_vendor import parsed
from tests.telemetry.vendor_frames import mixed_frame

VENDOR_ALERTS = {
    "gpufleet-amd": ["AmdGpuUnhealthy", "AmdGpuEccUncorrectable", "AmdGpuFatalRasEvent"],
    "gpufleet-gaudi": ["GaudiDoubleBitEccRowReplaced", "GaudiScaleUpPortDown"],
    "gpufleet-accelerators": ["AcceleratorEccUncorrectable", "AcceleratorOverTemperature", "AcceleratorDown"],
}


def rules_by_name(cfg: RulesConfig | None = None) -> dict[str, dict[str, Any]]:
    return {
        r["alert"]: r
        for g in rule_groups(cfg, xids=xid_ratings(), limits=detection_limits())["groups"]
        for r in g["rules"]
    }


def test_vendor_and_fleet_rule_groups() -> None:
    groups = {
        g["name"]: [r["alert"] for r in g["rules"]]
        for g in rule_groups(xids=xid_ratings(), limits=detection_limits())["groups"]
    }
    for group, alerts in VENDOR_ALERTS.items():
        assert groups[group] == alerts
    rules = rules_by_name()
    assert rules["AmdGpuUnhealthy"]["expr"] == "gpu_health == 0"
    assert rules["AmdGpuFatalRasEvent"]["expr"] == 'gpu_afid_errors{severity="fatal"}'
    assert rules["GaudiScaleUpPortDown"]["expr"] == 'habanalabs_nic_port_status{port_type="internal"} == 0'
    assert "increase(gpu_ecc_uncorrect_total[10m]) > 0" in rules["AmdGpuEccUncorrectable"]["expr"]
    assert rules["AcceleratorDown"]["expr"] == "gpufleet_accelerator_up == 0"
    assert all(rules[a]["labels"]["severity"] == "critical" for a in ("AmdGpuUnhealthy", "GaudiScaleUpPortDown"))
    margin = rules_by_name(RulesConfig(temp_limit_margin_c=5))["AcceleratorOverTemperature"]["expr"]
    assert margin.endswith("gpufleet_accelerator_temperature_limit_celsius - 5")


def test_a_vendor_rule_on_a_series_the_agent_never_writes_says_what_feeds_it() -> None:
    """Each AMD and Gaudi rule reads its exporter's series; those gpufleet's agent writes on a real node come from a
    field the vendor's GPU source fills. A rule whose series no real source fills (AMD's gpu_health, gpu_afid_errors:
    DME's own verdicts) cannot fire from the agent: its description names the exporter that feeds it and says the
    agent does not, and the source says why it leaves the field empty."""
    sources = gpu_sources()
    vendors = load_vendor_metrics().vendors
    checked = {}
    for group, vendor, source in (("gpufleet-amd", "amd", "amdsmi"), ("gpufleet-gaudi", "intel", "hlml")):
        fields_of: dict[str, set[str]] = {}
        for m in vendors[vendor].metrics:
            fields_of.setdefault(m.name, set()).update(m.sources)
        if (ports := vendors[vendor].nic_ports) is not None:
            fields_of.setdefault(ports.name, set()).update((ports.present, ports.external, ports.up))
        rules = rules_by_name()
        for alert in VENDOR_ALERTS[group]:
            read = {name for name in fields_of if re.search(rf"\b{name}\b", rules[alert]["expr"])}
            fields = set().union(*(fields_of[name] for name in read))
            assert read and fields, alert
            filled = fields <= sources[source].fills
            checked[alert] = filled
            description = rules[alert]["annotations"]["description"]
            if not filled:
                assert vendors[vendor].exporter in description and "agent does not write" in description, alert
                assert all(sources[source].why_not(f) for f in fields - sources[source].fills), alert
            else:
                assert "agent does not write" not in description, alert
    assert checked == {
        "AmdGpuUnhealthy": False,
        "AmdGpuEccUncorrectable": True,
        "AmdGpuFatalRasEvent": False,
        "GaudiDoubleBitEccRowReplaced": True,
        "GaudiScaleUpPortDown": True,
    }


def test_vendor_rule_labels_are_not_the_dcgm_config_ones() -> None:
    """The hostname and UUID label settings are dcgm-exporter's; DME always says hostname, Gaudi has none."""
    rules = rules_by_name(RulesConfig(hostname_label="Hostname", uuid_label="uuid"))
    assert "$labels.hostname" in rules["AmdGpuUnhealthy"]["annotations"]["summary"]
    assert "$labels.Serial" in rules["GaudiScaleUpPortDown"]["annotations"]["summary"]


def _write(tmp_path: Path, cfg: RulesConfig) -> None:
    (tmp_path / RULE_FILE).write_text(dump(rule_groups(cfg, xids=xid_ratings(), limits=detection_limits())))
    (tmp_path / "tests.yml").write_text(dump(rule_tests(cfg, xids=xid_ratings(), limits=detection_limits())))


def _promtool(tmp_path: Path, test_file: str = "tests.yml") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", "test", "rules", test_file], cwd=tmp_path, capture_output=True, text=True)


@pytest.mark.real
@pytest.mark.parametrize("margin", [0, 5])
def test_promtool_passes_every_vendor_rule_case(tmp_path: Path, margin: float) -> None:
    require_tool("promtool")
    _write(tmp_path, RulesConfig(temp_limit_margin_c=margin))
    tests = yaml.safe_load((tmp_path / "tests.yml").read_text())["tests"]
    names = {t["alert_rule_test"][0]["alertname"] for t in tests}
    assert {a for alerts in VENDOR_ALERTS.values() for a in alerts} <= names
    run = _promtool(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.real
@pytest.mark.parametrize(
    ("alert", "naive", "wrongly_fires"),
    [
        # every AFID, not only fatal ones: a corrected error would page
        ("AmdGpuFatalRasEvent", "gpu_afid_errors", "AFID 12"),
        # any count, not new ones: a GPU with old errors would page for ever
        ("AmdGpuEccUncorrectable", "gpu_ecc_uncorrect_total > 0", 'gpu_id="4"'),
        ("GaudiDoubleBitEccRowReplaced", "habanalabs_pending_rows_with_double_bit_ecc_errors > 0", 'id="4"'),
        # any port: a scale-out port is the network's problem
        ("GaudiScaleUpPortDown", "habanalabs_nic_port_status == 0", 'port_type="external"'),
        # a fixed threshold instead of the device's own limit: a device with no known limit would page
        ("AcceleratorOverTemperature", "gpufleet_accelerator_temperature_celsius > 90", 'vendor="intel"'),
    ],
)
def test_promtool_refuses_a_naive_vendor_rule(tmp_path: Path, alert: str, naive: str, wrongly_fires: str) -> None:
    require_tool("promtool")
    _write(tmp_path, RulesConfig())
    rules = yaml.safe_load((tmp_path / RULE_FILE).read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["expr"] = naive
    (tmp_path / RULE_FILE).write_text(dump(rules))
    run = _promtool(tmp_path)
    assert run.returncode != 0
    assert wrongly_fires in run.stdout + run.stderr


def _series(text: str) -> list[dict[str, str]]:
    """promtool input series of one scrape held for 20 minutes (empty labels left out: Prometheus drops them)."""
    out = []
    for name, labels, value in parsed(text):
        body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v)
        out.append({"series": f"{name}{{{body}}}", "values": f"{value:g}x20"})
    return out


@pytest.mark.real
def test_rules_and_pod_joins_work_on_what_the_agent_renders(tmp_path: Path) -> None:
    """The generated rules' expressions and the documented pod joins, evaluated by Prometheus' engine on a mixed
    node set's real /metrics: each finds exactly the device it should, by its exporter's own labels."""
    require_tool("promtool")
    frame = mixed_frame()
    frame.gpu("gpufleet_gpu_health")[8 + 3] = 0  # MI300X 3 unhealthy
    frame.gpu("gpufleet_gpu_afid_fatal")[8 + 5] = 30  # MI300X 5: fatal RAS event
    frame.gpu("gpufleet_gpu_nic_port_up_mask")[16 + 2] = ((1 << 24) - 1) & ~(1 << 5) & ~(1 << 22)  # Gaudi 2
    frame.values[:, 4] = np.nan  # H100 4 silent
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[6] = 93  # H100 6 above its 90 C slowdown temperature
    frame.gpu("DCGM_FI_DEV_GPU_TEMP")[16 + 1] = 97  # Gaudi 1 above its reported 95 C
    pods = {1: "serve-0", 2: "serve-1", 9: "trainer-1", 10: "trainer-2", 17: "trainer-3", 18: "trainer-4"}
    for index, pod in pods.items():  # two per node: the info series must stay unique under every join key
        frame.set_attribution(index, Attribution(pod, "ml", "main"))
    text = render(frame)
    rules = rules_by_name()

    def expr(alert: str, by: str) -> str:
        return f"count by ({by}) ({rules[alert]['expr']})"

    def each(*label_sets: str) -> list[dict[str, object]]:
        return [{"labels": labels, "value": 1} for labels in label_sets]

    cases = [
        (expr("AmdGpuUnhealthy", "serial_number, gpu_id"), each('{gpu_id="3", serial_number="692251001003"}')),
        (expr("AmdGpuFatalRasEvent", "gpu_id, severity"), each('{gpu_id="5", severity="fatal"}')),
        (expr("GaudiScaleUpPortDown", "Serial, port"), each('{Serial="AN21010002", port="5"}')),
        (expr("AcceleratorDown", "vendor, gpu"), each('{gpu="4", vendor="nvidia"}')),
        (
            expr("AcceleratorOverTemperature", "vendor, gpu"),
            each('{gpu="6", vendor="nvidia"}', '{gpu="1", vendor="intel"}'),
        ),
        # the joins gpufleet_gpu_pod_info's help text gives, one per vendor, and the fleet's own pod info
        (
            f"count by (pod) (DCGM_FI_DEV_GPU_UTIL * on(UUID, GPU_I_ID, hostname) group_left(pod) {POD_INFO_METRIC})",
            each('{pod="serve-0"}', '{pod="serve-1"}'),
        ),
        (
            f"count by (pod) (habanalabs_utilization * on(UUID, GPU_I_ID) group_left(pod) {POD_INFO_METRIC})",
            each('{pod="trainer-3"}', '{pod="trainer-4"}'),
        ),
        (
            f'count by (pod) (gpu_gfx_activity * on(gpu_uuid) group_left(pod) {POD_INFO_METRIC}{{gpu_uuid!=""}})',
            each('{pod="trainer-1"}', '{pod="trainer-2"}'),
        ),
        (
            "count by (vendor) (gpufleet_accelerator_utilization_ratio"
            " * on(hostname, uuid, partition) group_left(pod) gpufleet_accelerator_pod_info)",
            [{"labels": f'{{vendor="{v}"}}', "value": 2} for v in ("nvidia", "amd", "intel")],
        ),
    ]
    expr_tests = [{"expr": query, "eval_time": "10m", "exp_samples": samples} for query, samples in cases]
    test_file = {
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": _series(text), "promql_expr_test": expr_tests}],
    }
    (tmp_path / "render.yml").write_text(dump(test_file))
    run = _promtool(tmp_path, "render.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
