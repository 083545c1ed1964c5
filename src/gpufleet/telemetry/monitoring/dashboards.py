"""Grafana dashboards (cluster overview, node, fabric) generated from the field catalog and
data/dashboards.yaml. The cluster overview ends with a mixed-fleet panel set on the vendor-neutral
gpufleet_accelerator_* series, so NVIDIA, AMD and Gaudi nodes show side by side.

Where a panel marks a threshold it is the detectors' (the `DetectionLimits` the alert rules judge by): the
utilization timeline is red where a GPU is idle as the idle detector judges it, and a port counter's panel draws
the rate at which the agent's fabric detector and the port's alert rule call it a fault."""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml

from gpufleet.catalog import load_ib_counters
from gpufleet.telemetry.fields import FieldCatalog, MetricField, load_field_catalog, read_data
from gpufleet.telemetry.monitoring.alert_rules import DetectionLimits

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_UNITS = {"hertz_mhz": "rothz", "millijoule": "short", "ns": "ns"}
_WIDTH = {"stat": 6, "timeseries": 12, "state-timeline": 24, "table": 24}
_HEIGHT = {"stat": 4, "timeseries": 8, "state-timeline": 10, "table": 8}


def _unit(field: MetricField) -> str:
    if field.unit == "hertz_mhz":
        return "MHz"  # Grafana has no MHz unit id; a custom suffix reads right
    return _UNITS.get(field.unit, field.unit)


def _title(field: MetricField) -> str:
    text = field.help.split(" (")[0].rstrip(".")
    return text[:1].upper() + text[1:]


class _Layout:
    def __init__(self) -> None:
        self.x = self.y = self.row_h = 0
        self.next_id = 1

    def place(self, width: int, height: int) -> dict[str, int]:
        if self.x + width > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": width, "h": height}
        self.x += width
        self.row_h = max(self.row_h, height)
        return pos


def _selector(name: str, host_label: str, host_variable: bool) -> str:
    return f'{name}{{{host_label}=~"$host"}}' if host_variable else name


def _panel(
    lay: _Layout,
    kind: str,
    title: str,
    expr: str,
    legend: str,
    unit: str,
    description: str,
    limits: DetectionLimits,
    line: float | None = None,
) -> dict[str, Any]:
    panel: dict[str, Any] = {
        "id": lay.next_id,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": lay.place(_WIDTH[kind], _HEIGHT[kind]),
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }
    lay.next_id += 1
    if kind == "timeseries":
        panel["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi"},
        }
        if line is not None:  # where the detectors call it a fault, drawn as a red line
            panel["fieldConfig"]["defaults"]["thresholds"] = {
                "mode": "absolute",
                "steps": [{"color": "green", "value": None}, {"color": "red", "value": line}],
            }
            panel["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line"}}
    elif kind == "stat":
        panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    elif kind == "state-timeline":
        panel["fieldConfig"]["defaults"]["thresholds"] = {
            "mode": "absolute",
            "steps": [
                {"color": "red", "value": None},  # idle, as the idle detector and GpuIdleCost judge it
                {"color": "orange", "value": limits.idle_util_percent},
                {"color": "yellow", "value": 50},
                {"color": "green", "value": 80},
            ],
        }
        panel["fieldConfig"]["defaults"]["color"] = {"mode": "thresholds"}
        panel["options"] = {"showValue": "never", "mergeValues": False, "rowHeight": 0.9}
    return panel


def _variables(host_label: str, host_variable: bool) -> dict[str, Any]:
    variables: list[dict[str, Any]] = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}
    ]
    if host_variable:
        variables.append(
            {
                "name": "host",
                "label": "Host",
                "type": "query",
                "datasource": DATASOURCE,
                "query": {"query": f"label_values(DCGM_FI_DEV_GPU_TEMP, {host_label})", "refId": "host"},
                "definition": f"label_values(DCGM_FI_DEV_GPU_TEMP, {host_label})",
                "refresh": 2,
                "includeAll": True,
                "multi": True,
                "current": {"text": "All", "value": "$__all"},
            }
        )
    return {"list": variables}


def _shell(title: str, uid: str, host_label: str, host_variable: bool) -> dict[str, Any]:
    return {
        "title": title,
        "uid": uid,
        "tags": ["gpufleet", "gpu"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": _variables(host_label, host_variable),
        "annotations": {"list": []},
        "panels": [],
    }


def _gpu_dashboard(
    spec: dict[str, Any], catalog: FieldCatalog, host_label: str, limits: DetectionLimits
) -> dict[str, Any]:
    host_var = bool(spec.get("host_variable"))
    board = _shell(spec["title"], spec["uid"], host_label, host_var)
    lay = _Layout()
    for item in spec["panels"]:
        field = catalog.get(item["field"])
        base = _selector(field.name, host_label, host_var)
        if item.get("rate"):
            base = f"rate({base}[5m])"
        by = [host_label if b == "host" else b for b in item.get("by", [])]
        if "expr" in item:  # a query the field/agg/by form cannot say (a ratio of two families)
            expr = item["expr"]
        elif "agg" in item:
            expr = f"{item['agg']} by ({', '.join(by)}) ({base})" if by else f"{item['agg']}({base})"
        else:
            expr = base
        legend = item.get("legend") or " ".join("{{" + b + "}}" for b in by)
        legend = legend.replace("{{host}}", "{{" + host_label + "}}")
        title = item.get("title") or _title(field)
        unit = item.get("unit") or _unit(field)
        board["panels"].append(_panel(lay, item["kind"], title, expr, legend, unit, field.help, limits))
    return board


def _fabric_dashboard(spec: dict[str, Any], catalog: FieldCatalog, limits: DetectionLimits) -> dict[str, Any]:
    board = _shell(spec["title"], spec["uid"], "hostname", True)
    lay = _Layout()
    counters = {c.metric: c for c in load_ib_counters().values()}
    per_second = {p.counter: p.limit / limits.port_window_s for p in limits.port_limits}
    for kind in spec["ib_kinds"]:
        for field in catalog.scoped("ib_port"):
            counter = counters.get(field.name)
            if counter is None or counter.kind != kind:
                continue
            expr = f'rate({field.name}{{hostname=~"$host"}}[5m])'
            unit = "Bps" if field.unit == "bytes" else "cps"
            title = f"{counter.name} ({kind})"
            legend = "{{hostname}} {{hca}}/{{port}} rail {{rail}}"
            line = per_second.get(counter.name)
            board["panels"].append(_panel(lay, "timeseries", title, expr, legend, unit, field.help, limits, line))
    return board


def dashboards(
    hostname_label: Literal["hostname", "Hostname"] = "hostname",
    catalog: FieldCatalog | None = None,
    *,
    limits: DetectionLimits,
) -> dict[str, dict[str, Any]]:
    """Dashboard JSON models by file stem: gpufleet-cluster, gpufleet-node, gpufleet-fabric; their thresholds are
    `limits`' (health.thresholds `detection_limits`)."""
    cat = catalog or load_field_catalog()
    spec = yaml.safe_load(read_data("dashboards.yaml"))
    boards = {
        spec["cluster"]["uid"]: _gpu_dashboard(spec["cluster"], cat, hostname_label, limits),
        spec["node"]["uid"]: _gpu_dashboard(spec["node"], cat, hostname_label, limits),
        spec["fabric"]["uid"]: _fabric_dashboard(spec["fabric"], cat, limits),
    }
    return boards


def dashboard_files(boards: dict[str, dict[str, Any]]) -> dict[str, str]:
    """File name -> JSON text, one file per dashboard (what Grafana's provisioning and its sidecar read)."""
    return {f"{uid}.json": json.dumps(board, indent=2) + "\n" for uid, board in boards.items()}
