"""`gpufleet deploy`: gpufleet's Kubernetes manifests, rendered from its Helm chart with real Helm."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, err_console, make_table
from gpufleet.deploy.render import DEFAULT_KUBE_VERSION
from gpufleet.errors import UserError

sub = typer.Typer(
    help="Deploy gpufleet: Kubernetes manifests from the Helm chart, and how big a deployment gets.",
    no_args_is_help=True,
)

# typer keeps the line breaks of every paragraph after the first: each is one line here
RENDER_HELP = "\n\n".join(
    (
        "Render the Helm chart (deploy/helm/gpufleet) with Helm's own engine from one values file merged over the "
        "chart's defaults, check every object against the Kubernetes schemas of --kube-version (strict: an unknown "
        "field is an error), and print the manifests or write one file per object (<kind>-<name>.yaml) into --out.",
        "The values file is checked against the chart's schema first: an unknown key or a wrong type is an error "
        "that names it. Custom resources (ServiceMonitor, PrometheusRule) have no Kubernetes schema and are only "
        "rendered. With --out, files an earlier render wrote there and this one does not are removed.",
        "Examples:",
        "  gpufleet deploy render -f deploy/kubernetes/values.yaml --out deploy/kubernetes/manifests",
        "  gpufleet deploy render -f my-values.yaml --namespace gpu-ops | kubectl apply -f -",
        "  gpufleet deploy render -f my-values.yaml --kube-version 1.30 -o json",
    )
)


@sub.command("render", help=RENDER_HELP)
def render_cmd(
    values: str | None = typer.Option(
        None, "-f", "--values", metavar="FILE", help="The values file (YAML; - reads stdin). Default: the chart's own."
    ),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="Write one file per object here instead of printing them."
    ),
    name: str = typer.Option("gpufleet", "--name", help="The release name, which the objects' names start with."),
    namespace: str = typer.Option("gpufleet", "--namespace", "-n", help="The namespace the objects go into."),
    kube_version: str = typer.Option(
        DEFAULT_KUBE_VERSION,
        "--kube-version",
        help="Check the objects against this Kubernetes version's schemas (1.30 or newer).",
    ),
    output: OutputFormat = typer.Option(
        OutputFormat.yaml,
        "-o",
        "--output",
        metavar="yaml|json",
        help="Printed as yaml (default: one stream) or json (a v1 List); --out always writes YAML files.",
    ),
    chart: Path | None = typer.Option(
        None, "--chart", metavar="DIR", help="The chart to render (default: deploy/helm/gpufleet of this checkout)."
    ),
) -> None:
    from gpufleet.deploy.render import load_values, render, to_json, to_yaml, write

    if output not in (OutputFormat.yaml, OutputFormat.json):
        raise UserError(f"-o {output.value} is not a manifest format", fix="use -o yaml or -o json")
    if values is not None:
        text, cited = read_input_text(values)
        given = load_values(text, cited)
    else:
        given, cited = {}, "the chart's defaults"
    rendered = render(given, source=cited, chart=chart, name=name, namespace=namespace, version=kube_version)
    unchecked = ", ".join(m.label for m in rendered.unchecked)
    if out is None:
        sys.stdout.write(to_json(rendered.manifests) if output is OutputFormat.json else to_yaml(rendered.manifests))
        if unchecked:
            err_console.print(f"not checked (custom resources): {unchecked}", highlight=False, soft_wrap=True)
        return
    written, removed = write(rendered.manifests, out)
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    for path in removed:
        console.print(f"removed {path} (no longer rendered)", highlight=False)
    checked = len(written) - len(rendered.unchecked)
    console.print(
        f"{checked} objects valid for Kubernetes {rendered.kube_version}"
        + (f"; not checked (custom resources): {unchecked}" if unchecked else ""),
        highlight=False,
        soft_wrap=True,
    )


SIZE_HELP = "\n\n".join(
    (
        "How big a deployment gets: active series, samples/s and storage from the field catalog (what the agent "
        "exports per GPU, per InfiniBand port and per node; an upper bound: a GPU without a sensor leaves its field "
        "out), and control-plane cores and replicas from the measured ingest capacity of one `gpufleet server`.",
        "Examples:",
        "  gpufleet deploy size --nodes 1024",
        "  gpufleet deploy size --nodes 256 --gpus-per-node 4 --ib-ports 4 --interval 30s --retention 30d -o json",
    )
)


@sub.command("size", help=SIZE_HELP)
def size_cmd(
    nodes: int = typer.Option(..., "--nodes", min=1, help="GPU nodes running the agent."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=0, help="GPUs (or MIG instances) per node."),
    ib_ports: int = typer.Option(8, "--ib-ports", min=0, help="InfiniBand ports per node."),
    interval: str = typer.Option("15s", "--interval", help="Prometheus' scrape interval."),
    retention: str = typer.Option("15d", "--retention", help="How long Prometheus keeps samples."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    from gpufleet.spec.base import parse_duration
    from gpufleet.telemetry.sizing import NODES_PER_CORE, PROMETHEUS_BYTES_PER_SAMPLE, size

    interval_s, retention_s = parse_duration(interval), parse_duration(retention)
    if interval_s <= 0 or retention_s <= 0:
        raise UserError("--interval and --retention must be positive", fix="e.g. --interval 15s --retention 15d")
    plan = size(nodes, gpus_per_node, ib_ports, interval_s, retention_s / 86_400)

    def table(wide: bool) -> None:
        rows = [
            ["series per GPU", f"{plan.series_per_gpu}"],
            ["series per IB port", f"{plan.series_per_ib_port}"],
            ["series per node", f"{plan.series_per_node:,}"],
            ["active series", f"{plan.active_series:,}"],
            ["samples/s", f"{plan.samples_per_s:,.0f}"],
            ["storage per day", f"{plan.bytes_per_day / 1e9:,.1f} GB at {PROMETHEUS_BYTES_PER_SAMPLE:g} bytes/sample"],
            [f"storage for {retention}", f"{plan.retained_bytes / 1e9:,.0f} GB"],
            ["control-plane CPU", f"{plan.control_plane_cores:.2f} cores ({NODES_PER_CORE:,} nodes a core)"],
            ["control-plane replicas", f"{plan.control_plane_replicas} (N+1, at least 2)"],
        ]
        console.print(make_table(["", f"{nodes:,} nodes x {gpus_per_node} GPUs"], rows))

    emit(plan.to_json(), output, table)


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="deploy")
