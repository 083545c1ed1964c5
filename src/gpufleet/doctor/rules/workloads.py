"""Rules on GPU workloads' pod specs: how GPUs are asked for, where the pods may land, and what they need to run
well (shared memory, NCCL settings, model caches). What marks a pod as GPU work, training or an inference server
is data: the `signals` table of data/rules/workloads.yaml, each pattern with its source."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources as package_data
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog.vendors import get_vendor, gpu_resources, load_vendors
from gpufleet.doctor.accelerators import image_stack, resource_vendor
from gpufleet.doctor.facts import NodeFacts
from gpufleet.doctor.objects import (
    MIG_RESOURCE_PREFIX,
    K8sObject,
    PodTemplate,
    as_dict,
    as_list,
    container_gpus,
    exact_quantity,
    gpu_resource_names,
    node_selection_matches,
    quantity,
    resources,
    tolerates,
)
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.model import Severity
from gpufleet.nccl.advisor import lint_env

GIB = Decimal(2**30)
TRAINING_KINDS = {
    "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob", "JobSet", "LeaderWorkerSet",
    "RayCluster", "RayJob", "RayService",
}  # fmt: skip
INFERENCE_KINDS = {"Deployment", "StatefulSet", "LeaderWorkerSet", "InferenceService"}
# Any accelerator a device plugin serves: NVIDIA (GPUs, MIG slices, shared replicas), AMD, Intel, Gaudi, TPU, Neuron.
ACCELERATOR = re.compile(
    r"^(nvidia\.com/|amd\.com/|gpu\.intel\.com/|habana\.ai/|google\.com/tpu|aws\.amazon\.com/neuron)"
)
# Labels that name the GPU model (or the machine type, which implies it); each vendor's product label is added.
MODEL_LABELS = {
    "nvidia.com/gpu.family", "nvidia.com/gpu.machine", "nvidia.com/gpu.memory", "amd.com/gpu.device-id",
    "habana.ai/device.id", "cloud.google.com/gke-accelerator", "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type", "karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-family",
} | {v.product_label for v in load_vendors().values()}  # fmt: skip
# Taints that mark a node's passing condition (not ready, cordoned, being scaled down), not what it is for.
TRANSIENT_TAINT = re.compile(
    r"^(node\.kubernetes\.io/|node\.cloudprovider\.kubernetes\.io/|node\.cluster\.x-k8s\.io/uninitialized$"
    r"|ToBeDeletedByClusterAutoscaler$|DeletionCandidateOfClusterAutoscaler$|karpenter\.sh/(disrupted|disruption"
    r"|unregistered)$)"
)
POD_LIFETIME_VOLUMES = {"emptyDir", "ephemeral"}
REMOTE = re.compile(r"^(s3|gs|gcs|az|as|abfss?|https?)://", re.I)
ON = {"1", "true", "yes", "on"}


# --- the signals table -----------------------------------------------------------------------------------------


class _Pattern(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str
    what: str
    source: str
    alone: bool = True  # False: counts only next to another signal


class _EnvValue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    value: str
    what: str
    source: str


class _CpuOnly(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    images: tuple[_Pattern, ...] = ()
    commands: tuple[_Pattern, ...] = ()
    env: tuple[_EnvValue, ...] = ()


class InferenceServer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    images: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    model_flags: tuple[str, ...] = ()
    model_after: str | None = None
    model_env: tuple[str, ...] = ()
    cache: Literal["huggingface", "nim", "repository"]
    cache_flags: tuple[str, ...] = ()
    cache_env: str | None = None
    cache_default: str | None = None
    source: str


class Signals(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_images: tuple[_Pattern, ...]
    gpu_commands: tuple[_Pattern, ...]
    gpu_env: tuple[_Pattern, ...]
    cpu_only: _CpuOnly = Field(default_factory=_CpuOnly)
    training_commands: tuple[_Pattern, ...]
    inference_servers: tuple[InferenceServer, ...]


@cache
def signals() -> Signals:
    text = package_data.files("gpufleet.doctor").joinpath("data", "rules", "workloads.yaml").read_text("utf-8")
    return Signals.model_validate(yaml.safe_load(text)["signals"])


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _found(patterns: Iterable[_Pattern], text: str) -> list[str]:
    return [p.what for p in patterns if _regex(p.pattern).search(text)]


# --- containers ----------------------------------------------------------------------------------------------------


def _name(c: dict[str, Any]) -> str:
    return str(c.get("name", "?"))


def _image(c: dict[str, Any]) -> str:
    return str(c.get("image") or "").strip().lower().partition("@")[0]


def _command_line(c: dict[str, Any]) -> str:
    return " ".join(str(part) for part in [*as_list(c.get("command")), *as_list(c.get("args"))])


def _tokens(c: dict[str, Any]) -> list[str]:
    """The command and args as words, a shell script (`sh -c "..."`) split into its words too."""
    out: list[str] = []
    for part in [*as_list(c.get("command")), *as_list(c.get("args"))]:
        text = str(part)
        try:
            out.extend(shlex.split(text) if any(ch.isspace() for ch in text) else [text])
        except ValueError:
            out.extend(text.split())
    return out


def _env(c: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in as_list(c.get("env")):
        if isinstance(item, dict) and "name" in item:
            out[str(item["name"])] = "" if item.get("value") is None else str(item["value"])
    return out


def _all_flags(tokens: list[str], flags: Iterable[str]) -> list[str]:
    """The values of `flags` given as `--flag value` or `--flag=value`, in order."""
    out = []
    for i, token in enumerate(tokens):
        for flag in flags:
            if token == flag and i + 1 < len(tokens):
                out.append(tokens[i + 1])
            elif token.startswith(flag + "="):
                out.append(token[len(flag) + 1 :])
    return out


def _flag(tokens: list[str], flags: Iterable[str]) -> str | None:
    return next(iter(_all_flags(tokens, flags)), None)


def _uses_accelerators(t: PodTemplate) -> bool:
    """Asks for a device-plugin accelerator or holds a DRA resource claim."""
    if as_list(t.spec.get("resourceClaims")):
        return True
    for c in t.containers():
        if as_list(as_dict(c.get("resources")).get("claims")):
            return True
        if any(ACCELERATOR.match(n) for section in ("limits", "requests") for n in resources(c, section)):
            return True
    return False


def _requested(t: PodTemplate) -> list[str]:
    """The GPU and MIG resources the pod asks for (a positive amount of)."""
    return sorted({n for c in t.containers() for n in gpu_resource_names(c) if container_gpus(c) > 0})


def _amounts(t: PodTemplate) -> dict[str, float]:
    """How much of each GPU or MIG resource the pod needs on one node, as the scheduler counts it: the sum over its
    containers, or its largest init container's if that is more."""

    def of(c: dict[str, Any], name: str) -> float:
        given = resources(c, "limits").get(name)
        return quantity(given if given is not None else resources(c, "requests").get(name))

    inits = [c for c in as_list(t.spec.get("initContainers")) if isinstance(c, dict)]
    return {
        name: max(sum(of(c, name) for c in t.containers(init=False)), max((of(c, name) for c in inits), default=0))
        for name in _requested(t)
    }


def _pods(t: PodTemplate) -> str:
    return "the pod" if t.obj.kind == "Pod" else f"each pod of {t.path}"


def _amount(t: PodTemplate) -> str:
    count = t.gpu_request()
    return f"{count:g} {'/'.join(_requested(t)) or 'GPU'}"


def _mounts(c: dict[str, Any]) -> list[tuple[str, str]]:
    """(normalised mount path, volume name) of a container's volumeMounts."""
    out = []
    for m in as_list(c.get("volumeMounts")):
        if isinstance(m, dict) and m.get("mountPath"):
            out.append((posixpath.normpath(str(m["mountPath"])), str(m.get("name", ""))))
    return out


def _covering(c: dict[str, Any], path: str) -> tuple[str, str] | None:
    """The deepest mount at or above `path`."""
    path = posixpath.normpath(path)
    found = [(m, v) for m, v in _mounts(c) if path == m or path.startswith(m.rstrip("/") + "/")]
    return max(found, key=lambda mv: len(mv[0]), default=None)


def _volumes(t: PodTemplate) -> dict[str, dict[str, Any]]:
    """Volume name -> {kind: source}; StatefulSet and LeaderWorkerSet claim templates as persistentVolumeClaim."""
    out: dict[str, dict[str, Any]] = {}
    claims = [
        *as_list(t.obj.spec.get("volumeClaimTemplates")),
        *as_list(as_dict(t.obj.spec.get("leaderWorkerTemplate")).get("volumeClaimTemplates")),
    ]
    for claim in claims:
        name = as_dict(as_dict(claim).get("metadata")).get("name")
        if name:
            out[str(name)] = {"persistentVolumeClaim": {"claimName": name}}
    for volume in as_list(t.spec.get("volumes")):
        if isinstance(volume, dict) and volume.get("name"):
            out[str(volume["name"])] = {k: v for k, v in volume.items() if k != "name"}
    return out


def _volume_kind(t: PodTemplate, name: str) -> str:
    return next(iter(_volumes(t).get(name) or {"unknown": None}))


# --- nodes: where a pod may land -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cluster:
    """What placement depends on beyond the pod, gathered once per rule run."""

    gpu_nodes: list[NodeFacts]
    runtime_classes: dict[str, dict[str, Any]]  # name -> its scheduling (nodeSelector, tolerations)
    plugin: str | None  # where ExtendedResourceToleration is seen enabled

    @classmethod
    def of(cls, ctx: Context) -> _Cluster:
        classes = {rc.name: as_dict(rc.data.get("scheduling")) for rc in ctx.of_kind("RuntimeClass")}
        return cls(ctx.facts.gpu_nodes, classes, _admission_plugin(ctx))

    def scheduling(self, t: PodTemplate) -> dict[str, Any]:
        """The scheduling of the pod's RuntimeClass, which admission merges into the pod."""
        return self.runtime_classes.get(str(t.spec.get("runtimeClassName") or ""), {})


def _selection_spec(cluster: _Cluster, t: PodTemplate) -> dict[str, Any]:
    extra = as_dict(cluster.scheduling(t).get("nodeSelector"))
    return {**t.spec, "nodeSelector": {**as_dict(t.spec.get("nodeSelector")), **extra}} if extra else t.spec


def _offers(node: NodeFacts, resource: str, amount: float) -> bool:
    """Whether the node has `amount` of `resource` in all (allocatable, else capacity; for a node known only by GPU
    Feature Discovery's labels, its nvidia.com/gpu.count)."""
    if resource in node.allocatable or resource in node.capacity:
        return node.allocatable.get(resource, node.capacity.get(resource, 0.0)) >= max(amount, 1e-9)
    gpu_capacity = any(k in node.capacity for k in gpu_resources())
    labelled = resource == "nvidia.com/gpu" and node.labels.get("nvidia.com/gpu.present") == "true"
    return labelled and not gpu_capacity and (node.gpus == 0 or node.gpus >= amount)


def _candidates(cluster: _Cluster, t: PodTemplate) -> list[NodeFacts]:
    """The GPU nodes with as many GPUs (or MIG slices) as the pod asks for, that its selectors and required affinity
    admit."""
    spec, wanted = _selection_spec(cluster, t), _amounts(t)
    return [
        n
        for n in cluster.gpu_nodes
        if all(_offers(n, r, amount) for r, amount in wanted.items()) and node_selection_matches(spec, n.name, n.labels)
    ]


def _admission_plugin(ctx: Context) -> str | None:
    """Where the ExtendedResourceToleration admission plugin is seen enabled, or None."""
    if "ExtendedResourceToleration" in ctx.facts.admission_plugins:
        return f"kube-apiserver in {ctx.facts.admission_source}"
    if any("cloud.google.com/gke-nodepool" in n.labels for n in ctx.facts.nodes.values()):
        return "GKE, whose API server runs it"
    return None


def _tolerations(cluster: _Cluster, t: PodTemplate) -> list[dict[str, Any]]:
    out = [x for x in as_list(t.spec.get("tolerations")) if isinstance(x, dict)]
    out += [x for x in as_list(cluster.scheduling(t).get("tolerations")) if isinstance(x, dict)]
    if cluster.plugin:  # what ExtendedResourceToleration adds for every extended resource the pod requests
        out += [{"key": r, "operator": "Exists", "effect": "NoSchedule"} for r in _requested(t)]
    return out


def _blocking(node: NodeFacts, tolerations: list[dict[str, Any]], pinned: bool) -> list[dict[str, Any]]:
    """The node's taints that keep the pod off it (NoExecute only when nodeName bypasses the scheduler)."""
    effects = ("NoExecute",) if pinned else ("NoSchedule", "NoExecute")
    return [
        taint
        for taint in node.taints
        if taint.get("effect") in effects
        and not TRANSIENT_TAINT.match(str(taint.get("key", "")))
        and not any(tolerates(x, taint) for x in tolerations)
    ]


def _taint(taint: dict[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"


def _counted(counts: Counter[str], unit: str = "node") -> str:
    return ", ".join(f"{k} ({n} {unit}{'s' if n != 1 else ''})" for k, n in counts.most_common())


@rule("GF001")
def gpu_request_without_limit(ctx: Context) -> Iterator[Hit]:
    for template in ctx.templates:
        for c in template.containers():
            limits = resources(c, "limits")
            for name in sorted(gpu_resource_names(c)):
                if name not in limits:
                    yield Hit(
                        f"container {c.get('name', '?')!r} ({template.path}) asks for {name} in requests but not in"
                        " limits: the API server refuses such a pod (extended resources must be limits), so a"
                        " controller's pods are never created and the workload waits with no pod to show why",
                        f"set resources.limits[{name!r}] (requests may be left out: they default to the limit)",
                        template.obj,
                    )


@rule("GF002")
def fractional_gpu(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        for c in t.containers():
            for name in sorted(gpu_resource_names(c)):
                given = {s: resources(c, s).get(name) for s in ("limits", "requests") if name in resources(c, s)}
                bad = {s: v for s, v in given.items() if (q := exact_quantity(v)) is not None and q % 1 != 0}
                if not bad:
                    continue
                shown = " and ".join(f"{name}: {v!r} in {s}" for s, v in bad.items())
                kind, share = _SHARING.get(resource_vendor(name) or "nvidia", _SHARING["nvidia"])
                kind = "MIG slices" if name.startswith(MIG_RESOURCE_PREFIX) else kind
                yield Hit(
                    f"container {_name(c)!r} ({t.path}) asks for {shown}: {kind} are whole devices and the API server"
                    ' refuses a non-integer extended resource ("must be an integer"), so no pod is ever created',
                    f"ask for whole devices; {share}",
                    t.obj,
                )


# What each vendor's devices are called, and how a pod shares one instead of asking for a fraction (GF002).
_SHARING = {
    "nvidia": (
        "GPUs",
        "to share one, ask for a MIG slice (e.g. nvidia.com/mig-1g.10gb: 1), a time-slicing or MPS replica of the"
        " device plugin (still 1 per container), or a device through a DRA ResourceClaim",
    ),
    "amd": (
        "AMD GPUs and their partitions",
        "to use part of an MI300-class GPU, partition it (compute modes DPX/QPX/CPX, applied with AMD's DCM) and ask"
        " for whole partitions (amd.com/cpx_nps1: 1 with the mixed naming strategy), or claim it through the AMD"
        " DRA driver (DeviceClass gpu.amd.com)",
    ),
    "intel": ("Gaudi cards", "Gaudi cards are neither partitioned nor shared (one process per card): ask for 1"),
}


@rule("GF003", reads=("RuntimeClass",))
def untolerated_gpu_taints(ctx: Context) -> Iterator[Hit]:
    if not ctx.facts.gpu_nodes:
        return
    cluster = _Cluster.of(ctx)
    plugin = cluster.plugin
    for t in ctx.templates:
        if t.gpu_request() <= 0:
            continue
        nodes, tolerations = _candidates(cluster, t), _tolerations(cluster, t)
        blocked: dict[str, list[dict[str, Any]]] = {}
        for node in nodes:
            blocked[node.name] = _blocking(node, tolerations, bool(t.spec.get("nodeName")))
            if not blocked[node.name]:
                break  # a node accepts it
        if not nodes or not all(blocked.values()):
            continue
        counts = Counter(text for taints in blocked.values() for text in {_taint(x) for x in taints})
        fewest = min(blocked.values(), key=len)
        add = ", ".join(
            f"{{key: {x.get('key')}, operator: Exists, effect: {x.get('effect')}}}"
            for x in {_taint(x): x for x in fewest}.values()
        )
        outcome = "the DaemonSet places no pod on them" if t.obj.kind == "DaemonSet" else "it stays Pending forever"
        resources_asked = ", ".join(_requested(t))
        plugin_note = (
            f" ExtendedResourceToleration ({plugin}) only adds {{key: {resources_asked}, operator: Exists, effect:"
            " NoSchedule}, which does not cover these."
            if plugin
            else ""
        )
        yield Hit(
            f"{_pods(t)} asks for {_amount(t)}, but none of the {len(nodes)} GPU node(s) it may use accepts it:"
            f" the taints {_counted(counts)} are not tolerated, so {outcome} (FailedScheduling: untolerated"
            f" taint).{plugin_note}",
            f"add tolerations: {add}. The GPU Operator and the device plugin add none to workloads; enabling the"
            " ExtendedResourceToleration admission plugin (kube-apiserver --enable-admission-plugins) adds"
            " {key: <resource>, operator: Exists, effect: NoSchedule} for each extended resource a pod requests,"
            " which covers GPU nodes tainted with the resource name as key",
            t.obj,
        )


def _model(node: NodeFacts) -> str | None:
    product = node.gpu_product
    return re.sub(r"-(MIG-.*|SHARED)$", "", product) if product else None


def _selects_model(spec: dict[str, Any]) -> bool:
    keys = set(as_dict(spec.get("nodeSelector")))
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    for term in map(as_dict, as_list(required.get("nodeSelectorTerms"))):
        keys.update(str(as_dict(e).get("key", "")) for e in as_list(term.get("matchExpressions")))
    return bool(keys & MODEL_LABELS)


@rule("GF004")
def gpu_model_not_pinned(ctx: Context) -> Iterator[Hit]:
    if len({_model(n) for n in ctx.facts.gpu_nodes} - {None}) < 2:
        return
    cluster = _Cluster.of(ctx)
    for t in ctx.templates:
        if t.gpu_request() <= 0 or t.obj.kind == "DaemonSet" or t.spec.get("nodeName"):
            continue
        if any(r.startswith(MIG_RESOURCE_PREFIX) for r in _requested(t)) or _selects_model(_selection_spec(cluster, t)):
            continue
        tolerations, candidates = _tolerations(cluster, t), _candidates(cluster, t)
        # the nodes whose taints it tolerates; when there are none (GF003's finding), those it would use once it does
        nodes = [n for n in candidates if not _blocking(n, tolerations, False)] or candidates
        models = Counter(m for n in nodes if (m := _model(n)))
        if len(models) < 2:
            continue
        vendor = next((v for r in _requested(t) if (v := resource_vendor(r))), "nvidia")
        label, labeller = get_vendor(vendor).product_label, _LABELLER.get(vendor, "its feature discovery")
        yield Hit(
            f"{_pods(t)} asks for {_amount(t)} with no selector or required affinity on the GPU model, and the GPU"
            f" nodes it may use carry {len(models)} models: {_counted(models)}: it lands on whichever has room"
            " (memory, speed and built engines differ; a distributed job on mixed models runs at the slowest)",
            f"pin the model: nodeSelector {{{label}: <model>}} (e.g. {models.most_common(1)[0][0]}; {labeller}'s"
            " label) or a required node affinity on it, or on cloud.google.com/gke-accelerator,"
            " karpenter.k8s.aws/instance-gpu-name or node.kubernetes.io/instance-type",
            t.obj,
        )


_LABELLER = {"nvidia": "GPU Feature Discovery", "amd": "the AMD node labeller", "intel": "Gaudi feature discovery"}


def _training(t: PodTemplate) -> str | None:
    """Why the pod counts as training, or None."""
    if t.obj.kind in TRAINING_KINDS:
        return f"a {t.obj.kind} with GPUs"
    for c in t.containers():
        found = _found(signals().training_commands, _command_line(c))
        if found:
            return found[0]
        if any(re.match(r"^(TORCH_)?NCCL_", var) for var in _env(c)):
            return "NCCL settings"
    return None


def _kuberay_mounts_shm(t: PodTemplate) -> bool:
    """KubeRay mounts a memory emptyDir at /dev/shm in the Ray container (the first) of every Ray pod, unless
    rayStartParams sets plasma-directory (ray-operator/controllers/ray/common/pod.go)."""
    spec = t.obj.spec
    cluster = as_dict(
        {"RayJob": spec.get("rayClusterSpec"), "RayService": spec.get("rayClusterConfig")}.get(
            t.obj.kind, spec if t.obj.kind == "RayCluster" else None
        )
    )
    for group in [as_dict(cluster.get("headGroupSpec")), *map(as_dict, as_list(cluster.get("workerGroupSpecs")))]:
        if as_dict(group.get("template")).get("spec") is t.spec:
            return "plasma-directory" not in as_dict(group.get("rayStartParams"))
    return False


@rule("GF013")
def small_dev_shm(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        gpus = t.gpu_request()
        why = f"{gpus:g} GPUs in one pod" if gpus > 1 else (_training(t) if gpus > 0 else None)
        if why is None or t.spec.get("hostIPC") is True:
            continue
        volumes = _volumes(t)
        gpu_containers = [c for c in t.containers(init=False) if container_gpus(c) > 0] or list(t.containers())
        if _kuberay_mounts_shm(t):
            first = next(t.containers(init=False), None)
            gpu_containers = [c for c in gpu_containers if c is not first]
        for c in gpu_containers:
            where = f"container {_name(c)!r} ({t.path}) runs {why}"
            fix = (
                "mount an emptyDir {medium: Memory} at /dev/shm in every GPU container, with no sizeLimit or one of at"
                " least 1Gi (it counts against the pod's memory limit), or set hostIPC: true"
            )
            mount = next((v for m, v in _mounts(c) if m == "/dev/shm"), None)
            source = volumes.get(mount or "", {})
            empty_dir, host = as_dict(source.get("emptyDir")), as_dict(source.get("hostPath"))
            if mount is None:
                yield Hit(
                    f"{where} with no /dev/shm of its own: the container runtime's default /dev/shm is 64 MiB, and"
                    ' NCCL and PyTorch DataLoader workers fail with "Bus error" or "unable to allocate shared memory"'
                    " once it is full",
                    fix,
                    t.obj,
                    severity=Severity.critical if gpus > 1 else None,
                )
            elif "emptyDir" in source and empty_dir.get("medium") == "Memory":
                size = exact_quantity(empty_dir.get("sizeLimit")) if empty_dir.get("sizeLimit") is not None else None
                if size is not None and size < GIB:
                    yield Hit(
                        f"{where} with a /dev/shm of sizeLimit {empty_dir['sizeLimit']} (under 1 GiB): NCCL and"
                        ' PyTorch DataLoader workers fail with "Bus error" or "unable to allocate shared memory" once'
                        " it is full",
                        fix,
                        t.obj,
                    )
            elif source and not ("hostPath" in source and posixpath.normpath(str(host.get("path", ""))) == "/dev/shm"):
                kind = next(iter(source))  # a volume not declared here may come from an operator: not judged
                yield Hit(
                    f"{where} with /dev/shm on {kind} ({mount}), which is not memory-backed: shared-memory traffic"
                    " goes through the node's disk",
                    fix,
                    t.obj,
                )


@rule("GF014")
def harmful_nccl_env(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        for c in t.containers():
            for found in lint_env(_env(c)):
                setting = f"{found.var}={found.value}"
                said = found.message if found.message.startswith(setting) else f"{setting}: {found.message}"
                yield Hit(
                    f"container {_name(c)!r} ({t.path}) sets {said}",
                    found.fix,
                    t.obj,
                    severity=found.severity,
                )


def _cpu_meant(c: dict[str, Any]) -> bool:
    cpu = signals().cpu_only
    env = _env(c)
    return bool(
        _found(cpu.images, _image(c))
        or _found(cpu.commands, " " + _command_line(c))
        or any(e.name in env and _regex(e.value).search(env[e.name]) for e in cpu.env)
    )


def _gpu_signals(c: dict[str, Any]) -> list[tuple[str, bool]]:
    """What in a container says GPU work, each with whether it says so on its own."""
    s, line = signals(), _command_line(c)
    out = [(f"image {c.get('image')}", True) for _ in _found(s.gpu_images, _image(c))][:1]
    out += [(f"command {p.what}", p.alone) for p in s.gpu_commands if _regex(p.pattern).search(line)]
    return out + [(f"env {var}", True) for var in _env(c) if _found(s.gpu_env, var)][:3]


@rule("GF018")
def gpu_work_without_gpu(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        if _uses_accelerators(t) or "headGroupSpec" in t.path or (t.obj.kind == "MPIJob" and "Launcher" in t.path):
            continue
        containers = list(t.containers())
        runtime_gpus = any(
            _env(c).get("NVIDIA_VISIBLE_DEVICES", "void") not in ("", "void", "none") for c in containers
        )
        if runtime_gpus or any(_cpu_meant(c) for c in containers):
            continue
        found = [(c, why) for c in containers if (why := _gpu_signals(c))]
        every = [alone for _, why in found for _, alone in why]
        if not any(every) and len(every) < 2:  # nothing, or one signal that says too little alone
            continue
        shown = "; ".join(f"{_name(c)!r}: {', '.join(text for text, _ in why)}" for c, why in found)
        # the vendor the image is built for (a ROCm or Gaudi image asks for its own vendor's devices)
        vendor = next((st[0] for c, _ in found if (st := image_stack(str(c.get("image") or "")))), "nvidia")
        alternatives = "or a MIG slice, or a DRA resourceClaim" if vendor == "nvidia" else "or a DRA resourceClaim"
        yield Hit(
            f"{_pods(t)} looks like GPU work ({shown}) but asks for no GPU, MIG slice or other accelerator and"
            " holds no DRA claim: the silent CPU-only run (often 100x slower), or an inference server that fails at"
            " start looking for a device",
            f"add resources.limits {{{get_vendor(vendor).resource}: N}} ({alternatives}); for a deliberate CPU run"
            ' use a CPU image (a -cpu tag) or set CUDA_VISIBLE_DEVICES=""',
            t.obj,
        )


# --- GF021: model weights downloaded at every start ----------------------------------------------------------------


def _server(c: dict[str, Any]) -> InferenceServer | None:
    image, line = _image(c), _command_line(c)
    for server in signals().inference_servers:
        if any(_regex(p).search(image) for p in server.images) or any(_regex(p).search(line) for p in server.commands):
            return server
    return None


def _model_ref(server: InferenceServer, c: dict[str, Any], tokens: list[str]) -> str | None:
    """The model the server loads ("" for its default model), or None when the command is not the server's own."""
    env = _env(c)
    ref = _flag(tokens, server.model_flags)
    if ref is None and server.model_after:
        for i, token in enumerate(tokens[:-1]):
            if token == server.model_after and i > 0 and tokens[i - 1].endswith("vllm"):
                ref = tokens[i + 1] if not tokens[i + 1].startswith("-") else None
        if ref is None and not as_list(c.get("command")) and tokens and not tokens[0].startswith("-"):
            ref = tokens[0]  # args after the image's own `vllm serve` entrypoint
    ref = ref if ref is not None else next((env[k] for k in server.model_env if env.get(k)), None)
    if ref is not None:
        return ref
    own = not as_list(c.get("command")) or any(_regex(p).search(_command_line(c)) for p in server.commands)
    return "" if own else None


def _cache_dirs(server: InferenceServer, c: dict[str, Any], tokens: list[str]) -> tuple[str, str, list[str]]:
    """(the directory the weights go to, where a volume for it is usually mounted, other directories a volume may
    cover instead)."""
    env = _env(c)
    if server.cache == "nim":
        nim = env.get(server.cache_env or "") or server.cache_default or "/opt/nim/.cache"
        return nim, nim, []
    extra = [env["TRANSFORMERS_CACHE"]] if env.get("TRANSFORMERS_CACHE") else []
    given = _flag(tokens, server.cache_flags) or env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if given:
        return given, given, extra
    home = env.get("HF_HOME") or server.cache_default
    if not home:
        home = posixpath.join(
            env.get("XDG_CACHE_HOME") or posixpath.join(env.get("HOME") or "/root", ".cache"), "huggingface"
        )
    return posixpath.join(home, "hub"), home, extra


def _hits_for(t: PodTemplate, c: dict[str, Any], server: InferenceServer) -> Iterator[Hit]:
    env, tokens = _env(c), _tokens(c)
    where = f"container {_name(c)!r} ({t.path}) runs {server.name}"
    idle = "idle GPUs" if t.gpu_request() > 0 else "idle accelerators"
    cost = f"every restart and every new replica downloads the weights: minutes to hours of {idle}"
    keep = (
        "mount a PersistentVolumeClaim (ReadOnlyMany or ReadWriteMany to share it between replicas) or a hostPath at"
        " {dir}, or load the model from a pre-filled volume or a model image (an image volume, a KServe modelcar)"
        + (
            "; the NIM Operator's NIMCache fills such a volume"
            if server.cache == "nim"
            else "; then set HF_HUB_OFFLINE=1 so that no start reaches the hub"
        )
    )
    if server.cache == "repository":
        remote = [r for r in _all_flags(tokens, server.model_flags) if REMOTE.match(r)]
        if remote:
            yield Hit(
                f"{where} with the model repository {', '.join(remote)}: Triton copies it to a temporary local"
                f" directory at every start: {cost}",
                "copy the repository once to a PersistentVolumeClaim (or bake it into the image) and point"
                " --model-repository at the mount",
                t.obj,
            )
        return
    if (env.get("HF_HUB_OFFLINE", "").lower() in ON) or (env.get("TRANSFORMERS_OFFLINE", "").lower() in ON):
        return
    ref = _model_ref(server, c, tokens)
    if ref is None:
        return
    if ref.startswith(("/", "./", "file://")):
        local = _covering(c, ref.removeprefix("file://"))
        if local and _volume_kind(t, local[1]) in POD_LIFETIME_VOLUMES:
            yield Hit(
                f"{where} with the model at {ref}, on {_volume_kind(t, local[1])} {local[1]!r}, which starts empty"
                f" with every pod and is filled by downloading: {cost}",
                keep.format(dir=local[0]),
                t.obj,
            )
        return
    if REMOTE.match(ref):
        yield Hit(
            f"{where} with the model read from {ref} at every start: {cost}",
            "copy the model once to a PersistentVolumeClaim and serve it from the mount, or package it as a model"
            " image (an image volume, a KServe modelcar)",
            t.obj,
        )
        return
    cache_dir, mount_at, also = _cache_dirs(server, c, tokens)
    model = ref.removeprefix("hf://") or ("its model" if server.cache == "nim" else "its default model")
    covered = [m for d in [cache_dir, *also] if (m := _covering(c, d))]
    home_guess = cache_dir.startswith("/root/.cache/") and not env.get("HOME")
    if not covered and home_guess:  # the user's home is not known: any ~/.cache/huggingface mount counts
        covered = [(p, v) for p, v in _mounts(c) if re.search(r"/\.cache(/huggingface(/hub)?)?$", p)]
    hub = "" if server.cache == "nim" else " and hub rate limits"
    if not covered:
        yield Hit(
            f"{where} with {model} and no volume keeps its cache ({cache_dir}): {cost}{hub}",
            keep.format(dir=mount_at),
            t.obj,
        )
    elif all(_volume_kind(t, v) in POD_LIFETIME_VOLUMES for _, v in covered):
        path, volume = covered[0]
        yield Hit(
            f"{where} with {model}, its cache ({cache_dir}) on {_volume_kind(t, volume)} {volume!r}, which lives and"
            f" dies with the pod: every rescheduled pod and every new replica downloads the weights again: minutes to"
            f" hours of {idle}{hub}",
            keep.format(dir=path),
            t.obj,
        )


_KSERVE_MODELS = ("model", "huggingface", "pytorch", "tensorflow", "triton", "onnx", "sklearn", "xgboost", "lightgbm")


def _inference_service(obj: K8sObject) -> Iterator[Hit]:
    predictor = as_dict(obj.spec.get("predictor"))
    replicas = predictor["minReplicas"] if isinstance(predictor.get("minReplicas"), int) else 1
    if as_list(predictor.get("containers")):
        template = PodTemplate(obj, "spec.predictor", predictor, {}, {}, replicas)
        if _uses_accelerators(template):
            for c in template.containers(init=False):
                server = _server(c)
                if server:
                    yield from _hits_for(template, c, server)
    for key in _KSERVE_MODELS:
        model = as_dict(predictor.get(key))
        probe = PodTemplate(obj, f"spec.predictor.{key}", {"containers": [model]}, {}, {}, replicas)
        if not model or not _uses_accelerators(probe):
            continue
        uris = [str(model["storageUri"])] if model.get("storageUri") else []
        uris += [str(as_dict(u).get("uri")) for u in as_list(model.get("storageUris")) if as_dict(u).get("uri")]
        downloaded = [u for u in uris if not u.startswith(("pvc://", "oci://"))]
        if downloaded:
            yield Hit(
                f"spec.predictor.{key} serves {', '.join(downloaded)}: KServe's storage initializer downloads it into"
                " every pod at start: every restart and every new replica downloads the weights: minutes to hours of"
                " idle GPUs",
                "serve it from a PersistentVolumeClaim filled once (storageUri: pvc://<claim>/<path>), package it as a"
                " modelcar (oci://), or cache it on the nodes with a KServe LocalModelCache",
                obj,
            )
        elif not uris:
            hf = InferenceServer(
                name="the KServe runtime", model_flags=("--model_id", "--model"), cache="huggingface", source=""
            )
            if _flag(_tokens(model), hf.model_flags) is not None:
                yield from _hits_for(PodTemplate(obj, f"spec.predictor.{key}", predictor, {}, {}, 1), model, hf)


@rule("GF021", reads=("InferenceService",))
def model_downloaded_at_start(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        if t.obj.kind not in INFERENCE_KINDS or not _uses_accelerators(t):
            continue
        for c in t.containers(init=False):
            server = _server(c)
            if server:
                yield from _hits_for(t, c, server)
    for obj in ctx.of_kind("InferenceService"):
        yield from _inference_service(obj)
