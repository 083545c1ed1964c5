"""`gpufleet fabric`: the InfiniBand fabric as discovery finds it, checked as ibdiagnet checks it."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from gpufleet.cli.inputs import read_input_text
from gpufleet.cli.output import (
    OUTPUT_HELP,
    OutputFormat,
    console,
    dump_json,
    dump_yaml,
    emit,
    make_table,
    print_or_write,
)
from gpufleet.errors import ParseError, UserError

if TYPE_CHECKING:
    from gpufleet.fabric.findings import FabricFinding
    from gpufleet.fabric.graph import End, FabricGraph, Link
    from gpufleet.fabric.topology import Topology
    from gpufleet.model.fabric_settings import HostFabricSettings

sub = typer.Typer(
    help="InfiniBand fabric: discover it and validate it against the intended cabling.", no_args_is_help=True
)

SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "dim"}
_TIERS = {"leaf": 0, "spine": 1, "core": 2}

# typer keeps the line breaks of every paragraph after the first: each is one line here
DISCOVER_HELP = "\n\n".join(
    (
        "Discover the fabric (from saved ibnetdiscover/iblinkinfo output, or by running them) and validate it as "
        "ibdiagnet does: duplicate GUIDs, LIDs and node descriptions, links down or below their width or speed, and, "
        "with --expect, missing cables, miscabled ports and unexpected cables or nodes; with --settings (and with "
        "--live, this host's own) the fabric settings that break collectives: MTU, RoCE's lossless setup, OpenSM's "
        "configuration, SHARP (`gpufleet fabric settings --help`).",
        "Exit status: 0 nothing critical, 1 a critical finding (a cable missing, down or miscabled, a GUID or LID "
        "used twice), 2 bad input.",
        "Examples:",
        "  gpufleet fabric discover --ibnetdiscover ibnetdiscover.txt --iblinkinfo iblinkinfo.txt",
        "  ibnetdiscover | gpufleet fabric discover --ibnetdiscover - --expect cluster.yaml -o json",
        "  gpufleet fabric discover --live --ca mlx5_0 --port 1 --expect known-good-ibnetdiscover.txt",
        "  gpufleet fabric discover --ibnetdiscover fabric.txt --settings sm-01.json --settings gpu-01.json",
    )
)


@sub.command("discover", help=DISCOVER_HELP)
def discover(
    ibnetdiscover: str | None = typer.Option(
        None, "--ibnetdiscover", metavar="FILE", help="A saved `ibnetdiscover` output; - reads stdin."
    ),
    iblinkinfo: str | None = typer.Option(
        None,
        "--iblinkinfo",
        metavar="FILE",
        help="A saved `iblinkinfo` of the same fabric: adds port states (Down/Polling) and its 'Could be' hints.",
    ),
    live: bool = typer.Option(False, "--live", help="Run ibnetdiscover and iblinkinfo on this host."),
    ca: str | None = typer.Option(None, "--ca", help="With --live: the local HCA to reach the subnet through."),
    port: int | None = typer.Option(None, "--port", min=1, help="With --live: that HCA's port (default 1)."),
    tool_timeout: float | None = typer.Option(
        None, "--tool-timeout", min=0.1, metavar="S", help="With --live: stop each tool after S seconds (default 60)."
    ),
    expect: Path | None = typer.Option(
        None,
        "--expect",
        metavar="FILE",
        help="The fabric as it should be: a `kind: Cluster` manifest, or an ibnetdiscover output of the fabric when "
        "it was right.",
    ),
    settings: list[str] = typer.Option(
        [],
        "--settings",
        metavar="FILE",
        help="Hosts' fabric settings as `gpufleet fabric settings -o json` writes them (repeatable).",
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
) -> None:
    from gpufleet.fabric.settings import is_tree, judge
    from gpufleet.fabric.validate import validate

    _check_options(ibnetdiscover, iblinkinfo, live, ca, port, tool_timeout)
    expected = _expected(expect) if expect is not None else None
    hosts = _settings_files(settings)  # bad input refused before any tool runs
    graph, source = _live(ca, port, tool_timeout) if live else _saved(str(ibnetdiscover), iblinkinfo)
    if live:
        from gpufleet.sources.infiniband.settings import read_host_settings

        hosts.append(read_host_settings())
    findings = validate(graph, expected)
    if hosts:
        from gpufleet.fabric.findings import worst_first

        findings = worst_first(findings + judge(hosts, fat_tree=is_tree(graph) if graph.nodes else None))
    body = _body(graph, findings)
    if hosts:
        body["fabricSettings"] = _settings_body(hosts)
    emit(body, output, lambda wide: _render(graph, body, findings, source, wide))
    if any(f.severity == "critical" for f in findings):
        raise typer.Exit(1)


SETTINGS_HELP = "\n\n".join(
    (
        "This host's fabric settings, judged: each HCA port's MTU (`ibv_devinfo`) against the fabric's and a RoCE "
        "netdev's MTU; RoCE's lossless setup (`mlnx_qos -i`: trust and PFC; the ECN sysfs; the device's default "
        "traffic class); OpenSM's configuration where the host has it (/etc/opensm/opensm.conf and its "
        "partitions.conf: routing engine, sm_priority, sweep_interval, max_op_vls, IPoIB partition MTU); whether "
        "opensm and SHARP's aggregation manager (sharp_am) run. Saved captures instead of this host: --ibv-devinfo, "
        "--mlnx-qos NETDEV=FILE, --opensm-conf, --partitions-conf (with --host to name it).",
        "--with adds other hosts' settings (files this command wrote with -o json), so MTUs, lossless priorities "
        "and subnet managers' priorities are compared across hosts. `-o json` writes {fabricSettings, findings}: "
        "`gpufleet doctor` reads it (GF050-GF054, with the jobs' NCCL_IB_TC and NCCL_COLLNET_ENABLE), and so does "
        "`gpufleet fabric discover --settings`.",
        "RoCEv2 (UDP 4791): a soft-RoCE (rdma_rxe) device runs in the host's network stack, so the firewall's "
        "input rules (`nft list ruleset`, else `iptables-save`; both need root) are judged: a drop or reject of "
        "UDP 4791, or a drop policy without an accept for it, is critical. Each RoCE port's GID table must hold a "
        "RoCE v2 GID and its netdev be up. A hardware RoCE NIC (mlx5) bypasses the host firewall: that path is "
        "not judged here and needs a two-host test (`ib_send_bw -R`, or rping).",
        "Examples:",
        "  gpufleet fabric settings",
        "  gpufleet fabric settings -o json > $(hostname).json",
        "  gpufleet fabric settings --host sm-01 --opensm-conf opensm.conf --partitions-conf partitions.conf",
        "  gpufleet fabric settings --host gpu-01 --ibv-devinfo devinfo.txt --mlnx-qos eth2=qos.txt --with sm-01.json",
    )
)


@sub.command("settings", help=SETTINGS_HELP)
def settings_command(
    ibv_devinfo: str | None = typer.Option(None, "--ibv-devinfo", metavar="FILE", help="A saved `ibv_devinfo`."),
    mlnx_qos: list[str] = typer.Option(
        [], "--mlnx-qos", metavar="NETDEV=FILE", help="A saved `mlnx_qos -i NETDEV` (repeatable)."
    ),
    opensm_conf: str | None = typer.Option(None, "--opensm-conf", metavar="FILE", help="OpenSM's opensm.conf."),
    partitions_conf: str | None = typer.Option(
        None, "--partitions-conf", metavar="FILE", help="OpenSM's partitions.conf (with --opensm-conf)."
    ),
    host: str | None = typer.Option(None, "--host", help="The host the captures are from (default: this host)."),
    with_hosts: list[str] = typer.Option(
        [], "--with", metavar="FILE", help="Other hosts' settings (this command's -o json; repeatable)."
    ),
    fat_tree: bool | None = typer.Option(
        None, "--fat-tree/--single-switch", help="The fabric is a multi-level tree (judges the routing engine)."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help=OUTPUT_HELP),
) -> None:
    from gpufleet.fabric.findings import worst_first
    from gpufleet.fabric.settings import judge

    if partitions_conf is not None and opensm_conf is None:
        raise UserError("--partitions-conf without --opensm-conf", fix="give the opensm.conf it belongs to as well")
    others = _settings_files(with_hosts)
    captures = ibv_devinfo is not None or mlnx_qos or opensm_conf is not None
    ours = _captured(host, ibv_devinfo, mlnx_qos, opensm_conf, partitions_conf) if captures else _this_host(host)
    hosts = [ours, *others]
    findings = worst_first(judge(hosts, fat_tree=fat_tree))
    body = {"fabricSettings": _settings_body(hosts), "findings": [f.to_dict() for f in findings]}
    emit(body, output, lambda wide: _render_settings(hosts, findings, wide))


def _this_host(host: str | None) -> HostFabricSettings:
    from gpufleet.sources.infiniband.settings import read_host_settings

    return read_host_settings(host=host)


def _captured(
    host: str | None, ibv_devinfo: str | None, mlnx_qos: list[str], opensm_conf: str | None, partitions: str | None
) -> HostFabricSettings:
    import socket

    from gpufleet.fabric.settings_captures import opensm_from_text, ports_from_devinfo, roce_from_mlnx_qos
    from gpufleet.model.fabric_settings import HostFabricSettings

    out = HostFabricSettings(host=host or socket.gethostname())
    if ibv_devinfo is not None:
        text, cited = read_input_text(ibv_devinfo)
        out.ports = ports_from_devinfo(text)
        if not out.ports:
            raise ParseError(f"{cited}: no ports in this ibv_devinfo output", fix="pass the output of `ibv_devinfo`")
    for given in mlnx_qos:
        netdev, sep, path = given.partition("=")
        if not sep or not netdev or not path:
            raise UserError(f"--mlnx-qos {given!r} is not NETDEV=FILE", fix="e.g. --mlnx-qos eth2=mlnx_qos-eth2.txt")
        text, cited = read_input_text(path)
        qos = roce_from_mlnx_qos(text, netdev)
        if not qos.trust and qos.pfc is None:
            raise ParseError(f"{cited}: no trust state or PFC lines", fix=f"pass the output of `mlnx_qos -i {netdev}`")
        out.roce.append(qos)
    if opensm_conf is not None:
        text, cited = read_input_text(opensm_conf)
        part_text = read_input_text(partitions)[0] if partitions is not None else None
        out.opensm = opensm_from_text(text, cited, part_text, partitions or "")
    return out


def _settings_files(paths: list[str]) -> list[HostFabricSettings]:
    import msgspec

    from gpufleet import yaml_input
    from gpufleet.model.fabric_settings import HostFabricSettings

    hosts: list[HostFabricSettings] = []
    for path in paths:
        text, cited = read_input_text(path)
        docs = yaml_input.load_documents(text, cited, capture=True)
        items = [i for d in docs if isinstance(d, dict) for i in d.get("fabricSettings") or []]
        if not items:
            raise UserError(
                f"{cited}: no fabricSettings in it", fix="give the output of `gpufleet fabric settings -o json`"
            )
        try:
            hosts.extend(msgspec.convert(item, HostFabricSettings) for item in items)
        except msgspec.ValidationError as exc:
            raise UserError(
                f"{cited}: fabricSettings not as `gpufleet fabric settings -o json` writes it: {exc}",
                fix="write it again with `gpufleet fabric settings -o json` on the host",
            ) from None
    return hosts


def _settings_body(hosts: list[HostFabricSettings]) -> list[dict[str, Any]]:
    import msgspec

    return [msgspec.to_builtins(h) for h in hosts]


def _render_settings(hosts: list[HostFabricSettings], findings: list[FabricFinding], wide: bool) -> None:
    rows = []
    for h in hosts:
        for p in h.ports:
            netdev = f"{p.netdev} (MTU {p.netdev_mtu})" if p.netdev else "-"
            rows.append([h.host, f"{p.device}/{p.port}", p.link_layer or "-", p.state or "-",
                         p.active_mtu or "-", p.max_mtu or "-", netdev])  # fmt: skip
    if rows:
        console.print(make_table(["HOST", "PORT", "LINK LAYER", "STATE", "MTU", "MAX MTU", "NETDEV"], rows))
    qos_rows = [
        [h.host, q.netdev, q.trust or "-", ",".join(map(str, q.pfc)) if q.pfc else ("none" if q.pfc == [] else "-"),
         ",".join(map(str, q.ecn_rp or [])) or "-", q.traffic_class if q.traffic_class is not None else "-"]
        for h in hosts for q in h.roce
    ]  # fmt: skip
    if qos_rows:
        console.print(make_table(["HOST", "NETDEV", "TRUST", "PFC", "ECN (RP)", "TCLASS"], qos_rows))
    from gpufleet.fabric.settings import roce_firewall_note

    for h in hosts:
        if note := roce_firewall_note(h):
            console.print(f"{h.host}: UDP 4791 (RoCEv2): {note}", highlight=False)
        if h.opensm is not None:
            sm = h.opensm
            console.print(
                f"{h.host}: OpenSM {sm.file}: routing {','.join(sm.routing_engines) or 'minhop (default)'}, "
                f"sm_priority {sm.sm_priority}, sweep_interval {sm.sweep_interval}, max_op_vls {sm.max_op_vls}, "
                f"{len(sm.partitions)} partition(s)",
                highlight=False,
            )
        running = {"opensm": h.opensm_running, "sharp_am": h.sharp_am_running}
        if any(v is not None for v in running.values()):
            said = ", ".join(f"{k} {'running' if v else 'not running'}" for k, v in running.items() if v is not None)
            console.print(f"{h.host}: {said}", highlight=False)
        for error in h.errors:
            console.print(Text(f"{h.host}: {error}", style="yellow"))
    if findings:
        finding_rows = []
        for f in findings:
            finding_rows.append(
                [Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.kind, _port(f.port), f.message, f.fix]
                + ([f.source] if wide else [])
            )
        columns = ["SEVERITY", "KIND", "WHERE", "FINDING", "FIX"] + (["SOURCE"] if wide else [])
        console.print(make_table(columns, finding_rows))
    else:
        console.print("no fabric settings findings")


EXPORT_HELP = "\n\n".join(
    (
        "Write the fabric as a scheduler's topology input, from a saved ibnetdiscover output, a cluster manifest "
        "whose fabric is cabled (spec.fabric), or both (the discovered fabric, checked against the manifest and "
        "given its switch tiers).",
        "slurm-topology: topology.conf for TopologyPlugin=topology/tree: a SwitchName line per leaf with its nodes, "
        "per spine with its leaves, per core with its spines, in Slurm's hostlist syntax. A host cabled to several "
        "leaves (rails, dual-port HCAs) is listed under one, its home leaf: the leaf with most of its rails, else "
        "its first rail's.",
        "slurm-block: topology.conf for TopologyPlugin=topology/block: a BlockName line per NVLink domain (an NVL72 "
        "rack: nodePools[].nvlinkDomainNodes in the manifest, or the cliques the nodes' GPUs report to a served "
        "control plane), in fabric order so the blocks Slurm pairs share a leaf or spine, then BlockSizes "
        "(--slurm-version 24.05 and later; 23.11 takes BlockLevels and blocks of one size). A domain Slurm would "
        "refuse (smaller than the common size) is left out with a comment naming its hosts.",
        "labels: the Kubernetes node labels of each host, under Topograph's keys: accelerator.topograph.run/domain "
        "for its NVLink domain (where the manifest names one, nodePools[].nvlinkDomainNodes), "
        "fabric.topograph.run/tier-2, tier-1 and tier-0 for its core, spine and home leaf; a YAML map (-o json for "
        "JSON). A switch name a label value cannot hold is rewritten (MF0;leaf-07:MQM9700/U1 is leaf-07), with a "
        "short hash where it had to be cut or would meet another.",
        "kueue: Kueue's Topology with those levels (outermost first, kubernetes.io/hostname last) and the "
        "ResourceFlavor that names it and selects the GPU nodes by --flavor-label (kueue.x-k8s.io/v1beta2, Kueue "
        "v0.19). kai: KAI Scheduler's Topology with the same levels (kai.scheduler/v1alpha1, KAI v0.13). volcano: "
        "Volcano HyperNodes (topology.volcano.sh/v1alpha1, Volcano v1.15): tier 1 a leaf with its hosts, tier 2 a "
        "spine group with its leaves, tier 3 a core group with its spine groups. Every object is checked against "
        "its released CRD before it is written; kubectl apply -f takes the output.",
        "Examples:",
        "  gpufleet fabric export --format slurm-topology --cluster cluster.yaml --out /etc/slurm/topology.conf",
        "  ibnetdiscover | gpufleet fabric export --format slurm-topology --ibnetdiscover -",
        "  gpufleet fabric export --format slurm-topology --ibnetdiscover fabric.txt --cluster cluster.yaml",
        "  gpufleet fabric export --format slurm-topology --server http://gpufleet:8470 (the control plane's, kept "
        "current)",
        "  gpufleet fabric export --format slurm-block --cluster gb200-nvl72.yaml --slurm-version 24.11",
        "  gpufleet fabric export --format labels --cluster cluster.yaml -o json",
        "  gpufleet fabric export --format kueue --ibnetdiscover fabric.txt --cluster c.yaml | kubectl apply -f -",
        "  gpufleet fabric export --format volcano --cluster cluster.yaml --out hypernodes.yaml",
    )
)


class ExportFormat(StrEnum):
    slurm_topology = "slurm-topology"
    slurm_block = "slurm-block"
    labels = "labels"
    kueue = "kueue"
    kai = "kai"
    volcano = "volcano"


@sub.command("export", help=EXPORT_HELP)
def export(
    fmt: ExportFormat = typer.Option(
        ...,
        "--format",
        help="slurm-topology (topology.conf for topology/tree), slurm-block (topology/block), labels (Kubernetes "
        "node labels), kueue (Topology and ResourceFlavor), kai (KAI Scheduler's Topology) or volcano (HyperNodes).",
    ),
    ibnetdiscover: str | None = typer.Option(
        None, "--ibnetdiscover", metavar="FILE", help="A saved `ibnetdiscover` output; - reads stdin."
    ),
    cluster: Path | None = typer.Option(
        None, "--cluster", metavar="FILE", help="A `kind: Cluster` manifest with a cabled fabric (spec.fabric)."
    ),
    out: Path | None = typer.Option(None, "--out", metavar="FILE", help="Write to this file instead of printing."),
    server: str | None = typer.Option(
        None,
        "--server",
        metavar="URL",
        help="Export the fabric a running control plane keeps current from its fabric watchers' polls "
        "(GET /api/v1/fabric/topology) instead of a saved output or a manifest.",
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="With --server: file holding the API token (default: $GPUFLEET_TOKEN, ...)."
    ),
    name: str = typer.Option(
        "gpufleet-fabric", "--name", help="kueue, kai: the Topology's name (and Kueue's ResourceFlavor's)."
    ),
    flavor_labels: list[str] | None = typer.Option(
        None,
        "--flavor-label",
        metavar="KEY=VALUE",
        help="kueue: a node label the ResourceFlavor selects the GPU nodes by; repeat for more (default: "
        "nvidia.com/gpu.present=true, the GPU Operator's).",
    ),
    slurm_version: str = typer.Option(
        "24.05",
        "--slurm-version",
        metavar="YY.MM",
        help="slurm-block: the slurmctld release that reads it (23.11 writes BlockLevels; 24.05 and later BlockSizes).",
    ),
    output: OutputFormat = typer.Option(OutputFormat.yaml, "--output", "-o", help="labels: yaml (default) or json."),
) -> None:
    from gpufleet.fabric.topology import topology_from_graph

    if output not in (OutputFormat.yaml, OutputFormat.json):
        raise UserError(f"-o {output} is not an export format", fix="use -o yaml or -o json (with --format labels)")
    if server is not None:
        topology = _served_topology(server, token_file, ibnetdiscover, cluster)
    else:
        graph, source = _export_graph(ibnetdiscover, cluster)
        topology = topology_from_graph(graph, nvlink_domains=_nvlink_domains(cluster), source=source)
    if fmt is ExportFormat.slurm_block:
        from gpufleet.integrations.slurm.topology_conf import render_block_conf

        print_or_write(render_block_conf(topology, slurm_version=_slurm_release(slurm_version)), out)
        return
    print_or_write(_export_text(fmt, topology, name, _flavor_labels(flavor_labels), output), out)


def _slurm_release(text: str) -> tuple[int, int]:
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise UserError(f"--slurm-version {text!r} is not a Slurm release", fix="give it as YY.MM, e.g. 24.05 or 23.11")
    return int(parts[0]), int(parts[1])


def _export_text(
    fmt: ExportFormat, topology: Topology, name: str, flavor_labels: dict[str, str] | None, output: OutputFormat
) -> str:
    import yaml

    from gpufleet.integrations.kubernetes import topology_objects
    from gpufleet.integrations.kubernetes.topology import node_labels
    from gpufleet.integrations.slurm.topology_conf import render_topology_conf

    if fmt is ExportFormat.slurm_topology:
        return render_topology_conf(topology)
    if fmt is ExportFormat.labels:
        labels = node_labels(topology)
        return dump_json(labels) + "\n" if output is OutputFormat.json else dump_yaml(labels)
    if fmt is ExportFormat.kueue:
        docs = topology_objects.kueue_objects(topology, name=name, flavor_labels=flavor_labels)
    elif fmt is ExportFormat.kai:
        docs = [topology_objects.kai_topology(topology, name=name)]
    else:
        docs = topology_objects.volcano_hypernodes(topology)
    return str(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))


def _nvlink_domains(cluster: Path | None) -> dict[str, str]:
    """host -> NVLink domain, where the cluster manifest names them (nodePools[].nvlinkDomainNodes)."""
    import re

    from gpufleet.spec.loader import load_cluster

    # --cluster may also be an ibnetdiscover output of the fabric as it should be, which names no domains
    if cluster is None or not re.search(r"^kind:\s*Cluster\s*$", cluster.read_text(errors="replace"), re.MULTILINE):
        return {}

    return load_cluster(cluster).spec.nvlink_domains()


def _flavor_labels(given: list[str] | None) -> dict[str, str] | None:
    if not given:
        return None
    out: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(
                f"--flavor-label {item!r} is not KEY=VALUE", fix="e.g. --flavor-label nvidia.com/gpu.present=true"
            )
        out[key] = value
    return out


def _served_topology(server: str, token_file: Path | None, ibnetdiscover: str | None, cluster: Path | None) -> Topology:
    """The topology a running control plane keeps (the same model the local export builds, as JSON)."""
    from gpufleet.cli.client import Api
    from gpufleet.control.fabric_topology import topology_from_dict

    if ibnetdiscover is not None or cluster is not None:
        raise UserError(
            "--server and a local fabric (--ibnetdiscover, --cluster) both given",
            fix="export what the control plane keeps (--server URL) or a local fabric, not both",
        )
    api = Api(server, token_file)
    body = api.get("/api/v1/fabric/topology")
    if not isinstance(body, dict):
        raise UserError(f"{api.server} answered no topology", fix="is it a gpufleet control plane? check the URL")
    return topology_from_dict(body, f"{api.server}'s topology")


def _export_graph(ibnetdiscover: str | None, cluster: Path | None) -> tuple[FabricGraph, str]:
    """The fabric to export: the discovered one (given the manifest's tiers, and refused when it differs from the
    manifest by a critical finding), else the manifest's."""
    from gpufleet.fabric.validate import validate

    if ibnetdiscover is None and cluster is None:
        raise UserError(
            "no fabric to export", fix="pass --ibnetdiscover FILE (a saved output, - for stdin) and/or --cluster FILE"
        )
    expected = _expected(cluster) if cluster is not None else None
    if ibnetdiscover is None or expected is None:
        return expected or _saved(str(ibnetdiscover), None)[0], str(cluster or ibnetdiscover)
    graph, cited = _saved(ibnetdiscover, None)
    critical = [f for f in validate(graph, expected) if f.severity == "critical"]
    if critical:
        raise UserError(
            f"{cited} differs from {cluster}: {len(critical)} critical finding(s), first: {critical[0].message}",
            fix=f"see them with `gpufleet fabric discover --ibnetdiscover {ibnetdiscover} --expect {cluster}`, fix "
            "the cabling or the manifest, or export from one of them",
        )
    for name, node in expected.nodes.items():
        found = graph.nodes.get(name)
        if found is not None and found.is_switch and node.tier:
            found.tier = node.tier
    return graph, f"{cited} checked against {cluster}"


def _check_options(
    ibnetdiscover: str | None,
    iblinkinfo: str | None,
    live: bool,
    ca: str | None,
    port: int | None,
    tool_timeout: float | None,
) -> None:
    if live and ibnetdiscover is not None:
        raise UserError(
            "--ibnetdiscover and --live both given", fix="read a saved output (--ibnetdiscover FILE) or run the tools "
            "(--live), not both"
        )  # fmt: skip
    if not live and ibnetdiscover is None:
        raise UserError(
            "no fabric to discover", fix="pass --ibnetdiscover FILE (a saved output, - for stdin) or --live"
        )
    if live and iblinkinfo is not None:
        raise UserError("--iblinkinfo is for saved outputs", fix="--live runs iblinkinfo itself: drop --iblinkinfo")
    if not live:
        given = [flag for flag, value in (("--ca", ca), ("--port", port), ("--tool-timeout", tool_timeout)) if value]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise UserError(f"{' and '.join(given)} {verb} only with --live", fix="add --live, or drop it")
    if ibnetdiscover == "-" and iblinkinfo == "-":
        raise UserError("both inputs read stdin", fix="save one of them to a file")


def _saved(ibnetdiscover: str, iblinkinfo: str | None) -> tuple[FabricGraph, str]:
    from gpufleet.fabric.discover import add_link_states
    from gpufleet.fabric.intended import graph_from_ibnetdiscover
    from gpufleet.parsers.infiniband.diags import parse_iblinkinfo

    text, cited = read_input_text(ibnetdiscover)
    graph = graph_from_ibnetdiscover(text, cited)
    if iblinkinfo is not None:
        link_text, link_cited = read_input_text(iblinkinfo)
        links = parse_iblinkinfo(link_text, source=link_cited)
        if not links:
            raise ParseError(f"{link_cited}: no iblinkinfo port lines", fix="pass the output of `iblinkinfo`")
        add_link_states(graph, links)
        cited = f"{cited} + {link_cited}"
    return graph, cited


def _live(ca: str | None, port: int | None, tool_timeout: float | None) -> tuple[FabricGraph, str]:
    from gpufleet.sources.infiniband.diag_tools import DEFAULT_TIMEOUT_S, FabricTools

    tools = FabricTools(ca=ca, port=port, timeout_s=tool_timeout or DEFAULT_TIMEOUT_S)
    return tools.discover(), f"live (subnet {tools.subnet})"


def _expected(path: Path) -> FabricGraph:
    from gpufleet.fabric.intended import load_expected

    return load_expected(path)


def _ordered(graph: FabricGraph, link: Link) -> tuple[End, End]:
    """HCA end first, then the lower tier, as the findings name cables."""

    def rank(end: End) -> tuple[int, End]:
        node = graph.nodes.get(end.node)
        if node is None:
            return 9, end
        return (-1 if not node.is_switch else _TIERS.get(node.tier, 8)), end

    return (link.a, link.b) if rank(link.a) <= rank(link.b) else (link.b, link.a)


def _body(graph: FabricGraph, findings: list[FabricFinding]) -> dict[str, Any]:
    switches = [
        {"name": n.name, "guid": n.guid, "lid": n.lid, "ports": n.ports, "tier": n.tier} for n in graph.switches()
    ]
    hcas = [{"name": n.name, "host": n.host, "guid": n.guid, "ports": n.ports} for n in graph.hcas()]
    links = []
    for link in graph.links:
        a, b = _ordered(graph, link)
        links.append(
            {
                "a": str(a),
                "b": str(b),
                "width": f"{link.width}x" if link.width else None,
                "speed": link.speed,
                "rate_gbps": link.rate_gbps,
                "up": link.up,
            }
        )
    return {"switches": switches, "hcas": hcas, "links": links, "findings": [f.to_dict() for f in findings]}


def _render(graph: FabricGraph, body: dict[str, Any], findings: list[FabricFinding], source: str, wide: bool) -> None:
    severities: Counter[str] = Counter(f.severity for f in findings)
    down = sum(1 for link in graph.links if not link.up)
    console.print(
        Text.assemble(
            (source, "bold"),
            f"  {len(body['switches'])} switches, {len(body['hcas'])} HCAs, {len(body['links'])} links"
            + (f" ({down} down)" if down else "")
            + "; findings: ",
            *_severity_counts(severities),
        )
    )
    used = Counter(end.node for link in graph.links for end in link.ends())
    rows = [
        [s["name"], s["tier"] or "-", s["lid"] if s["lid"] is not None else "-", f"{used[s['name']]}/{s['ports']}"]
        + ([s["guid"] or "-"] if wide else [])
        for s in sorted(body["switches"], key=lambda s: (_TIERS.get(s["tier"], 8), s["name"]))
    ]
    if rows:
        console.print(make_table(["SWITCH", "TIER", "LID", "CABLED"] + (["GUID"] if wide else []), rows))
    if wide and body["links"]:
        link_rows = [
            [lk["a"], lk["b"], lk["width"] or "-", lk["speed"] or "-", "up" if lk["up"] else "DOWN"]
            for lk in body["links"]
        ]
        console.print(make_table(["END A", "END B", "WIDTH", "SPEED", "STATE"], link_rows))
    if findings:
        finding_rows = []
        for f in findings:
            where = f"{f.ends[0]} <-> {f.ends[1]}" if f.ends else _port(f.port)
            finding_rows.append([Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.kind, where, f.message, f.fix])
        console.print(make_table(["SEVERITY", "KIND", "WHERE", "FINDING", "FIX"], finding_rows))


def _port(end: End | None) -> str:
    if end is None:
        return "-"
    return end.node if end.port == 0 else str(end)  # port 0: the node itself


def _severity_counts(severities: Counter[str]) -> list[Text | str]:
    parts: list[Text | str] = []
    for i, severity in enumerate(("critical", "warning", "info")):
        count = severities.get(severity, 0)
        parts.append(Text(f"{count} {severity}", style=SEVERITY_STYLE[severity] if count else ""))
        if i < 2:
            parts.append(", ")
    return parts


def register(app: typer.Typer) -> None:
    app.add_typer(sub, name="fabric")
