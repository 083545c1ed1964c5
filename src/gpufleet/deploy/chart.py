"""Where the Helm chart lives and the generated files it carries.

Helm reads only files inside a chart (`.Files.Get`), so the alert rules and Grafana dashboards that
`gpufleet telemetry` generates are written into the chart's `files/` too.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import UserError

CHART_NAME = "gpufleet"
RULES_FILE = "files/gpufleet-rules.yml"  # the rule groups, as the PrometheusRule's spec
DASHBOARDS_DIR = "files/dashboards"  # one JSON model per dashboard, into the dashboards ConfigMap
# The chart in an installed wheel (pyproject's force-include), else in a source checkout: <repo>/deploy/helm/gpufleet
# beside <repo>/src/gpufleet.
_PACKAGED_CHART = Path(__file__).resolve().parent / "helm-chart"
_CHECKOUT_CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / CHART_NAME


def chart_dir(path: Path | None = None) -> Path:
    """The chart at `path`, or the one in this source checkout; a UserError when it is not a chart."""
    if path is None and (_PACKAGED_CHART / "Chart.yaml").is_file():
        return _PACKAGED_CHART
    chart = path if path is not None else _CHECKOUT_CHART
    if not (chart / "Chart.yaml").is_file():
        where = f"{chart} is not a Helm chart (no Chart.yaml)"
        if path is None:
            raise UserError(
                f"the gpufleet chart is not beside this installation ({where})",
                fix="pass --chart PATH to deploy/helm/gpufleet of a gpufleet checkout",
            )
        raise UserError(where, fix="pass the chart's directory, e.g. deploy/helm/gpufleet")
    return chart
