"""`gpufleet doctor`: the known GPU-cluster misconfigurations, found in manifests and captures before they bite."""

from __future__ import annotations

import sys
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.text import Text

from gpufleet.cli.output import console, dump_json, dump_yaml, err_console, make_table
from gpufleet.errors import UserError

if TYPE_CHECKING:
    from gpufleet.doctor.engine import Report


class DoctorFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    sarif = "sarif"


SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}
PROGRESS_FROM_FILES = 200  # fewer files finish before a bar would help

DOCTOR_HELP = "\n\n".join(
    (
        "Check Kubernetes manifests (files, directories, Helm-rendered output, - for stdin), GPU Operator "
        "ClusterPolicy and AMD GPU Operator DeviceConfig objects, device-plugin and mig-parted configs, NVIDIA, AMD "
        "(ROCm) and Intel Gaudi workloads and device plugins, Prometheus Operator objects and kubectl captures "
        "(`kubectl get nodes -o json`, `kubectl get pods -A -o json`, `kubectl version -o json`), kubelet "
        "configurations (the KubeletConfiguration file, `kubectl get --raw /api/v1/nodes/NODE/proxy/configz`), "
        "container runtime configs (containerd's config.toml and its drop-ins, CRI-O's crio.conf and crio.conf.d, "
        "Docker's daemon.json), hosts' fabric settings (`gpufleet fabric settings -o json`: MTU, RoCE, OpenSM, SHARP) "
        "against the real "
        "Kubernetes schemas first, then against the known GPU-cluster mistakes (`--list-rules`).",
        "Exit status: 0 no error found, 1 an error found, 2 bad usage.",
        "The cluster-facts file (YAML or JSON) says what no capture shows: kubernetesVersion, gpuOperatorVersion, "
        "containerRuntime (e.g. containerd://2.0.5), featureGates: {kubelet: {Gate: true}, apiserver: {...}}, and "
        "nodes: {NAME: {driverVersion, kernel, kernelHeaders, nouveauLoaded, nouveauBlacklisted, containerRuntime, "
        "gpuNumaNodes: {GPU: NUMA node}, runtimeConfigs: {PATH: TEXT}, runtimeConfigModified: {PATH: UNIX TIME}, "
        "runtimeStarted: {containerd: UNIX TIME}, containerPackages: {PACKAGE: VERSION}}}. "
        "`gpufleet doctor --host-facts` prints this host's node entry.",
        "Examples:",
        "  gpufleet doctor k8s/",
        "  helm template gpu-operator nvidia/gpu-operator -f values.yaml | gpufleet doctor - --nodes nodes.json",
        "  gpufleet doctor manifests/ --cluster-facts facts.yaml -o sarif > doctor.sarif",
    )
)


def doctor(
    paths: list[str] = typer.Argument(None, metavar="PATH...", help="Files or directories to check; - for stdin."),
    nodes: list[Path] = typer.Option(
        [], "--nodes", metavar="FILE", help="`kubectl get nodes -o json` of the cluster (repeatable)."
    ),
    cluster_facts: Path | None = typer.Option(
        None, "--cluster-facts", metavar="FILE", help="Facts no capture shows (format above)."
    ),
    kube_version: str | None = typer.Option(
        None, "--kube-version", metavar="X.Y", help="The cluster's Kubernetes version (default: from the captures)."
    ),
    no_schema: bool = typer.Option(False, "--no-schema", help="Skip the Kubernetes schema validation."),
    list_rules: bool = typer.Option(False, "--list-rules", help="List the rules with their sources and exit."),
    host_facts: bool = typer.Option(False, "--host-facts", help="Print this host's node facts and exit."),
    output: DoctorFormat = typer.Option(
        DoctorFormat.table, "--output", "-o", help="table (default), json, yaml or sarif."
    ),
) -> None:
    from gpufleet.doctor.engine import run
    from gpufleet.doctor.facts import parse_version

    if list_rules:
        _list_rules(output)
        return
    if host_facts:
        from gpufleet.sources.node.host_facts import read_host_facts

        name, facts = read_host_facts()
        entry = {"nodes": {name: facts.model_dump(by_alias=True, exclude_none=True)}}
        sys.stdout.write(dump_json(entry) + "\n" if output is DoctorFormat.json else dump_yaml(entry))
        return
    inputs = [*(paths or []), *(str(p) for p in nodes)]
    if not inputs:
        raise UserError("nothing to check", fix="give manifest files or directories (or - for stdin)")
    version = None
    if kube_version is not None:
        version = parse_version(kube_version)
        if version is None or len(version) < 2:
            raise UserError(f"--kube-version {kube_version!r}", fix="give it as X.Y, e.g. 1.33")
    from gpufleet.doctor.load import input_files

    files = input_files(inputs)
    check_schema = not no_schema
    if check_schema:
        from gpufleet.doctor import schema

        if not schema.available():  # `scripts/up` installs what running needs; the schemas are the deploy extra
            err_console.print(
                Text(
                    "note: the Kubernetes schemas are not installed, so objects are not validated against them; "
                    "pip install 'gpufleet[deploy]' adds them (--no-schema says this is meant)",
                    style="yellow",
                )
            )
            check_schema = False
    with Progress(
        TextColumn("checking"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
        disable=len(files) < PROGRESS_FROM_FILES or not err_console.is_terminal,
    ) as progress:
        task = progress.add_task("", total=len(files))
        report = run(
            files,
            cluster_facts=cluster_facts,
            kube_version=version,
            check_schema=check_schema,
            on_file=lambda name: progress.update(task, advance=1, description=name[-60:]),
        )
    if output is DoctorFormat.sarif:
        from gpufleet.doctor.sarif import to_sarif

        sys.stdout.write(dump_json(to_sarif(report.findings)) + "\n")
    elif output in (DoctorFormat.json, DoctorFormat.yaml):
        body = [f.to_json() for f in report.findings]
        sys.stdout.write(dump_json(body) + "\n" if output is DoctorFormat.json else dump_yaml(body))
    else:
        _render(report)
    if report.errors:
        raise typer.Exit(1)


def _render(report: Report) -> None:
    """Each finding as a block (what, where, why, fix: messages are sentences, too long for table cells), then how
    many of each rule."""
    from gpufleet.doctor.catalog import rule_catalog
    from gpufleet.doctor.findings import label

    catalog = rule_catalog()
    for f in report.findings:
        where = f"{f.file}:{f.line}" if f.line else (f.file or "")
        head = Text()
        head.append(f"{label(f.severity):<7}", style=SEVERITY_STYLE[label(f.severity)])
        head.append(f" {f.rule}  ", style="bold")
        head.append(" ".join(p for p in (f.object, where) if p))
        console.print(head)
        console.print(Text(f"  {f.message}"))
        if f.fix:
            console.print(Text(f"  fix: {f.fix}", style="cyan"))
    if report.findings:
        per_rule = Counter((f.rule, label(f.severity)) for f in report.findings)
        rows = [[rule, sev, n, catalog[rule].title if rule in catalog else ""] for (rule, sev), n in per_rule.items()]
        console.print()
        console.print(make_table(["RULE", "SEVERITY", "FINDINGS", "TITLE"], rows))
    counts = report.counts()
    version = f"; schemas of Kubernetes {report.schema_version.rsplit('.', 1)[0]}" if report.schema_version else ""
    console.print(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s) in "
        f"{report.files} file(s), {report.objects} object(s); {len(catalog)} rules{version}",
        highlight=False,
    )


def _list_rules(output: DoctorFormat) -> None:
    from gpufleet.doctor.catalog import rule_catalog
    from gpufleet.doctor.findings import label

    catalog = rule_catalog()
    if output in (DoctorFormat.json, DoctorFormat.yaml):
        body = [info.model_dump(mode="json") for info in catalog.values()]
        sys.stdout.write(dump_json(body) + "\n" if output is DoctorFormat.json else dump_yaml(body))
        return
    rows = [[info.id, label(info.severity), info.title, "\n".join(info.sources)] for info in catalog.values()]
    console.print(make_table(["RULE", "SEVERITY", "TITLE", "SOURCES"], rows))


def register(app: typer.Typer) -> None:
    app.command(help=DOCTOR_HELP)(doctor)
