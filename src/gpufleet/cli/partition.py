"""`gpufleet partition ...`: MIG layouts, the partition planner and device-plugin configs; `partition amd ...`: AMD
Instinct partition modes and a plan applied with AMD's Device Config Manager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, dump_json, emit, make_table
from gpufleet.errors import UserError

partition_app = typer.Typer(
    help="Partition GPUs: valid MIG layouts, a layout plan for a demand mix, device-plugin sharing configs.",
    no_args_is_help=True,
)


def _cluster(cluster_file: Path | None, gpu: str | None, gpus: int | None, per_node: int, demand: Any) -> Any:
    """The cluster to plan on: a manifest, N GPUs of a model, or (neither given) as many GPUs as the demand needs."""
    from gpufleet.sched.partition import planner
    from gpufleet.sched.partition.mig import geometry_of
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    if cluster_file is not None and gpus is not None:
        raise UserError("--cluster and --gpus are alternatives", fix="pass one of them")
    if cluster_file is not None:
        manifest = load_cluster(cluster_file)
        return build_cluster(manifest.metadata.name, manifest.spec)
    if gpu is None:
        raise UserError("name the GPU model", fix="pass --gpu (e.g. h100-sxm), and --gpus N or --cluster FILE")
    if gpus is None:
        gpus = planner.solve(geometry_of(gpu), demand).gpus
    return planner.synthetic_cluster(gpu, gpus, per_node)


@partition_app.command("plan")
def plan_cmd(
    demand: str = typer.Option(..., "--demand", help="PROFILE=COUNT pairs; `gpu` = whole GPUs (1g.10gb=60,gpu=20)."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU model to partition (h100-sxm, a100-80gb, ...)."),
    gpus: int | None = typer.Option(None, "--gpus", min=1, help="Plan on this many GPUs (default: as many as needed)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="With --gpus: GPUs per node."),
    cluster: Path | None = typer.Option(None, "--cluster", help="A kind: Cluster manifest to plan on instead."),
    time_slicing: int | None = typer.Option(
        None, "--time-slicing", min=2, help="Also time-slice every GPU and MIG device this many ways."
    ),
    rename: bool = typer.Option(False, "--rename", help="With --time-slicing: advertise <name>.shared."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    out: Path | None = typer.Option(None, "--out", help="Write mig-parted config, labels, ConfigMaps and plan here."),
) -> None:
    """Choose MIG layouts that fit the demand on the fewest GPUs; print the configs, labels and what must drain."""
    from gpufleet.sched.partition import emit as planner_emit
    from gpufleet.sched.partition import planner

    wanted = planner.parse_demand(demand)
    fleet = _cluster(cluster, gpu, gpus, gpus_per_node, wanted)
    result = planner.plan(fleet, wanted, gpu)
    plugin = planner_emit.device_plugin_config(result, time_slicing, rename)
    recon = planner_emit.reconfiguration(result)
    data = planner_emit.summary(result, recon)
    data["devicePluginConfig"] = plugin.model_dump(by_alias=True, exclude_none=True, mode="json")
    if out is not None:
        _write_outputs(out, result, plugin, data)

    def render(wide: bool) -> None:
        sol = result.solution
        models = ", ".join(m.name for m in result.gpu_models)
        console.print(
            f"[bold]{sol.gpus}[/bold] {models} GPUs of {len(result.targets)} "
            f"(lower bound {sol.lower_bound}, LP relaxation {sol.lp_bound:.3f}, gap {sol.gap:.1%}, "
            f"{'optimal' if sol.optimal else 'not proven optimal'})"
        )
        rows = [[layout["gpuModel"], layout["layout"], layout["gpus"]] for layout in data["layouts"]]
        console.print(make_table(["MODEL", "LAYOUT", "GPUS"], rows))
        provided = [[k, wanted.get(k, 0), v] for k, v in sorted(sol.provided.items())]
        console.print(make_table(["DEMAND", "WANTED", "PROVIDED"], provided))
        labels = [[n, c] for n, c in sorted(data["nodeLabels"].items(), key=lambda kv: kv[0])]
        if wide or len(labels) <= 16:
            label_rows = [[n, c[planner_emit.MIG_CONFIG_LABEL]] for n, c in labels]
            console.print(make_table(["NODE", planner_emit.MIG_CONFIG_LABEL], label_rows))
        if recon.drain:
            console.print(f"[yellow]drain first:[/yellow] {', '.join(recon.drain)}")
            for node, pods in recon.moved_pods.items():
                console.print(f"  {node}: pods that move: {', '.join(pods) or '-'}")
        if recon.in_place:
            console.print(f"reconfigure in place (no GPU pod affected): {', '.join(recon.in_place)}")
        if wide:
            for line in data["reconfiguration"]["commands"]:
                console.print(f"  {line}", highlight=False, soft_wrap=True)
        if out is not None:
            console.print(f"wrote {out}/mig-parted-config.yaml, node-labels.yaml, configmaps.yaml, plan.json")

    emit(data, output, render)


def _write_outputs(out: Path, result: Any, plugin: Any, data: dict[str, Any]) -> None:
    from gpufleet.sched.partition import emit as planner_emit
    from gpufleet.sched.partition.device_plugin import dump_manifests

    out.mkdir(parents=True, exist_ok=True)
    doc, labels = planner_emit.mig_parted_config(result)
    (out / "mig-parted-config.yaml").write_text(planner_emit.render_mig_parted(doc))
    (out / "node-labels.yaml").write_text(
        yaml.safe_dump({node: {planner_emit.MIG_CONFIG_LABEL: name} for node, name in labels.items()})
    )
    maps = planner_emit.configmaps(result, plugin)
    (out / "configmaps.yaml").write_text(dump_manifests(maps))
    (out / "plan.json").write_text(dump_json(data) + "\n")


@partition_app.command("layouts")
def layouts_cmd(
    gpu: str = typer.Option(..., "--gpu", help="GPU model (h100-sxm, a100-40gb, ...)."),
    maximal: bool = typer.Option(False, "--maximal", help="Only layouts to which no further instance fits."),
    placements: bool = typer.Option(False, "--placements", help="Every placement, not one per profile mix."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Count and list the valid MIG layouts of a GPU model (2,319 placements on the 7-slice parts)."""
    from gpufleet.sched.partition.mig import (
        count_vectors,
        enumerate_layouts,
        geometry_of,
        is_maximal,
        maximal_count_vectors,
    )

    geometry = geometry_of(gpu)
    every = enumerate_layouts(geometry)
    if placements:
        chosen = [lay for lay in every if is_maximal(lay)] if maximal else list(every)
    else:
        mixes = maximal_count_vectors(geometry) if maximal else count_vectors(geometry)
        chosen = list(mixes.values())
    rows: list[dict[str, Any]] = [
        {
            "migDevices": lay.counts(),
            "placement": str(lay) or "(empty)",
            "computeSlices": lay.compute_slices,
            "freeMemorySlices": lay.free_slices,
        }
        for lay in chosen
    ]
    data = {
        "gpu": gpu,
        "geometry": geometry,
        "validPlacements": len(every),
        "profileMixes": len(count_vectors(geometry)),
        "shown": len(rows),
        "layouts": rows,
    }

    def render(wide: bool) -> None:
        console.print(
            f"{geometry}: {len(every)} valid placements (empty included), "
            f"{len(count_vectors(geometry))} distinct profile mixes; showing {len(rows)}"
        )
        cols = ["MIG DEVICES", "PLACEMENT", "COMPUTE"] + (["FREE SLICES"] if wide else [])
        table_rows = []
        for r in rows:
            mix = " + ".join(f"{n}x{p}" for p, n in sorted(r["migDevices"].items())) or "(empty)"
            row = [mix, r["placement"], r["computeSlices"]]
            table_rows.append(row + ([",".join(map(str, r["freeMemorySlices"])) or "-"] if wide else []))
        console.print(make_table(cols, table_rows))

    emit(data, output, render)


@partition_app.command("device-plugin-config")
def device_plugin_config_cmd(
    time_slicing: int | None = typer.Option(None, "--time-slicing", min=2, help="Time-slicing replicas per device."),
    mps: int | None = typer.Option(None, "--mps", min=2, help="MPS replicas per GPU (memory and SMs split evenly)."),
    rename: bool = typer.Option(False, "--rename", help="renameByDefault: advertise nvidia.com/gpu.shared."),
    fail_greater_than_one: bool | None = typer.Option(
        None,
        "--fail-requests-greater-than-one/--allow-requests-greater-than-one",
        help="Reject requests for more than one replica (default: false for time-slicing, true for MPS).",
    ),
    mig_strategy: str = typer.Option("none", "--mig-strategy", help="none, single or mixed."),
    resource: list[str] = typer.Option(
        ["nvidia.com/gpu"], "--resource", help="Resources to share (repeat; e.g. nvidia.com/mig-1g.10gb)."
    ),
    configmap_name: str | None = typer.Option(None, "--configmap", help="Wrap the config in a ConfigMap of this name."),
    namespace: str = typer.Option("gpu-operator", "--namespace", help="With --configmap: its namespace."),
    key: str = typer.Option("default", "--key", help="With --configmap: the data key nodes select."),
) -> None:
    """Print a k8s-device-plugin config (version v1) with a time-slicing or MPS section."""
    from gpufleet.sched.partition.device_plugin import (
        MigStrategy,
        build_config,
        configmap,
        dump_manifests,
        render_config,
    )

    try:
        strategy = MigStrategy(mig_strategy)
    except ValueError:
        raise UserError(f"unknown MIG strategy {mig_strategy!r}", fix="use none, single or mixed") from None
    config = build_config(
        mig_strategy=strategy,
        time_slicing=time_slicing,
        mps=mps,
        rename=rename,
        fail_requests_greater_than_one=fail_greater_than_one,
        resources=tuple(resource),
    )
    if configmap_name:
        typer.echo(dump_manifests([configmap(configmap_name, {key: config}, namespace)]), nl=False)
    else:
        typer.echo(render_config(config), nl=False)


@partition_app.command("gfd-labels")
def gfd_labels_cmd(
    cluster: Path = typer.Option(..., "--cluster", help="A kind: Cluster manifest."),
    node: str | None = typer.Option(None, "--node", help="Only this node (default: every GPU node)."),
    config: Path | None = typer.Option(
        None, "--config", help="A k8s-device-plugin config (version v1) the nodes run with (default: no sharing)."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Print the labels GPU Feature Discovery would set on each node (product, count, replicas, sharing strategy,
    MIG and MPS capability, driver and CUDA versions), as schedulers and nodeSelectors see them; on AMD nodes the
    AMD node labeller's, on Gaudi nodes Gaudi feature discovery's."""
    from gpufleet import yaml_input
    from gpufleet.sched.partition.device_plugin import load_config
    from gpufleet.sched.partition.vendor_labels import discovery_labels
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    if config is not None and not config.is_file():
        raise UserError(f"{config}: no such file", fix="pass a device-plugin config written by `device-plugin-config`")
    plugin = load_config(yaml_input.read_file(config), str(config)) if config is not None else None
    manifest = load_cluster(cluster)
    fleet = build_cluster(manifest.metadata.name, manifest.spec)
    nodes = [fleet.node(node)] if node else [n for n in fleet.nodes if n.gpus]
    data = {n.name: discovery_labels(n, plugin) for n in nodes}

    def render(wide: bool) -> None:
        rows = [[name, key, value] for name, labels in data.items() for key, value in sorted(labels.items())]
        console.print(make_table(["NODE", "LABEL", "VALUE"], rows))

    emit(data, output, render)


@partition_app.command("dra-slices")
def dra_slices_cmd(
    cluster: Path = typer.Option(..., "--cluster", help="A kind: Cluster manifest."),
    node: str | None = typer.Option(None, "--node", help="Only this node's slices."),
    classes: bool = typer.Option(True, "--classes/--no-classes", help="Also print the drivers' DeviceClasses."),
    dynamic_mig: bool = typer.Option(
        False, "--dynamic-mig", help="Publish every MIG placement as a partitionable device (shared counters)."
    ),
) -> None:
    """Print the ResourceSlices (resource.k8s.io/v1) the vendors' DRA drivers would publish for the cluster's GPUs:
    NVIDIA's gpu.nvidia.com, AMD's gpu.amd.com (Intel Gaudi has no DRA driver: its nodes are left out)."""
    from gpufleet.sched.dra.vendors import device_classes, node_slices, published
    from gpufleet.sched.partition.device_plugin import dump_manifests
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    manifest = load_cluster(cluster)
    fleet = build_cluster(manifest.metadata.name, manifest.spec)
    nodes = [fleet.node(node)] if node else [n for n in fleet.nodes if n.gpus]
    left_out: list[str] = []
    if node:  # a node of a vendor without a driver is an error that says so
        slices = node_slices(nodes[0], dynamic_mig=dynamic_mig)
    else:
        slices, left_out = published(nodes, dynamic_mig=dynamic_mig)
    vendors = {n.gpu_vendor for n in nodes if n.name not in left_out}
    docs = [c.to_k8s() for c in device_classes(v for v in vendors if v)] if classes else []
    docs += [sl.to_k8s() for sl in slices]
    if left_out:
        typer.echo(f"left out (no DRA driver for their vendor): {', '.join(left_out)}", err=True)
    typer.echo(dump_manifests(docs), nl=False)


@partition_app.command("dra-allocate")
def dra_allocate_cmd(
    claims: Path = typer.Option(
        ..., "--claims", help="YAML with ResourceClaims / ResourceClaimTemplates (and DeviceClasses)."
    ),
    cluster: Path = typer.Option(..., "--cluster", help="A kind: Cluster manifest whose GPUs are the devices."),
    node: str | None = typer.Option(None, "--node", help="Allocate on this node (default: the first that fits)."),
    dynamic_mig: bool = typer.Option(False, "--dynamic-mig", help="MIG devices are created on allocation."),
) -> None:
    """Allocate each claim in turn (CEL selectors, counts, constraints) from every vendor's slices and print it with
    status.allocation."""
    from gpufleet.sched.dra.allocator import Allocator
    from gpufleet.sched.dra.objects import DeviceClass, ResourceClaim, ResourceClaimTemplate, load_dra_objects
    from gpufleet.sched.dra.vendors import device_classes, published
    from gpufleet.sched.partition.device_plugin import dump_manifests
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    manifest = load_cluster(cluster)
    fleet = build_cluster(manifest.metadata.name, manifest.spec)
    objects = load_dra_objects(claims)
    classes = {c.metadata.name: c for c in device_classes()}
    classes |= {o.metadata.name: o for o in objects if isinstance(o, DeviceClass)}
    slices, _ = published(fleet.nodes, dynamic_mig=dynamic_mig)  # a claim for Gaudi devices is told why it fails
    allocator = Allocator(slices, classes.values())
    todo: list[ResourceClaim] = []
    for obj in objects:
        if isinstance(obj, ResourceClaim):
            todo.append(obj)
        elif isinstance(obj, ResourceClaimTemplate):
            todo.append(obj.instantiate(f"{obj.metadata.name}-0"))
    if not todo:
        raise UserError(f"{claims} holds no ResourceClaim or ResourceClaimTemplate", fix="add one")
    typer.echo(dump_manifests([allocator.allocate(c, node).to_k8s() for c in todo]), nl=False)


amd_app = typer.Typer(
    help="AMD Instinct compute and memory partitions: what each mode gives, and a plan applied with AMD's DCM.",
    no_args_is_help=True,
)
partition_app.add_typer(amd_app, name="amd")


@amd_app.command("modes")
def amd_modes_cmd(
    gpu: str = typer.Option("mi300x", "--gpu", help="AMD model (mi300x, mi325x, mi355x)."),
    gpus: int = typer.Option(8, "--gpus", min=1, help="GPUs per node, for what the device plugin advertises."),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Every compute+memory mode the kernel accepts: logical GPUs, XCDs, CUs and memory each, whether DCM applies it
    and the resources a node of --gpus GPUs advertises under each naming strategy."""
    from gpufleet.sched.partition.amd_partition import advertised, valid_modes

    rows: list[dict[str, Any]] = [
        {
            "mode": m.name,
            "logicalGpus": m.partitions,
            "xcdsEach": m.xcds_each,
            "cusEach": m.cus_each,
            "memoryMiBEach": m.memory_mib,
            "poolMiB": m.pool_mib,
            "sharedBy": m.shared_by,
            "dcm": m.dcm_valid,
            "single": advertised(m.model, [m] * gpus, "single"),
            "mixed": advertised(m.model, [m] * gpus, "mixed"),
        }
        for m in valid_modes(gpu)
    ]

    def render(wide: bool) -> None:
        cols = ["MODE", "GPUS", "XCD", "CUS", "MEMORY EACH", "POOL", "SHARED BY", "DCM", "SINGLE", "MIXED"]
        table = [
            [r["mode"], r["logicalGpus"], r["xcdsEach"], r["cusEach"], _gib(r["memoryMiBEach"]), _gib(r["poolMiB"]),
             r["sharedBy"], "yes" if r["dcm"] else "no", _res(r["single"]), _res(r["mixed"])]
            for r in rows
        ]  # fmt: skip
        console.print(make_table(cols, table, title=f"{gpu}: partition modes, {gpus} GPUs a node"))

    emit({"gpu": gpu, "gpusPerNode": gpus, "modes": rows}, output, render)


def _gib(mib: int) -> str:
    return f"{mib / 1024:g} GiB"


def _res(resources: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in resources.items())


@amd_app.command("plan")
def amd_plan_cmd(
    demand: str = typer.Option(..., "--demand", help="MODE=COUNT: partitions wanted (cpx=40,gpu=3; cpx_nps4=16)."),
    cluster: Path | None = typer.Option(None, "--cluster", help="A kind: Cluster manifest; its AMD nodes are planned."),
    gpu: str = typer.Option("mi300x", "--gpu", help="Without --cluster: the AMD model of the nodes."),
    nodes: int | None = typer.Option(
        None, "--nodes", min=1, help="Without --cluster: this many nodes (default: fewest)."
    ),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="Without --cluster: GPUs per node."),
    naming: str = typer.Option(
        "single", "--naming", help="The device plugin's resource_naming_strategy: single, mixed."
    ),
    kernel_modes: bool = typer.Option(
        False, "--kernel-modes", help="Also DPX/QPX (set with amd-smi; DCM refuses them)."
    ),
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    out: Path | None = typer.Option(None, "--out", help="Write the DCM ConfigMap, node labels and plan here."),
) -> None:
    """Choose a partition mode per AMD node so the demand fits, changing as few nodes (and stopping as few GPU pods)
    as possible; print the DCM profiles, the labels, what each change drains and the steps."""
    from gpufleet.sched.partition import amd_emit, amd_plan, planner
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    if naming not in ("single", "mixed"):
        raise UserError(f"unknown naming strategy {naming!r}", fix="use single or mixed")
    wanted = amd_plan.parse_amd_demand(demand)
    if cluster is not None and nodes is not None:
        raise UserError("--cluster and --nodes are alternatives", fix="pass one of them")
    if cluster is not None:
        manifest = load_cluster(cluster)
        fleet = build_cluster(manifest.metadata.name, manifest.spec)
    else:
        count = nodes or amd_plan.nodes_needed(gpu, wanted, gpus_per_node, dcm_only=not kernel_modes)
        fleet = planner.synthetic_cluster(gpu, count * gpus_per_node, gpus_per_node)
    result = amd_plan.plan_amd(fleet, wanted, dcm_only=not kernel_modes)
    data = amd_emit.summary(result, naming)  # type: ignore[arg-type]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "dcm-configmap.yaml").write_text(yaml.safe_dump(data["dcmConfigMap"], sort_keys=False))
        (out / "node-labels.yaml").write_text(yaml.safe_dump(data["nodeLabels"]))
        (out / "plan.json").write_text(dump_json(data) + "\n")

    def render(wide: bool) -> None:
        changed = len(result.changed)
        console.print(f"[bold]{changed}[/bold] of {len(result.choices)} AMD nodes change mode ({naming} naming)")
        cols = ["NODE", "MODEL", "NOW", "PLAN", "GPUS", "CUS EACH", "MEMORY EACH", "ADVERTISED", "DCM PROFILE"]
        rows = [
            [n["node"], n["gpuModel"], n["current"], n["target"], n["logicalGpus"], n["cusEach"],
             _gib(n["memoryMiBEach"]), _res(n["advertised"]), n["dcmProfile"] or "(amd-smi)"]
            for n in data["nodes"] if wide or n["changed"] or len(data["nodes"]) <= 16
        ]  # fmt: skip
        console.print(make_table(cols, rows))
        console.print(
            make_table(["DEMAND", "WANTED", "PROVIDED"], [[k, wanted[k], v] for k, v in result.provided.items()])
        )
        for c in result.changed:
            reload = ", amdgpu driver reload (NPS change)" if c.driver_reload else ""
            console.print(f"[yellow]{c.node}[/yellow]: taint {data['taint']}{reload}; stops GPU pods: "
                          f"{', '.join(c.gpu_pods) or '-'}; evicts: {', '.join(c.evicted) or '-'}")  # fmt: skip
        if wide:
            for line in data["commands"]:
                console.print(f"  {line}", highlight=False, soft_wrap=True)
        if out is not None:
            console.print(f"wrote {out}/dcm-configmap.yaml, node-labels.yaml, plan.json")

    emit(data, output, render)


def register(app: typer.Typer) -> None:
    app.add_typer(partition_app, name="partition")
