"""`gpufleet telemetry`: the field catalog, alert rules and Grafana dashboards as files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, dump_json, emit, make_table
from gpufleet.errors import UserError

sub = typer.Typer(
    help="Telemetry artifacts: the metric field catalog, Prometheus alert rules, Grafana dashboards.",
    no_args_is_help=True,
)

OUT_HELP = "Write the files into this directory instead of printing."
CHART_HELP = "Also write them into this Helm chart's files/ (deploy/helm/gpufleet), which Helm reads them from."


def _write(out: Path, files: dict[str, str]) -> None:
    try:
        for name, text in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
    except OSError as exc:
        raise UserError(f"cannot write to {out}: {exc}", fix="choose a writable directory") from exc
    for name in files:
        console.print(f"wrote {out / name}", highlight=False)


def _chart(path: Path) -> Path:
    from gpufleet.deploy.chart import chart_dir

    return chart_dir(path)


@sub.command("fields")
def fields_cmd(
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
    all_fields: bool = typer.Option(False, "--all", help="Include fields that are switched off."),
    scope: str = typer.Option("", "--scope", help="Only this scope: gpu, ib_port, plain or fleet."),
    vendor: str = typer.Option(
        "",
        "--vendor",
        help="Show the names amd (AMD Device Metrics Exporter) or intel (Gaudi metric exporter) gives the fields, "
        "with the exporter's unit and the conversion from the canonical one.",
    ),
    sources: str = typer.Option(
        "",
        "--sources",
        metavar="LIST",
        help="For an agent with these sources, comma-separated (nvml, amdsmi, hlml, kmsg, ib-sysfs, attribution, "
        "idle-cost, app, twin), instead of this node's.",
    ),
    sim: bool = typer.Option(False, "--sim", help="For the twin's agent (`gpufleet agent --sim`), not this node's."),
    compare_dcgm_exporter: bool = typer.Option(
        False,
        "--compare-dcgm-exporter",
        help="Field by field against dcgm-exporter's default counters file: which fields both export, which only "
        "one does, and why (for an NVIDIA node's agent unless --sources or --sim say otherwise).",
    ),
) -> None:
    """List the metrics the agent exports: dcgm-exporter names, types, help texts, which are on, and, for this node
    (the sources `gpufleet agent` would run here), --sim or --sources, which source fills each one or why none does
    (a field no source fills has no value and is not exported). With --vendor, the series an AMD or Gaudi node
    exports instead, and which canonical field each comes from."""
    from gpufleet.cli.field_sources import all_sources, chosen_sources
    from gpufleet.telemetry.field_sources import field_fills
    from gpufleet.telemetry.fields import load_field_catalog

    if vendor and vendor.lower() != "nvidia":
        _vendor_fields(vendor.lower(), output)
        return
    if compare_dcgm_exporter:
        _compare(sources, sim, output)
        return
    chosen, what, missing = chosen_sources(sources, sim, this_node=True)
    fields = [f for f in load_field_catalog() if (all_fields or f.enabled) and (not scope or f.scope == scope)]
    rows = field_fills(fields, chosen, all_sources())

    def table(wide: bool) -> None:
        console.print(f"what {what} fill", highlight=False, markup=False)
        for line in missing:
            console.print(f"not here: {line}", highlight=False, markup=False)
        cols = ["NAME", "TYPE", "SCOPE", "ON", "FILLED BY", "WHY EMPTY"] + (["LABELS", "UNIT", "HELP"] if wide else [])
        data = [
            [r.field.name, r.field.prom_type, r.field.scope, "yes" if r.field.enabled else "no",
             ", ".join(r.sources) or "-", r.why_empty or (f"partly: {r.partly}" if r.partly else "")]
            + ([" ".join(r.field.labels), r.field.unit, r.field.help] if wide else [])
            for r in rows
        ]  # fmt: skip
        console.print(make_table(cols, data))

    emit([r.to_json() for r in rows], output, table)


def _compare(sources: str, sim: bool, output: OutputFormat) -> None:
    """dcgm-exporter's default counters file against what the agent exports (telemetry/dcgm_compare.py)."""
    from gpufleet.cli.field_sources import all_sources, chosen_sources
    from gpufleet.telemetry.dcgm_compare import compare

    chosen, what, _ = chosen_sources(sources, sim, this_node=False)  # neither: an NVIDIA node's agent
    rows = compare(chosen, all_sources())

    def table(wide: bool) -> None:
        console.print(f"dcgm-exporter's default counters file against what {what} export", highlight=False,
                      markup=False)  # fmt: skip
        cols = ["FIELD", "DCGM-EXPORTER", "GPUFLEET", "FILLED BY", "VERDICT", "WHY"]
        data = [[r.name, r.exporter or "-", r.gpufleet, ", ".join(r.filled_by) or "-", r.verdict, r.why]
                for r in rows]  # fmt: skip
        console.print(make_table(cols, data))

    emit([r.to_json() for r in rows], output, table)


def _vendor_fields(vendor: str, output: OutputFormat) -> None:
    from gpufleet.telemetry.vendor_metrics import field_names, load_vendor_metrics

    known = load_vendor_metrics().vendors
    if vendor not in known:
        raise UserError(f"unknown --vendor {vendor!r}", fix=f"use one of: nvidia, {', '.join(sorted(known))}")
    rows = field_names(vendor)

    def table(wide: bool) -> None:
        cols = ["FIELD", known[vendor].exporter.upper(), "UNIT", "FROM CANONICAL"]
        extra = [c for c in ("models", "partitions") if any(c in r for r in rows)] if wide else []
        data = [[r["field"], r["metric"], r["unit"], r["conversion"], *(r.get(c, "") for c in extra)] for r in rows]
        console.print(make_table(cols + [c.upper() for c in extra], data))

    emit(rows, output, table)


@sub.command("rules")
def rules_cmd(
    out: Path | None = typer.Option(None, "--out", help=OUT_HELP),
    output: OutputFormat = typer.Option(OutputFormat.yaml, "-o", "--output", help="yaml (default) or json."),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="YAML with the rules' own settings (fields of RulesConfig, e.g. hostname_label, vram_ratio, "
        "monitor_labels). What a fault is comes from the detection thresholds: see --thresholds.",
    ),
    price_file: Path | None = typer.Option(
        None,
        "--price-file",
        metavar="FILE",
        help="The cost config the idle-cost rules are priced with, as `gpufleet cost report --price-file` reads it "
        "(default: the catalog's list prices, as the report's).",
    ),
    hostname_label: str = typer.Option("hostname", "--hostname-label", help="hostname (4.x) or Hostname (3.x)."),
    chart: Path | None = typer.Option(None, "--chart", metavar="DIR", help=CHART_HELP),
    policy_file: Path | None = typer.Option(
        None, "--policy", help="Xid policy YAML merged over the default: the Xid rules page as it rates each code."
    ),
    thresholds_file: Path | None = typer.Option(
        None,
        "--thresholds",
        metavar="FILE",
        help="A site's detection thresholds merged over the defaults (default: the file GPUFLEET_THRESHOLDS names): "
        "the thermal, idle and InfiniBand rules fire where the agent's detectors judge a fault.",
    ),
) -> None:
    """Generate alert rules: a Prometheus rule file, its promtool unit tests, a PrometheusRule and a
    ServiceMonitor. With --out, writes gpufleet-rules.yml, gpufleet-rules-test.yml, prometheus-rule.yaml and
    service-monitor.yaml; with --chart, the rule file into the chart's files/; otherwise prints the rule file.
    Which Xid pages at which severity comes from the Xid policy (`gpufleet xid policy`), and the thermal, idle and
    InfiniBand thresholds from the detection thresholds, as the agent judges them."""
    from gpufleet.health.thresholds import detection_limits, load_thresholds
    from gpufleet.health.xid_policy import load_policy, xid_ratings
    from gpufleet.telemetry.monitoring.alert_rules import (
        RULE_FILE,
        RulesConfig,
        dump,
        prometheus_rule,
        rule_groups,
    )
    from gpufleet.telemetry.monitoring.rule_tests import rule_tests

    if hostname_label not in ("hostname", "Hostname"):
        raise UserError(f"bad --hostname-label {hostname_label!r}", fix="use hostname or Hostname")
    cfg = RulesConfig.from_file(config) if config else RulesConfig()
    cfg = cfg.model_copy(update={"hostname_label": hostname_label})
    from gpufleet.cost.config import CostConfig
    from gpufleet.cost.prices import priced_rules

    cost = CostConfig.from_file(price_file) if price_file is not None else CostConfig()
    cfg = priced_rules(cfg, cost, str(price_file) if price_file is not None else "")  # the report's prices
    xids = xid_ratings(load_policy(policy_file))
    limits = detection_limits(load_thresholds(thresholds_file))
    if chart is not None:
        from gpufleet.deploy.chart import RULES_FILE

        _write(_chart(chart), {RULES_FILE: dump(rule_groups(cfg, xids=xids, limits=limits))})
    if out is not None:
        from gpufleet.telemetry.monitoring.alert_rules import service_monitor

        _write(
            out,
            {
                RULE_FILE: dump(rule_groups(cfg, xids=xids, limits=limits)),
                "gpufleet-rules-test.yml": dump(rule_tests(cfg, xids=xids, limits=limits)),
                "prometheus-rule.yaml": dump(prometheus_rule(cfg, xids=xids, limits=limits)),
                "service-monitor.yaml": dump(service_monitor(cfg)),
            },
        )
    if out is not None or chart is not None:
        return
    groups = rule_groups(cfg, xids=xids, limits=limits)
    sys.stdout.write(dump_json(groups) + "\n" if output is OutputFormat.json else dump(groups))


@sub.command("dashboard")
def dashboard_cmd(
    out: Path | None = typer.Option(None, "--out", help=OUT_HELP),
    output: OutputFormat = typer.Option(OutputFormat.json, "-o", "--output", help="json (default) or yaml."),
    hostname_label: str = typer.Option("hostname", "--hostname-label", help="hostname (4.x) or Hostname (3.x)."),
    chart: Path | None = typer.Option(None, "--chart", metavar="DIR", help=CHART_HELP),
    thresholds_file: Path | None = typer.Option(
        None,
        "--thresholds",
        metavar="FILE",
        help="A site's detection thresholds (default: the file GPUFLEET_THRESHOLDS names): the panels mark them.",
    ),
) -> None:
    """Generate Grafana dashboards (cluster overview, node view, fabric view) from the field catalog. With --out
    or --chart (into its files/dashboards/), one JSON file per dashboard; otherwise printed."""
    from gpufleet.health.thresholds import detection_limits, load_thresholds
    from gpufleet.telemetry.monitoring.dashboards import dashboard_files, dashboards

    if hostname_label not in ("hostname", "Hostname"):
        raise UserError(f"bad --hostname-label {hostname_label!r}", fix="use hostname or Hostname")
    limits = detection_limits(load_thresholds(thresholds_file))
    boards: dict[str, Any] = dashboards(hostname_label, limits=limits)  # type: ignore[arg-type]
    if chart is not None:
        from gpufleet.deploy.chart import DASHBOARDS_DIR

        _write(_chart(chart), {f"{DASHBOARDS_DIR}/{name}": text for name, text in dashboard_files(boards).items()})
    if out is not None:
        _write(out, dashboard_files(boards))
    if out is not None or chart is not None:
        return
    if output is OutputFormat.yaml:
        from gpufleet.cli.output import dump_yaml

        sys.stdout.write(dump_yaml(boards))
    else:
        sys.stdout.write(json.dumps(boards, indent=2) + "\n")


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="telemetry")
