"""`gpufleet deploy`: gpufleet's Kubernetes manifests, rendered from its Helm chart with real Helm; the SLO alert
rules of inference services; a KEDA ScaledObject that scales one on its own latency or queue."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import (
    OUTPUT_HELP,
    OutputFormat,
    console,
    dump_json,
    dump_yaml,
    emit,
    err_console,
    make_table,
    print_or_write,
)
from gpufleet.deploy.keda import DEFAULT_PROMETHEUS
from gpufleet.deploy.render import DEFAULT_KUBE_VERSION
from gpufleet.errors import UserError

sub = typer.Typer(
    help="Deploy gpufleet: Kubernetes manifests from the Helm chart, how big a deployment gets, SLO alert rules "
    "and KEDA autoscaling for inference services.",
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
        "How big a deployment gets: active series, samples/s and storage from what the agent's sources fill of the "
        "field catalog (per GPU, per InfiniBand port and per node: `gpufleet telemetry fields` says which source "
        "fills each field; an upper bound still, as a GPU without NVLink has no NVLink counters), and control-plane "
        "cores and replicas from the measured ingest capacity of one `gpufleet server`.",
        "The sources are an NVIDIA node's agent by default (nvml, kmsg, ib-sysfs, attribution, idle-cost); --sim "
        "counts what the twin's agent (`gpufleet agent --sim`) fills, --sources any set of them.",
        "Examples:",
        "  gpufleet deploy size --nodes 1024",
        "  gpufleet deploy size --nodes 256 --gpus-per-node 4 --ib-ports 4 --interval 30s --retention 30d -o json",
        "  gpufleet deploy size --nodes 32 --sources nvml,kmsg,ib-sysfs,attribution,idle-cost,app",
    )
)


@sub.command("size", help=SIZE_HELP)
def size_cmd(
    nodes: int = typer.Option(..., "--nodes", min=1, help="GPU nodes running the agent."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=0, help="GPUs (or MIG instances) per node."),
    ib_ports: int = typer.Option(8, "--ib-ports", min=0, help="InfiniBand ports per node."),
    interval: str = typer.Option("15s", "--interval", help="Prometheus' scrape interval."),
    retention: str = typer.Option("15d", "--retention", help="How long Prometheus keeps samples."),
    sources: str = typer.Option(
        "", "--sources", metavar="LIST", help="The agent's sources, comma-separated (default: an NVIDIA node's)."
    ),
    sim: bool = typer.Option(False, "--sim", help="Count what the twin's agent fills."),
    bmc_sensors: str = typer.Option(
        "",
        "--bmc-sensors",
        metavar="F,P,T,W",
        help="The BMC's fans, power supplies, temperature sensors and power readings, each a series or two "
        "(default 6,2,20,3: an assumed 2U GPU server; an 8-GPU HGX chassis has more).",
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    from gpufleet.cli.field_sources import chosen_sources
    from gpufleet.spec.base import parse_duration
    from gpufleet.telemetry.monitoring.sizing import NODES_PER_CORE, PROMETHEUS_BYTES_PER_SAMPLE, BmcSensors, size

    interval_s, retention_s = parse_duration(interval), parse_duration(retention)
    if interval_s <= 0 or retention_s <= 0:
        raise UserError("--interval and --retention must be positive", fix="e.g. --interval 15s --retention 15d")
    chosen, what, _ = chosen_sources(sources, sim, this_node=False)
    bmc = BmcSensors.parse(bmc_sensors) if bmc_sensors else BmcSensors()
    plan = size(nodes, gpus_per_node, ib_ports, interval_s, retention_s / 86_400, sources=chosen, bmc=bmc)

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
        console.print(f"the fields {what} fill", highlight=False)
        console.print(make_table(["", f"{nodes:,} nodes x {gpus_per_node} GPUs"], rows))

    emit({**plan.to_json(), "sources": [s.source for s in chosen]}, output, table)


class SloFormat(StrEnum):
    prometheus_rule = "prometheus-rule"
    rules = "rules"


class Signal(StrEnum):
    p99 = "p99"
    queue = "queue"


def _manifest_format(output: OutputFormat) -> None:
    if output not in (OutputFormat.yaml, OutputFormat.json):
        raise UserError(f"-o {output.value} is not a manifest format", fix="use -o yaml or -o json")


SLO_HELP = "\n\n".join(
    (
        "Prometheus rules for the service-level objectives of inference services: recording rules for the share of "
        "bad requests of every objective over 5m, 30m, 1h and 6h, multi-window multi-burn-rate alerts on them (a "
        "page at 14.4 times the budget's pace over 1h and 5m, a ticket at 6 times over 6h and 30m, for a 30-day "
        "budget), the objectives as plain threshold alerts (InferenceLatencyP99High, InferenceErrorRateHigh, ...), "
        "and an info alert for a service with too little traffic to judge, whose other alerts are held.",
        "The objectives file has `defaults` (p99_s, p95_s, ttft_s, ttft_quantile, error_ratio, availability, "
        "latency_window_s, availability_window_s, budget_window_days, min_requests_per_s) and `services`, a list of "
        "the same fields with the `model` (and optionally `version`) label of a service; every other model is "
        "judged by the defaults. Latency thresholds must be bucket bounds of gpufleet's histograms.",
        "Examples:",
        "  gpufleet deploy slo | kubectl apply -f -",
        "  gpufleet deploy slo -f deploy/monitoring/slo-config.yaml --format rules --out gpufleet-slo-rules.yml",
        "  gpufleet deploy slo -f slo.yaml --rules-config deploy/monitoring/rules-config.yaml -o json",
    )
)


@sub.command("slo", help=SLO_HELP)
def slo_cmd(
    filename: str | None = typer.Option(
        None, "-f", "--filename", metavar="FILE", help="The objectives (YAML; - reads stdin). Default: built-in."
    ),
    fmt: SloFormat = typer.Option(
        SloFormat.prometheus_rule,
        "--format",
        help="prometheus-rule (a monitoring.coreos.com/v1 object) or rules (a rule file for rule_files:).",
    ),
    rules_config: Path | None = typer.Option(
        None,
        "--rules-config",
        metavar="FILE",
        help="The PrometheusRule's namespace and monitor_labels from this rules config (as `gpufleet telemetry "
        "rules --config` reads it). Default: namespace monitoring, release: kube-prometheus-stack.",
    ),
    out: Path | None = typer.Option(None, "--out", metavar="FILE", help="Write to this file instead of printing."),
    output: OutputFormat = typer.Option(OutputFormat.yaml, "-o", "--output", metavar="yaml|json", help="yaml or json."),
) -> None:
    from gpufleet.telemetry.monitoring import slo_rules as slo
    from gpufleet.telemetry.monitoring.alert_rules import RulesConfig, dump
    from gpufleet.telemetry.monitoring.objectives import SloConfig

    _manifest_format(output)
    if filename is not None:
        text, cited = read_input_text(filename)
        cfg = slo.load_config(text, cited)
    else:
        cfg = SloConfig()
    rules_cfg = RulesConfig.from_file(rules_config) if rules_config else RulesConfig()
    data = slo.prometheus_rule(cfg, rules_cfg) if fmt is SloFormat.prometheus_rule else slo.rule_groups(cfg)
    print_or_write(dump_json(data) + "\n" if output is OutputFormat.json else dump(data), out)


KEDA_HELP = "\n\n".join(
    (
        "A KEDA ScaledObject (keda.sh/v1alpha1) that scales an inference Deployment on a Prometheus query of "
        "gpufleet's serving metrics. --signal p99 scales on the p99 request duration over 2 minutes against "
        "--target seconds (default: 75% of the p99 objective, 1.5 s); --signal queue on the requests waiting, "
        "--target per replica (default 4).",
        "--min-replicas 0 scales to zero (queue only: at zero replicas there is no latency to measure); the queue "
        "depth must then come from something that stays up, such as the router in front of the model, and the "
        "first waiting request wakes the Deployment (--activation-threshold, default 0). The object is checked "
        "against KEDA's CRD schema (strict: an unknown field is an error) before it is printed.",
        "Examples:",
        "  gpufleet deploy keda --deployment llm-serve --model llama-3-70b -n ml | kubectl apply -f -",
        "  gpufleet deploy keda --deployment llm-serve --model llama-3-70b --signal queue --target 8 "
        "--min-replicas 0 --max-replicas 16",
        "  gpufleet deploy keda --deployment chat --model chat --prometheus https://prom.example.com --auth prom-creds",
    )
)


@sub.command("keda", help=KEDA_HELP)
def keda_cmd(
    deployment: str = typer.Option(..., "--deployment", metavar="NAME", help="The Deployment to scale."),
    model: str = typer.Option(..., "--model", metavar="MODEL", help="The `model` label of the service's metrics."),
    model_version: str | None = typer.Option(
        None, "--model-version", metavar="VERSION", help="Only this `version` label's series (default: all)."
    ),
    signal: Signal = typer.Option(Signal.p99, "--signal", help="p99 (request duration) or queue (waiting requests)."),
    target: float | None = typer.Option(
        None, "--target", help="p99: seconds; queue: waiting requests per replica. Default: 1.5 s or 4."
    ),
    min_replicas: int = typer.Option(1, "--min-replicas", help="0 scales to zero (queue only)."),
    max_replicas: int = typer.Option(10, "--max-replicas"),
    namespace: str = typer.Option("default", "--namespace", "-n", help="The Deployment's namespace."),
    prometheus: str = typer.Option(DEFAULT_PROMETHEUS, "--prometheus", metavar="URL", help="Prometheus' address."),
    name: str | None = typer.Option(None, "--name", help="The ScaledObject's name (default: the Deployment's)."),
    polling_interval: int = typer.Option(15, "--polling-interval", metavar="SECONDS", help="How often KEDA asks."),
    cooldown: int = typer.Option(
        300, "--cooldown", metavar="SECONDS", help="How long after the last activity before scaling to zero."
    ),
    activation_threshold: float | None = typer.Option(
        None, "--activation-threshold", help="The value above which the Deployment leaves zero replicas."
    ),
    auth: str | None = typer.Option(
        None, "--auth", metavar="NAME", help="A TriggerAuthentication holding Prometheus' credentials."
    ),
    cluster_auth: bool = typer.Option(False, "--cluster-auth", help="--auth names a ClusterTriggerAuthentication."),
    output: OutputFormat = typer.Option(OutputFormat.yaml, "-o", "--output", metavar="yaml|json", help="yaml or json."),
) -> None:
    from gpufleet.deploy.keda import KedaOptions, scaled_object

    _manifest_format(output)
    opts = KedaOptions(
        deployment=deployment,
        model=model,
        version=model_version,
        signal="queue" if signal is Signal.queue else "p99",
        target=target,
        namespace=namespace,
        name=name,
        server_address=prometheus,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        polling_interval_s=polling_interval,
        cooldown_period_s=cooldown,
        activation_threshold=activation_threshold,
        authentication=auth,
        authentication_kind="ClusterTriggerAuthentication" if cluster_auth else "TriggerAuthentication",
    )
    obj: dict[str, Any] = scaled_object(opts)
    sys.stdout.write(dump_json(obj) + "\n" if output is OutputFormat.json else dump_yaml(obj))


VALIDATE_HELP = "\n\n".join(
    (
        "Validate a GPU install with a real workload on every GPU node, as operators do by hand after a GPU Operator "
        "install or a driver change: a `cuda` step asking for one GPU runs nvidia-smi and CUDA's vectorAdd sample "
        '("Test PASSED"), and on a node with several GPUs an `nccl` step asking for all of them runs a short '
        "nccl-tests all_reduce_perf across them. Each node gets PASS or FAIL with the reason: the image pull, "
        'unschedulable, nvidia-smi failing, "Test PASSED" missing, bus bandwidth far below the expected.',
        "Kubernetes: one Job per node and step, pinned to the node, tolerating nvidia.com/gpu and the node's own "
        "taints, labelled with the run (gpufleet.io/validate-run), deleted after their logs are read (--keep leaves "
        "them). --render prints the Jobs instead (checked against the Kubernetes schemas), from the cluster or from "
        "a `kubectl get nodes -o json` capture (-f) or a gpufleet cluster manifest (--cluster). Slurm (--slurm): "
        "the same steps through `srun -w NODE --gres=gpu:N`, in NVIDIA's images through pyxis unless --bare; "
        "--render prints an sbatch script.",
        "--judge reads what steps run by hand printed (`kubectl logs job/NAME`, the sbatch script's "
        "gpufleet-validate-NODE-STEP.out files) and judges each as a run does.",
        "The exit status is 1 when a node fails.",
        "Examples:",
        "  gpufleet deploy validate -n gpu-validate",
        "  gpufleet deploy validate --node dgx-004 --node dgx-005 -o json",
        "  gpufleet deploy validate --render -f nodes.json | kubectl apply -f -",
        "  gpufleet deploy validate --slurm --partition gpu",
        "  gpufleet deploy validate --slurm --render > validate.sbatch",
        "  gpufleet deploy validate --render --cluster examples/clusters/dgx-h100-su.yaml --node dgx-000",
    )
)


@sub.command("validate", help=VALIDATE_HELP)
def validate_cmd(
    snapshot: str | None = typer.Option(
        None, "-f", "--snapshot", metavar="FILE", help="`kubectl get nodes -o json` (- reads stdin): render for it."
    ),
    cluster: Path | None = typer.Option(
        None, "--cluster", metavar="FILE", help="A gpufleet cluster manifest (kind: Cluster): render for its nodes."
    ),
    render_only: bool = typer.Option(False, "--render", help="Print the Jobs (or, with --slurm, the sbatch script)."),
    judge: list[Path] = typer.Option(
        [], "--judge", metavar="FILE|DIR", help="Judge saved step output (repeatable; a directory: its *.out, *.log)."
    ),
    nodes: list[str] = typer.Option([], "--node", metavar="NAME", help="Only this node (repeatable)."),
    namespace: str = typer.Option("default", "--namespace", "-n", help="Where the Jobs run."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="The kubeconfig (default: ~/.kube/config)."),
    context: str | None = typer.Option(None, "--context", help="The kubeconfig context to use."),
    timeout: int = typer.Option(
        900, "--timeout", metavar="SECONDS", min=30, help="Each step's deadline, its image pull included."
    ),
    keep: bool = typer.Option(False, "--keep", help="Leave the Jobs after the run (their TTL removes them in 1h)."),
    vectoradd_image: str | None = typer.Option(None, "--vectoradd-image", metavar="IMAGE", help="The vectorAdd image."),
    nccl_image: str | None = typer.Option(None, "--nccl-image", metavar="IMAGE", help="An image with nccl-tests."),
    runtime_class: str | None = typer.Option(
        None, "--runtime-class", metavar="NAME", help="The pods' RuntimeClass (e.g. nvidia) where it is not default."
    ),
    kube_version: str = typer.Option(
        DEFAULT_KUBE_VERSION, "--kube-version", help="Check rendered Jobs against this Kubernetes version's schemas."
    ),
    slurm: bool = typer.Option(False, "--slurm", help="Validate the Slurm cluster's GPU nodes through srun."),
    slurm_conf: Path | None = typer.Option(None, "--slurm-conf", metavar="FILE", help="The cluster's slurm.conf."),
    partition: str | None = typer.Option(None, "--partition", help="Slurm: the partition the steps run in."),
    bare: bool = typer.Option(
        False, "--bare", help="Slurm: run nvidia-smi, vectorAdd and all_reduce_perf from the node's PATH, not images."
    ),
    vectoradd: str = typer.Option(
        "/cuda-samples/vectorAdd", "--vectoradd", metavar="PATH", help="Slurm: the vectorAdd binary to run."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    import secrets

    from gpufleet.deploy import validate as v
    from gpufleet.deploy.validate_judge import reports
    from gpufleet.deploy.validate_run import problems

    va_image, nccl = vectoradd_image or v.VECTORADD_IMAGE, nccl_image or v.NCCL_IMAGE
    if judge:
        from gpufleet.deploy.validate_judge import judge_saved

        results = [judge_saved(text, name) for name, text in _saved_outputs(judge)]
    elif slurm:
        from gpufleet.deploy.validate_run import SlurmOptions, batch_script, run_slurm, slurm_nodes
        from gpufleet.integrations.slurm.client import SlurmRunner

        if snapshot is not None:
            raise UserError("-f takes a Kubernetes capture", fix="drop -f with --slurm: the nodes come from scontrol")
        sopts = SlurmOptions(timeout, partition, not bare, va_image, nccl, vectoradd)
        runner = SlurmRunner(str(slurm_conf) if slurm_conf else None, timeout_s=60)
        gpu_nodes = v.select(v.nodes_from_cluster(cluster) if cluster else slurm_nodes(runner), nodes)
        if render_only or cluster is not None:
            sys.stdout.write(batch_script(gpu_nodes, sopts))
            return
        results = problems(gpu_nodes) + run_slurm(runner, gpu_nodes, sopts, on_result=_progress)
    else:
        opts = v.JobOptions(
            namespace=namespace,
            run_id="manual" if render_only or snapshot or cluster else secrets.token_hex(3),
            timeout_s=timeout,
            vectoradd_image=va_image,
            nccl_image=nccl,
            runtime_class=runtime_class,
        )
        core = None
        if snapshot is not None and cluster is not None:
            raise UserError("-f and --cluster both name the nodes", fix="give one of them")
        if cluster is not None:
            found = v.nodes_from_cluster(cluster)
        elif snapshot is not None:
            text, cited = read_input_text(snapshot)
            found = [g for g in (v.gpu_node(n) for n in v.nodes_from_snapshot(text, cited)) if g is not None]
        else:
            from gpufleet.integrations.kubernetes.client import connect

            core = connect(kubeconfig, context)
            found = [g for g in (v.gpu_node(n) for n in core.list_node().items or []) if g is not None]
        gpu_nodes = v.select(found, nodes)
        planned = v.plan(gpu_nodes, opts)
        if core is None or render_only:
            from gpufleet.deploy.render import to_json, to_yaml

            checked = v.manifests(planned, kube_version)
            sys.stdout.write(to_json(checked) if output is OutputFormat.json else to_yaml(checked))
            for result in problems(gpu_nodes):
                err_console.print(f"{result.node}: not rendered: {result.reason}", highlight=False, soft_wrap=True)
            return
        from gpufleet.deploy.validate_run import KubernetesRun
        from gpufleet.integrations.kubernetes.client import kubernetes_module

        assert core is not None  # connected above: no snapshot
        batch = kubernetes_module().client.BatchV1Api(core.api_client)
        run = KubernetesRun(core, batch, opts, keep=keep)
        results = problems(gpu_nodes) + run.run(planned, on_result=_progress)
    if not results:
        raise UserError("no GPU node to validate", fix="check the nodes advertise nvidia.com/gpu (or Slurm GRES gpu)")
    by_node = reports(results)

    def table(wide: bool) -> None:
        rows = []
        for report in by_node:
            for step in report.steps:
                row = [report.node, step.step, step.status, step.reason]
                if wide:
                    row.append(" | ".join(step.evidence))
                rows.append(row)
        console.print(make_table(["NODE", "STEP", "RESULT", "REASON", *(["EVIDENCE"] if wide else [])], rows))
        failed = [r.node for r in by_node if r.status == "FAIL"]
        console.print(
            f"{len(by_node) - len(failed)} of {len(by_node)} nodes passed"
            + (f"; failed: {', '.join(failed)}" if failed else ""),
            highlight=False,
            soft_wrap=True,
        )

    emit({"nodes": [r.as_dict() for r in by_node]}, output, table)
    if any(r.status == "FAIL" for r in by_node):
        raise typer.Exit(1)


def _saved_outputs(paths: list[Path]) -> list[tuple[str, str]]:
    """(name, text) of each file named, and of each *.out / *.log in a directory named that holds step output (the
    batch job's own output file beside them holds none)."""
    from gpufleet.deploy.validate import MARK

    files: list[tuple[Path, bool]] = []
    for path in paths:
        if path.is_dir():
            files += [(p, False) for p in sorted(path.iterdir()) if p.suffix in (".out", ".log") and p.is_file()]
        else:
            files.append((path, True))
    out = []
    for file, named in files:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UserError(f"cannot read {file}: {exc.strerror or exc}", fix="give a readable file") from exc
        if named or MARK in text:
            out.append((file.name, text))
    if not out:
        raise UserError("no step output to judge", fix="give the files (or a directory of *.out / *.log files)")
    return out


def _progress(result: Any) -> None:
    err_console.print(f"{result.node} {result.step}: {result.status}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="deploy")
