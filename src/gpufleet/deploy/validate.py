"""`gpufleet deploy validate`: the workload operators run by hand after a GPU Operator install or a driver change,
as one Kubernetes Job per GPU node and step, or one `srun` step per node under Slurm.

- the `cuda` step asks for one GPU and runs `nvidia-smi` (its table: the driver reached through the container
  toolkit) and CUDA's vectorAdd sample (a kernel ran and its result checked: "Test PASSED");
- the `nccl` step, on a node with several GPUs, asks for all of them and runs a short nccl-tests `all_reduce_perf`
  across them in one process (`-g N`), its bus bandwidth judged as `gpufleet nccl compare` judges it.

Images, from NVIDIA's own documentation:
- vectorAdd: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04, the sample the GPU Operator's
  "Running Sample GPU Applications" and the Confidential Containers "Run a Sample Workload" pages
  (docs.nvidia.com/datacenter/cloud-native) run; its binary is /cuda-samples/vectorAdd (its entrypoint);
- nccl-tests: nvcr.io/nvidia/pytorch:25.06-py3, the image NVIDIA CloudAI's NcclTest workload runs
  (docs.nvidia.com/networking/cloudai, workloads/nccl), which carries the nccl-tests binaries (all_reduce_perf and
  all_reduce_perf_mpi) on its PATH.

Each Job is pinned to its node by node affinity on the node's name (metadata.name, as the DaemonSet controller pins
its pods; a hostname label may differ from the name), tolerates nvidia.com/gpu:NoSchedule and the node's own taints,
never restarts and has a deadline; the objects are the official client's models, checked against the Kubernetes
schemas as `gpufleet deploy render` checks its manifests.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ManifestError, UserError

VECTORADD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VECTORADD = "/cuda-samples/vectorAdd"
NCCL_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"
NCCL_TEST = "all_reduce_perf"
# Short: 8 B to 1 GiB doubling; the large sizes are where nccl.compare judges bus bandwidth (BANDWIDTH_REGION_BYTES)
NCCL_ARGS = ("-b", "8", "-e", "1G", "-f", "2")
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"  # GPU feature discovery / the operator's node labels
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
RUN_LABEL = "gpufleet.io/validate-run"
NODE_LABEL = "gpufleet.io/validate-node"
STEP_LABEL = "gpufleet.io/validate-step"
MARK = "=== gpufleet-validate"  # the scripts' section markers: `=== gpufleet-validate nvidia-smi` ... `... exit 0`
DEFAULT_TIMEOUT_S = 900  # the first pull of the nccl-tests image (the PyTorch container, ~10 GB) takes minutes
KEEP_FINISHED_S = 3600  # the Job's TTL: cleaned up by the cluster even if the command never returns
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
# Taints that mean the node cannot run anything now: reported, not tolerated
_DOWN_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass(frozen=True, slots=True)
class GpuNode:
    """A node to validate: how many GPUs it offers, and why it cannot run the steps if it cannot."""

    name: str
    gpus: int
    product: str = ""
    taints: tuple[dict[str, str], ...] = ()  # {key, value, effect} as the Node spec holds them
    problem: str = ""  # the node cannot be validated: not Ready, or no GPU advertised


@dataclass(frozen=True, slots=True)
class Step:
    name: str  # "cuda" or "nccl"
    gpus: int
    image: str
    script: str


def steps_for(node: GpuNode, vectoradd_image: str = VECTORADD_IMAGE, nccl_image: str = NCCL_IMAGE) -> list[Step]:
    """The cuda step on every node, the nccl step where the node has more than one GPU."""
    out = [Step("cuda", 1, vectoradd_image, cuda_script())]
    if node.gpus > 1:
        out.append(Step("nccl", node.gpus, nccl_image, nccl_script(node.gpus)))
    return out


def _section(name: str, command: str, var: str) -> str:
    return f'echo "{MARK} {name}"; {command}; {var}=$?; echo "{MARK} {name} exit ${var}"'


# Where the step landed: the node (NODE_NAME from the downward API, or Slurm's SLURMD_NODENAME) and its GPUs (Slurm
# sets CUDA_VISIBLE_DEVICES; NVIDIA's device plugin NVIDIA_VISIBLE_DEVICES, the allocated GPUs' UUIDs)
WHERE = (
    f'echo "{MARK} where node=${{NODE_NAME:-${{SLURMD_NODENAME:-}}}} '
    'gpus=${CUDA_VISIBLE_DEVICES:-${NVIDIA_VISIBLE_DEVICES:-}}"'
)


def cuda_script(vectoradd: str = VECTORADD, smi: str = "nvidia-smi") -> str:
    """nvidia-smi, then vectorAdd, each between markers with its exit code; fails if either did."""
    return "; ".join(
        (
            WHERE,
            _section("nvidia-smi", smi, "smi"),
            _section("vectorAdd", vectoradd, "va"),
            '[ "$smi" = 0 ] && [ "$va" = 0 ]',
        )
    )


def nccl_script(gpus: int, test: str = NCCL_TEST) -> str:
    command = shlex.join([test, *NCCL_ARGS, "-g", str(gpus)])
    return "; ".join((WHERE, _section("nccl-tests", command, "rc"), 'exit "$rc"'))


# --- nodes from a snapshot ----------------------------------------------------------------------------------------


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def gpu_node(node: Any) -> GpuNode | None:
    """A V1Node as a GpuNode; None for a node with no sign of an NVIDIA GPU (no capacity, no GFD label)."""
    meta, spec, status = node.metadata, node.spec, node.status
    labels = dict((meta.labels if meta else None) or {})
    capacity = _count(((status.capacity if status else None) or {}).get(GPU_RESOURCE))
    allocatable = _count(((status.allocatable if status else None) or {}).get(GPU_RESOURCE))
    if not capacity and not allocatable and labels.get(GPU_PRESENT_LABEL) != "true":
        return None
    taints = tuple(
        {"key": t.key, "value": t.value or "", "effect": t.effect}
        for t in ((spec.taints if spec else None) or [])
        if t.key
    )
    problem = ""
    ready = next((c for c in ((status.conditions if status else None) or []) if c.type == "Ready"), None)
    down = [t["key"] for t in taints if t["key"] in _DOWN_TAINTS]
    if ready is None or ready.status != "True" or down:
        why = (ready.message or ready.reason or "") if ready is not None else "no Ready condition"
        problem = f"node not Ready ({why})" if why else "node not Ready"
    elif not allocatable:
        problem = (
            f"the node advertises no allocatable {GPU_RESOURCE} (capacity {capacity}): the device plugin is not "
            "running or found no GPU"
        )
    return GpuNode(meta.name, allocatable, labels.get(GPU_PRODUCT_LABEL, ""), taints, problem)


def nodes_from_snapshot(text: str, source: str) -> list[Any]:
    """The Nodes of `kubectl get nodes -o json` (a List, or one Node; other kinds in the list are skipped) as the
    official client's V1Node models."""
    from gpufleet.integrations.kubernetes.client import kubernetes_module

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fix = "give `kubectl get nodes -o json`"
        raise ManifestError(source, f"is not JSON: {exc.msg} (line {exc.lineno})", fix=fix) from None
    items = data.get("items") if isinstance(data, dict) and "items" in data else [data]
    if not isinstance(items, list):
        raise ManifestError(source, "has no list of items", fix="give `kubectl get nodes -o json`")
    api = kubernetes_module().client.ApiClient()
    nodes = [
        api.deserialize(json.dumps(item), "V1Node", "application/json")
        for item in items
        if isinstance(item, dict) and item.get("kind", "Node") == "Node"
    ]
    if not nodes:
        raise ManifestError(source, "holds no Node", fix="give `kubectl get nodes -o json`")
    return nodes


def nodes_from_cluster(path: Any) -> list[GpuNode]:
    """The NVIDIA GPU nodes of a gpufleet cluster manifest (`kind: Cluster`, as `gpufleet up` and `partition`
    read it): what a cluster that is planned, not yet running, would be validated on."""
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.loader import load_cluster

    manifest = load_cluster(path)
    cluster = build_cluster(manifest.metadata.name, manifest.spec)
    return [
        GpuNode(
            node.name,
            len(node.gpus),
            node.gpus[0].model.product_name if node.gpus else "",
            tuple({"key": t.key, "value": t.value or "", "effect": str(t.effect)} for t in node.taints),
            "" if node.ready else "node not Ready",
        )
        for node in cluster.nodes
        if node.gpus and node.gpu_vendor == "nvidia"
    ]


def select(nodes: list[GpuNode], names: list[str]) -> list[GpuNode]:
    if not names:
        return nodes
    known = {n.name: n for n in nodes}
    missing = [n for n in names if n not in known]
    if missing:
        raise UserError(
            f"not a GPU node of this cluster: {', '.join(missing)}",
            fix=f"choose from {', '.join(sorted(known)) or '(none)'}",
        )
    return [known[n] for n in names]


# --- the Jobs -----------------------------------------------------------------------------------------------------


def job_name(run_id: str, step: str, node: str) -> str:
    """gpufleet-validate-<run>-<step>-<node>, a DNS label (63 at most: the Job controller labels its pods with it);
    a long node name is cut and a hash of it keeps names apart."""
    base = _NOT_DNS.sub("-", f"gpufleet-validate-{run_id}-{step}-{node}".lower()).strip("-")
    if len(base) <= 63:
        return base
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{base[: 63 - 9].rstrip('-')}-{digest}"


def tolerations(node: GpuNode) -> list[dict[str, str]]:
    """nvidia.com/gpu:NoSchedule (the taint GPU node pools carry) and each of the node's own taints, so the pod lands
    on a cordoned or dedicated GPU node as well: validating a node before it takes work is the point."""
    out = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    for taint in node.taints:
        if taint["key"] in _DOWN_TAINTS:
            continue
        wanted = {"key": taint["key"], "effect": taint["effect"]}
        wanted |= {"operator": "Equal", "value": taint["value"]} if taint["value"] else {"operator": "Exists"}
        if wanted not in out:
            out.append(wanted)
    return out


@dataclass(frozen=True, slots=True)
class JobOptions:
    namespace: str = "default"
    run_id: str = "manual"
    timeout_s: int = DEFAULT_TIMEOUT_S
    vectoradd_image: str = VECTORADD_IMAGE
    nccl_image: str = NCCL_IMAGE
    runtime_class: str | None = None  # e.g. nvidia, where the cluster's default runtime is not NVIDIA's
    extra_labels: dict[str, str] = field(default_factory=dict)


def job(node: GpuNode, step: Step, opts: JobOptions) -> Any:
    """The Job that runs `step` on `node`, as the official client's V1Job."""
    from gpufleet.integrations.kubernetes.client import kubernetes_module

    c = kubernetes_module().client
    labels = {
        "app.kubernetes.io/name": "gpufleet-validate",
        "app.kubernetes.io/managed-by": "gpufleet",
        RUN_LABEL: opts.run_id,
        STEP_LABEL: step.name,
        NODE_LABEL: _NOT_DNS.sub("-", node.name.lower())[:63].strip("-"),
        **opts.extra_labels,
    }
    affinity = c.V1Affinity(
        node_affinity=c.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=c.V1NodeSelector(
                node_selector_terms=[
                    c.V1NodeSelectorTerm(
                        match_fields=[
                            c.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node.name])
                        ]
                    )
                ]
            )
        )
    )
    gpus = {GPU_RESOURCE: str(step.gpus)}
    container = c.V1Container(
        name=step.name,
        image=step.image,
        command=["sh", "-c", step.script],
        resources=c.V1ResourceRequirements(limits=gpus, requests=gpus),
        env=[
            c.V1EnvVar(
                name="NODE_NAME",
                value_from=c.V1EnvVarSource(field_ref=c.V1ObjectFieldSelector(field_path="spec.nodeName")),
            )
        ],
        termination_message_policy="FallbackToLogsOnError",
    )
    pod = c.V1PodSpec(
        restart_policy="Never",
        affinity=affinity,
        tolerations=[c.V1Toleration(**t) for t in tolerations(node)],
        containers=[container],
        automount_service_account_token=False,
        runtime_class_name=opts.runtime_class,
    )
    return c.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=c.V1ObjectMeta(
            name=job_name(opts.run_id, step.name, node.name),
            namespace=opts.namespace,
            labels=labels,
            annotations={"gpufleet.io/validate-node-name": node.name},
        ),
        spec=c.V1JobSpec(
            backoff_limit=0,
            active_deadline_seconds=opts.timeout_s,
            ttl_seconds_after_finished=KEEP_FINISHED_S,
            template=c.V1PodTemplateSpec(metadata=c.V1ObjectMeta(labels=labels), spec=pod),
        ),
    )


@dataclass(frozen=True, slots=True)
class PlannedJob:
    node: GpuNode
    step: Step
    obj: Any  # V1Job


def plan(nodes: list[GpuNode], opts: JobOptions) -> list[PlannedJob]:
    """The Jobs for every node that can run them (nodes with a problem get none: it is reported instead)."""
    return [
        PlannedJob(node, step, job(node, step, opts))
        for node in nodes
        if not node.problem
        for step in steps_for(node, opts.vectoradd_image, opts.nccl_image)
    ]


def as_dict(model: Any) -> dict[str, Any]:
    """A client model as it goes on the wire (camelCase keys, no nulls)."""
    from gpufleet.integrations.kubernetes.client import kubernetes_module

    out: dict[str, Any] = kubernetes_module().client.ApiClient().sanitize_for_serialization(model)
    return out


def manifests(jobs: list[PlannedJob], kube_version: str) -> list[Any]:
    """The Jobs as checked manifests (deploy.render's Manifest: strict Kubernetes schemas of `kube_version`)."""
    import yaml

    from gpufleet.deploy import render

    version = render.kube_version(kube_version)
    out = []
    for planned in jobs:
        obj = as_dict(planned.obj)
        text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=1 << 16).rstrip("\n")
        out.append(
            render.Manifest(obj, text, f"gpufleet deploy validate: node {planned.node.name}, step {planned.step.name}")
        )
    render.validate(out, version)
    return out
