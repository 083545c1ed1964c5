from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from gpufleet.deploy.chart import DASHBOARDS_DIR, RULES_FILE
from gpufleet.health.thresholds import detection_limits
from gpufleet.health.xid_policy import xid_ratings
from gpufleet.telemetry.fields import load_field_catalog
from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, dump, prometheus_rule, rule_groups, service_monitor
from gpufleet.telemetry.monitoring.dashboards import dashboard_files, dashboards
from gpufleet.telemetry.monitoring.rule_tests import rule_tests
from tests.clirun import gpufleet


def test_dashboards_query_catalog_metrics() -> None:
    boards = dashboards(limits=detection_limits())
    assert set(boards) == {"gpufleet-cluster", "gpufleet-node", "gpufleet-fabric"}
    known = set(load_field_catalog().names())
    for board in boards.values():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            names = set(
                re.findall(
                    r"\b(DCGM_[A-Z_0-9]+|infiniband_port_[a-z_0-9]+|gpufleet_[a-z_0-9]+)",
                    panel["targets"][0]["expr"],
                )
            )
            assert names and names <= known, panel["targets"][0]["expr"]
    cluster = boards["gpufleet-cluster"]
    assert any(p["type"] == "state-timeline" for p in cluster["panels"])
    node_vars = [v["name"] for v in boards["gpufleet-node"]["templating"]["list"]]
    assert "host" in node_vars
    assert all('hostname=~"$host"' in p["targets"][0]["expr"] for p in boards["gpufleet-node"]["panels"])
    fabric = boards["gpufleet-fabric"]["panels"]
    assert any("infiniband_port_symbol_errors_total" in p["targets"][0]["expr"] for p in fabric)


def test_cli_fields_rules_dashboard(tmp_path: Path) -> None:
    result = gpufleet("telemetry", "fields", "-o", "json")
    assert result.returncode == 0
    names = [f["name"] for f in json.loads(result.stdout)]
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in names
    result = gpufleet("telemetry", "rules", "--out", str(tmp_path / "rules"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "rules").iterdir()) == [
        "gpufleet-rules-test.yml",
        "gpufleet-rules.yml",
        "prometheus-rule.yaml",
        "service-monitor.yaml",
    ]
    result = gpufleet("telemetry", "dashboard", "--out", str(tmp_path / "dash"))
    assert result.returncode == 0
    assert len(list((tmp_path / "dash").glob("*.json"))) == 3
    result = gpufleet("telemetry", "rules")
    assert "GpuThermalSlowdown" in result.stdout


def test_committed_artifacts_are_current() -> None:
    """deploy/monitoring and the Helm chart's copies (deploy/helm/gpufleet/files) are what the generators make now:
    gpufleet telemetry rules --config deploy/monitoring/rules-config.yaml --out deploy/monitoring --chart ...
    gpufleet telemetry dashboard --out deploy/monitoring/dashboards --chart deploy/helm/gpufleet"""
    deploy = Path(__file__).resolve().parents[3] / "deploy" / "monitoring"
    chart = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpufleet"
    cfg = RulesConfig.from_file(deploy / "rules-config.yaml")
    xids = xid_ratings()  # the default Xid policy's
    assert (deploy / "gpufleet-rules.yml").read_text() == dump(rule_groups(cfg, xids=xids, limits=detection_limits()))
    assert (deploy / "gpufleet-rules-test.yml").read_text() == dump(
        rule_tests(cfg, xids=xids, limits=detection_limits())
    )
    assert yaml.safe_load((deploy / "prometheus-rule.yaml").read_text()) == prometheus_rule(
        cfg, xids=xids, limits=detection_limits()
    )
    assert yaml.safe_load((deploy / "service-monitor.yaml").read_text()) == service_monitor(cfg)
    assert (chart / RULES_FILE).read_text() == dump(rule_groups(cfg, xids=xids, limits=detection_limits()))
    boards = dashboards(limits=detection_limits())
    for uid, board in boards.items():
        assert json.loads((deploy / "dashboards" / f"{uid}.json").read_text()) == board
    want = dashboard_files(boards)
    have = {p.name: p.read_text() for p in (chart / DASHBOARDS_DIR).glob("*.json")}
    assert have == want


def test_monitor_labels_reach_the_operator_objects() -> None:
    """kube-prometheus-stack selects ServiceMonitors and PrometheusRules by release: <its release name>."""
    assert service_monitor()["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert (
        prometheus_rule(xids=xid_ratings(), limits=detection_limits())["metadata"]["labels"]["release"]
        == "kube-prometheus-stack"
    )
    cfg = RulesConfig(monitor_labels={"release": "prom"})
    assert service_monitor(cfg)["metadata"]["labels"] == {"app.kubernetes.io/name": "gpufleet-agent", "release": "prom"}
    assert (
        prometheus_rule(cfg, xids=xid_ratings(), limits=detection_limits())["metadata"]["labels"]["release"] == "prom"
    )


def test_cli_writes_the_chart_copies(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpufleet\nversion: 0.1.0\n")
    result = gpufleet("telemetry", "rules", "--chart", str(chart))
    assert result.returncode == 0, result.stderr
    assert (chart / RULES_FILE).read_text() == dump(
        rule_groups(RulesConfig(), xids=xid_ratings(), limits=detection_limits())
    )
    assert "GpuThermalSlowdown" not in result.stdout  # written, not printed
    result = gpufleet("telemetry", "dashboard", "--chart", str(chart), "--out", str(tmp_path / "boards"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (chart / DASHBOARDS_DIR).iterdir()) == sorted(
        dashboard_files(dashboards(limits=detection_limits()))
    )
    assert len(list((tmp_path / "boards").glob("*.json"))) == 3
    not_a_chart = gpufleet("telemetry", "rules", "--chart", str(tmp_path / "boards"))
    assert not_a_chart.returncode == 2 and "not a Helm chart" in not_a_chart.stderr


_RATE_OF = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv|resets)\(\s*([A-Za-z_:][A-Za-z0-9_:]*)")


def test_no_rule_or_panel_takes_the_rate_of_a_gauge() -> None:
    """rate() and increase() read a counter's growth; on a gauge that falls (the windowed Xid and clock-event counts,
    which drop as samples leave their window) they read the falls as resets and invent growth. Every catalog field a
    shipped rule or dashboard panel takes a rate of is a counter; the windowed counts are read as they stand."""
    types = {f.name: f.prom_type for f in load_field_catalog()}
    exprs = [
        r["expr"] for g in rule_groups(xids=xid_ratings(), limits=detection_limits())["groups"] for r in g["rules"]
    ]
    exprs += [
        p["targets"][0]["expr"] for board in dashboards(limits=detection_limits()).values() for p in board["panels"]
    ]
    rated = {(fn, name) for expr in exprs for fn, name in _RATE_OF.findall(expr) if name in types}
    assert rated and all(types[name] == "counter" for _, name in rated), sorted(rated)
    windowed = ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT")
    assert all(types[name] == "gauge" for name in windowed)
    assert any("DCGM_EXP_XID_ERRORS_COUNT{" in expr and expr.endswith("> 0") for expr in exprs)  # the Xid alerts
