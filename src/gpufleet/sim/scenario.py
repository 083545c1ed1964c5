"""Turn a Scenario manifest into a running twin: build the cluster, lay out the workload, schedule the faults."""

from __future__ import annotations

from pathlib import Path

from gpufleet.errors import ManifestError, UserError
from gpufleet.model import Cluster, InferenceService, Node, TrainingJob
from gpufleet.sched.partition.mig import geometry_of, layout_for_counts
from gpufleet.sim.faults import expand_campaign, from_specs
from gpufleet.sim.pods import ShareGroup, device_capacity_mib
from gpufleet.sim.twin import EPOCH, Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.loader import load_scenario
from gpufleet.spec.scenario_spec import (
    MAX_REPLICAS_PRE_VOLTA_MPS,
    MigSpec,
    ScenarioBody,
    SharingMode,
    SharingSpec,
)


def carve_mig(cluster: Cluster, specs: list[MigSpec], source: str) -> None:
    """Put the chosen GPUs in MIG mode with their GPU instances, as mig-parted would: placements from the catalog's
    geometry, every layout checked by its rules (starts, overlaps, max counts)."""
    carved: set[tuple[str, int]] = set()
    names = {n.name for n in cluster.nodes}
    for spec in specs:
        for name in spec.nodes:
            if name not in names:
                raise ManifestError(source, f"mig: no node named {name!r}", fix="name nodes of the cluster")
            node = cluster.node(name)
            for index in spec.gpus if spec.gpus is not None else range(len(node.gpus)):
                if index >= len(node.gpus):
                    raise ManifestError(source, f"mig: {name} has no GPU {index}", fix=f"it has {len(node.gpus)}")
                if (name, index) in carved:
                    raise ManifestError(source, f"mig: {name} GPU {index} is listed twice", fix="list each GPU once")
                carved.add((name, index))
                gpu = node.gpus[index]
                try:
                    layout = layout_for_counts(geometry_of(gpu.model), spec.devices)
                except UserError as exc:
                    raise ManifestError(source, f"mig: {name} GPU {index}: {exc.message}", fix=exc.fix) from None
                gpu.mig_enabled, gpu.mig_instances = True, layout.to_instances(gpu.uuid)


def plan_sharing(cluster: Cluster, specs: list[SharingSpec], source: str) -> list[ShareGroup]:
    """The shared devices of each `sharing:` entry, checked against the cluster as the device plugin would: MIG
    sharing needs carved GPUs, MPS and plain time-slicing whole GPUs, and the pods' memory must fit."""
    groups: list[ShareGroup] = []
    taken: set[tuple[str, int, int | None]] = set()
    names = {n.name for n in cluster.nodes}
    for spec in specs:
        mode = spec.mode.value
        devices: list[tuple[str, int, int | None]] = []
        for name in spec.nodes:
            if name not in names:
                raise ManifestError(source, f"sharing: no node named {name!r}", fix="name nodes of the cluster")
            node = cluster.node(name)
            for index in spec.gpus if spec.gpus is not None else range(len(node.gpus)):
                if index >= len(node.gpus):
                    raise ManifestError(source, f"sharing: {name} has no GPU {index}", fix=f"it has {len(node.gpus)}")
                devices += _shared_devices(node, index, spec, source)
        for device in devices:
            if device in taken or (device[0], device[1], None) in taken:
                what = f"{device[0]} GPU {device[1]}" + (f" MIG instance {device[2]}" if device[2] else "")
                raise ManifestError(source, f"sharing: {what} is in two entries", fix="share each device once")
            taken.add(device)
        if not devices:
            raise ManifestError(
                source, f"sharing ({mode}) on {', '.join(spec.nodes)}: no device matches", fix="check `profiles`"
            )
        groups.append(ShareGroup(spec, tuple(devices)))
    return groups


def _shared_devices(node: Node, index: int, spec: SharingSpec, source: str) -> list[tuple[str, int, int | None]]:
    gpu = node.gpus[index]
    where = f"sharing: {node.name} GPU {index}"
    replicas = spec.replicas or 1
    if gpu.vendor != "nvidia":
        raise ManifestError(source, f"{where} is {gpu.model.product_name}", fix="share NVIDIA GPUs only")
    if spec.mode is SharingMode.mig:
        if not gpu.mig_enabled or not gpu.mig_instances:
            raise ManifestError(
                source, f"{where} is not carved into MIG instances", fix="carve it in `mig:` first, or use time-slicing"
            )
        chosen = [i for i in gpu.mig_instances if spec.profiles is None or i.profile in spec.profiles]
        for inst in chosen:
            _fits(where + f" MIG {inst.profile} (GI {inst.gi_id})", device_capacity_mib(gpu, inst), spec, source)
        return [(node.name, index, i.gi_id) for i in chosen]
    if gpu.mig_enabled:
        if spec.mode is SharingMode.mps:
            raise ManifestError(
                source,
                f"{where} has MIG enabled: MPS is not supported on devices with MIG enabled",
                fix="leave the GPU out of `mig:`, or share its instances with `mode: mig` (and `replicas`)",
            )
        raise ManifestError(
            source,
            f"{where} has MIG enabled: time-slicing shares its MIG instances, not the whole GPU",
            fix="use `mode: mig` with `replicas` to time-slice its instances",
        )
    if spec.mode is SharingMode.mps and gpu.model.compute_major < 7 and replicas > MAX_REPLICAS_PRE_VOLTA_MPS:
        raise ManifestError(
            source,
            f"{where}: MPS takes at most {MAX_REPLICAS_PRE_VOLTA_MPS} clients per GPU before compute capability 7.0",
            fix=f"set replicas to {MAX_REPLICAS_PRE_VOLTA_MPS} or fewer",
        )
    _fits(where, device_capacity_mib(gpu, None), spec, source)
    return [(node.name, index, None)]


def _fits(where: str, capacity: float, spec: SharingSpec, source: str) -> None:
    """Every replica's container at its largest must fit the device (MPS: each client's pinned-memory limit is the
    device's memory over replicas, which comes to the same)."""
    replicas = spec.replicas or 1
    per_process = spec.pods.memory_mib[1]
    worst = replicas * spec.pods.processes[1] * per_process
    if worst > capacity:
        most = int(capacity // (replicas * spec.pods.processes[1]))
        raise ManifestError(
            source,
            f"{where}: {replicas} replicas x {spec.pods.processes[1]} processes x {per_process:g} MiB do not fit its "
            f"{capacity:.0f} MiB",
            fix=f"keep pods.memoryMib at most {most} MiB, or use fewer replicas or processes",
        )


def layout_workload(
    cluster: Cluster, body: ScenarioBody, source: str, shared: set[tuple[str, int]] | None = None
) -> tuple[list[TrainingJob], list[InferenceService]]:
    """Place the training jobs and inference services on whole GPUs: never on a MIG node's or on shared GPUs
    (`shared`: (node, GPU index)); jobs laid out by count skip the nodes that have either."""
    wl = body.workload
    shared = shared or set()
    gpu_nodes = [n for n in cluster.nodes if n.gpus]
    # no room for full-GPU ranks
    used: set[str] = {n.name for n in gpu_nodes if any(g.mig_enabled for g in n.gpus)} | {n for n, _ in shared}
    services: list[InferenceService] = []
    gpu_cursor: dict[str, int] = {}
    for svc in wl.inference:
        candidates = [n for n in gpu_nodes if svc.pool is None or n.pool == svc.pool]
        node_name = svc.node or next((n.name for n in reversed(candidates) if n.name not in used), None)
        if node_name is None:
            where = f" in pool {svc.pool!r}" if svc.pool else ""
            raise ManifestError(source, f"no node left{where} for inference service {svc.name!r}")
        node = cluster.node(node_name)
        first = gpu_cursor.get(node_name, 0)
        if first + svc.gpus > len(node.gpus):
            raise ManifestError(
                source,
                f"inference service {svc.name!r} needs {svc.gpus} GPUs; {node_name} has {len(node.gpus) - first} left",
            )
        clash = sorted(g for g in range(first, first + svc.gpus) if (node_name, g) in shared)
        if clash or any(node.gpus[g].mig_enabled for g in range(first, first + svc.gpus)):
            raise ManifestError(
                source,
                f"inference service {svc.name!r} would take GPUs {first}..{first + svc.gpus - 1} of {node_name}, "
                "which are shared or in MIG mode",
                fix="place it on another node, or share other GPUs (`sharing: gpus`)",
            )
        gpu_cursor[node_name] = first + svc.gpus
        used.add(node_name)
        services.append(
            InferenceService(
                name=svc.name,
                node=node_name,
                gpu_indices=tuple(range(first, first + svc.gpus)),
                requests_per_s=svc.requests_per_s,
                slo_p99_s=svc.slo_p99,
                version=svc.version,
                tokens_per_request=svc.tokens_per_request,
                capacity_per_gpu=svc.capacity_per_gpu,
            )
        )
    jobs: list[TrainingJob] = []
    for spec in wl.training_jobs:
        if isinstance(spec.nodes, list):
            names = spec.nodes
            for name in names:
                if any(g.mig_enabled for g in cluster.node(name).gpus):
                    raise ManifestError(source, f"training job {spec.name!r} names {name}, whose GPUs are in MIG mode")
                if any(n == name for n, _ in shared):
                    raise ManifestError(
                        source,
                        f"training job {spec.name!r} names {name}, whose GPUs are shared",
                        fix="give the job nodes without `sharing:` entries",
                    )
            models = {cluster.node(name).gpu_model for name in names}
            if len(models) > 1:
                raise ManifestError(
                    source,
                    f"training job {spec.name!r} spans {', '.join(sorted(m or 'no GPU' for m in models))}: its ranks "
                    "run one framework build and collective library",
                    fix="list nodes of one GPU model (one pool)",
                )
        else:
            free = _free_nodes(gpu_nodes, used, spec.nodes, spec.pool)
            if free is None:
                where = f"pool {spec.pool!r}" if spec.pool else "any one pool"
                raise ManifestError(
                    source,
                    f"training job {spec.name!r} needs {spec.nodes} free nodes of {where}",
                    fix="give it fewer nodes, a pool with room, or list its nodes",
                )
            names = free
        used.update(names)
        gpn = spec.gpus_per_node or len(cluster.node(names[0]).gpus)
        jobs.append(
            TrainingJob(
                name=spec.name,
                nodes=list(names),
                gpus_per_node=gpn,
                model_params_b=spec.model_params_b,
                tokens_per_step=spec.tokens_per_step,
                nccl_timeout_s=spec.nccl_timeout,
                sequence_length=spec.sequence_length,
                learning_rate=spec.learning_rate,
                warmup_steps=spec.warmup_steps,
                total_steps=spec.total_steps,
                eval_every=spec.eval_every,
                checkpoint_every=spec.checkpoint_every,
            )
        )
    if wl.auto_training_nodes_per_job:
        per = wl.auto_training_nodes_per_job
        free_nodes = [n for n in gpu_nodes if n.name not in used]
        # Jobs stay within one pool so every rank has the same GPU and NICs.
        by_pool: dict[str, list[str]] = {}
        for n in free_nodes:
            by_pool.setdefault(n.pool, []).append(n.name)
        budget = int(wl.auto_training_fill * len(free_nodes) // per)
        for pool_nodes in by_pool.values():
            while budget > 0 and len(pool_nodes) >= per:
                names, pool_nodes[:] = pool_nodes[:per], pool_nodes[per:]
                jobs.append(
                    TrainingJob(name=f"train-{len(jobs)}", nodes=names, gpus_per_node=len(cluster.node(names[0]).gpus))
                )
                budget -= 1
    return jobs, services


def _free_nodes(gpu_nodes: list[Node], used: set[str], count: int, pool: str | None) -> list[str] | None:
    """`count` free nodes of one pool (the named one, else the first with room): a job's ranks share a GPU model."""
    by_pool: dict[str, list[str]] = {}
    for n in gpu_nodes:
        if n.name not in used and (pool is None or n.pool == pool):
            by_pool.setdefault(n.pool, []).append(n.name)
    return next((names[:count] for names in by_pool.values() if len(names) >= count), None)


def build_twin(path: Path, *, ring_seconds: int = 300, epoch: float = EPOCH) -> tuple[Twin, float]:
    scenario, cluster_name, body = load_scenario(path)
    spec = scenario.spec
    cluster = build_cluster(cluster_name, body)
    carve_mig(cluster, spec.mig, str(path))
    sharing = plan_sharing(cluster, spec.sharing, str(path))
    shared = {(node, index) for group in sharing for node, index, _ in group.devices}
    jobs, services = layout_workload(cluster, spec, str(path), shared)
    faults = from_specs(spec.faults, cluster, jobs, str(path), services)
    if spec.campaign is not None:
        faults += expand_campaign(spec.campaign, cluster, jobs, spec.duration, len(faults), services)
    twin = Twin(
        cluster,
        seed=spec.seed,
        tick=spec.tick,
        ambient_c=body.ambient_c,
        jobs=jobs,
        services=services,
        faults=faults,
        cost_per_gpu_hour=body.cost_per_gpu_hour,
        ring_seconds=ring_seconds,
        restart_backoff_s=spec.workload.restart_backoff if spec.workload.restart_policy == "OnFailure" else None,
        epoch=epoch,
        sharing=sharing,
    )
    return twin, spec.duration
