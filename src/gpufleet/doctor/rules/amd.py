"""Rules on AMD Instinct GPUs: ROCm's device files given by hand instead of through the device plugin, the device
plugin and the DRA driver enabled together, and partition resources (the device plugin's mixed naming) that no
node offers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gpufleet.doctor.accelerators import AMD_PREFIX, amd_partition_resources, image_stack, is_amd_partition, signals
from gpufleet.doctor.facts import NodeFacts
from gpufleet.doctor.objects import (
    K8sObject,
    PodTemplate,
    as_dict,
    as_list,
    container_accelerators,
    container_env,
    host_mounts,
    host_path_reaches,
    mapping,
    node_selection_matches,
    pod_templates,
    privileged,
)
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.doctor.rules.vendors import plugin_role, pods_of
from gpufleet.model import Severity

PARTITION_LABEL = "amd.com/gpu.compute-memory-partition"
_DRA_IMAGE = re.compile(r"(^|/)rocm/k8s-gpu-dra-driver([:@]|$)")


def _name(c: dict[str, Any]) -> str:
    return str(c.get("name", "?"))


def _amd_asked(c: dict[str, Any]) -> dict[str, float]:
    return {n: a for n, a in container_accelerators(c).items() if n.startswith(AMD_PREFIX)}


# --- GF024: ROCm device files by hand --------------------------------------------------------------------------------


def _says_rocm(c: dict[str, Any]) -> bool:
    s = signals()
    stack = image_stack(str(c.get("image") or ""))
    line = " ".join(str(p) for p in [*as_list(c.get("command")), *as_list(c.get("args"))])
    return bool(
        (stack and stack[0] == "amd")
        or any(re.match(s.rocm_env, var) for var in container_env(c))
        or re.search(s.rocm_commands, line)
    )


def _device_files(t: PodTemplate, c: dict[str, Any]) -> tuple[bool, bool, bool]:
    """(the host's /dev/kfd is mounted at /dev/kfd, the host's /dev/dri or a render node under /dev/dri, all of the
    host's /dev at /dev)."""
    mounts = host_mounts(t, c)
    kfd = mounts.get("/dev/kfd") == "/dev/kfd"
    dri = any(
        (inside == "/dev/dri" or inside.startswith("/dev/dri/"))
        and (host == "/dev/dri" or host.startswith("/dev/dri/"))
        for inside, host in mounts.items()
    )
    return kfd, dri, host_path_reaches(mounts, "/dev") == "/dev"


_PLUGIN_WAY = (
    "ask for the GPUs instead: resources.limits: {amd.com/gpu: N} (the device plugin then passes /dev/kfd and the"
    " GPUs' render nodes, and the scheduler counts them), and drop the hostPath volumes"
)


@rule("GF024")
def rocm_devices_by_hand(ctx: Context) -> Iterator[Hit]:
    for t in ctx.templates:
        if t.obj.kind == "DaemonSet":
            continue  # node agents (plugin, labeller, exporter): GF023's
        for c in t.containers():
            if _amd_asked(c):
                continue  # the device plugin passes /dev/kfd and the render nodes itself
            kfd, dri, whole = _device_files(t, c)
            if not (kfd or dri or whole) or (not kfd and not _says_rocm(c)):
                continue  # /dev/dri or /dev alone is also video's and Intel GPUs'
            where = f"container {_name(c)!r} ({t.path})"
            if privileged(c):
                yield Hit(
                    f"{where} is privileged and mounts the host's AMD device files ({_shown(kfd, dri, whole)}) without"
                    " asking for amd.com/gpu: it sees every GPU on the node, the scheduler never counted them, and"
                    " pods given those GPUs by the device plugin share them with it",
                    _PLUGIN_WAY,
                    t.obj,
                    severity=Severity.warning,
                )
            elif (kfd or whole) and (dri or whole):
                yield Hit(
                    f"{where} mounts the host's {_shown(kfd, dri, whole)} by hostPath without asking for amd.com/gpu:"
                    " a hostPath does not open the device cgroup, so the unprivileged container cannot open them"
                    " (Operation not permitted) and ROCm finds no GPU",
                    _PLUGIN_WAY,
                    t.obj,
                )
            else:
                missing = "/dev/kfd" if not kfd else "/dev/dri"
                yield Hit(
                    f"{where} mounts {_shown(kfd, dri, whole)} but not {missing}: ROCm needs both /dev/kfd (compute"
                    " queues) and the GPU's render node under /dev/dri, so HIP reports no device and the work falls"
                    " back to the CPU or fails",
                    _PLUGIN_WAY,
                    t.obj,
                )


def _shown(kfd: bool, dri: bool, whole: bool) -> str:
    return "all of /dev" if whole else " and ".join(p for p, on in (("/dev/kfd", kfd), ("/dev/dri", dri)) if on)


# --- GF027: device plugin and DRA driver together ----------------------------------------------------------------


def _enabled(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def deviceconfig_components(obj: K8sObject) -> tuple[bool, bool]:
    """(device plugin on, DRA driver on) in an AMD GPU Operator DeviceConfig, as the operator reads them after the
    API server applies the CRD's defaults (enableDevicePlugin: true within a given devicePlugin section)."""
    plugin, dra = obj.spec.get("devicePlugin"), as_dict(obj.spec.get("draDriver"))
    plugin_on = isinstance(plugin, dict) and _enabled(plugin.get("enableDevicePlugin", True))
    return plugin_on, _enabled(dra.get("enable"))


def _selectors_meet(a: dict[str, str], b: dict[str, str]) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _node_selector(t: PodTemplate) -> dict[str, str]:
    return mapping(t.spec.get("nodeSelector"))


@rule("GF027", reads=("DeviceConfig",))
def plugin_and_dra_together(ctx: Context) -> Iterator[Hit]:
    plugins: list[tuple[K8sObject, dict[str, str]]] = []
    dras: list[tuple[K8sObject, dict[str, str]]] = []
    for obj in ctx.of_kind("DeviceConfig"):
        if obj.group != "amd.com":
            continue
        plugin_on, dra_on = deviceconfig_components(obj)
        selector = mapping(obj.spec.get("selector"))
        if plugin_on and dra_on:
            yield Hit(
                f"{obj.ref} enables both the device plugin (spec.devicePlugin.enableDevicePlugin, true by default"
                " once a devicePlugin section is given) and the DRA driver (spec.draDriver.enable): the operator"
                ' refuses it ("DRADriver and DevicePlugin cannot be enabled at the same time") and applies none of'
                " its changes",
                "keep one: spec: {devicePlugin: {enableDevicePlugin: false}, draDriver: {enable: true}} to allocate"
                " through DRA (workloads then use ResourceClaims of DeviceClass gpu.amd.com), or draDriver.enable:"
                " false to keep amd.com/gpu",
                obj,
            )
            continue
        if plugin_on and _enabled(as_dict(obj.spec.get("devicePlugin")).get("enableDevicePlugin")):
            plugins.append((obj, selector))
        if dra_on:
            dras.append((obj, mapping(as_dict(obj.spec.get("draDriver")).get("selector")) or selector))
    for obj in ctx.of_kind("DaemonSet"):
        for t in pod_templates(obj):
            roles = {plugin_role(c) for c in t.containers(init=False)}
            if "amd-plugin" in roles:
                plugins.append((obj, _node_selector(t)))
            if any(_DRA_IMAGE.search(str(c.get("image") or "").lower()) for c in t.containers(init=False)):
                dras.append((obj, _node_selector(t)))
    for plugin, plugin_nodes in plugins:
        both = [d.ref for d, dra_nodes in dras if d is not plugin and _selectors_meet(plugin_nodes, dra_nodes)]
        if both:
            yield Hit(
                f"{plugin.ref} runs the AMD device plugin on nodes where {', '.join(both)} runs the AMD DRA driver:"
                " AMD does not support both at once; each hands out the same GPUs, to pods through amd.com/gpu and to"
                " ResourceClaims through gpu.amd.com, and nothing stops one GPU from going to both",
                "run one of them per node: remove the device plugin (or disable it in the DeviceConfig) once every"
                " workload uses ResourceClaims, or disable the DRA driver; or give the two DaemonSets nodeSelectors"
                " that split the nodes",
                plugin,
            )


# --- GF031: partitions no node offers ----------------------------------------------------------------------------


def _suggest(name: str) -> str:
    fixed = AMD_PREFIX + name.removeprefix(AMD_PREFIX).lower().replace("-", "_")
    if fixed in amd_partition_resources():
        return f" (the device plugin names it {fixed})"
    return f" (the names that exist: {', '.join(sorted(amd_partition_resources()))})"


def _pinned_partition(spec: dict[str, Any]) -> set[str]:
    """The compute-memory partition modes the pod's node selection allows, or an empty set when it does not pin
    one."""
    value = as_dict(spec.get("nodeSelector")).get(PARTITION_LABEL)
    if value is not None:
        return {str(value)}
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    per_term = []
    for term in map(as_dict, as_list(required.get("nodeSelectorTerms"))):
        values = [
            {str(v) for v in as_list(e.get("values"))}
            for e in map(as_dict, as_list(term.get("matchExpressions")))
            if e.get("key") == PARTITION_LABEL and e.get("operator") == "In"
        ]
        if not values:
            return set()  # a term that leaves the mode open
        per_term.append(set.intersection(*values))
    return set().union(*per_term) if per_term else set()


def _offered(node: NodeFacts) -> dict[str, float]:
    return {
        k: node.allocatable.get(k, v)
        for k, v in node.capacity.items()
        if (k == AMD_PREFIX + "gpu" or is_amd_partition(k)) and node.allocatable.get(k, v) > 0
    }


@rule("GF031")
def amd_partition_mismatch(ctx: Context) -> Iterator[Hit]:
    amd_nodes = [n for n in ctx.facts.nodes.values() if _offered(n)]
    for t in ctx.templates:
        asked = {n: a for c in t.containers() for n, a in _amd_asked(c).items()}
        if not asked:
            continue
        partitions = {n for n in asked if n != AMD_PREFIX + "gpu"}
        for name in sorted(partitions - amd_partition_resources()):
            yield Hit(
                f"{pods_of(t)} asks for {name}, which the AMD device plugin never advertises{_suggest(name)}: it"
                " names partitions amd.com/<compute>_<memory> in lower case, for the mode pairs the GPU supports (SPX"
                " only with NPS1), so it stays Pending",
                f"ask for an existing resource{_suggest(name)}, or amd.com/gpu on nodes in the single naming strategy",
                t.obj,
            )
        pinned = _pinned_partition(t.spec)
        wanted = {n.removeprefix(AMD_PREFIX) for n in partitions}
        if pinned and wanted and not wanted & pinned:
            yield Hit(
                f"{pods_of(t)} asks for {', '.join(sorted(partitions))} but selects nodes labelled {PARTITION_LABEL}="
                f"{' or '.join(sorted(pinned))}: those nodes advertise amd.com/{' or amd.com/'.join(sorted(pinned))}"
                " instead, so it stays Pending",
                f"ask for amd.com/{sorted(pinned)[0]}, or select nodes whose {PARTITION_LABEL} is"
                f" {' or '.join(sorted(wanted))} (repartition them with AMD's DCM: a gpu-config-profile label)",
                t.obj,
            )
            continue
        yield from _against_nodes(t, asked, amd_nodes)


def _against_nodes(t: PodTemplate, asked: dict[str, float], amd_nodes: list[NodeFacts]) -> Iterator[Hit]:
    usable = [n for n in amd_nodes if node_selection_matches(t.spec, n.name, n.labels)]
    if not usable:
        return
    for name, amount in sorted(asked.items()):
        if any(_offered(n).get(name, 0.0) >= amount for n in usable):
            continue
        offered = sorted({f"{k}: {v:g}" for n in usable for k, v in _offered(n).items()})
        names = ", ".join(n.name for n in usable[:4]) + (f" and {len(usable) - 4} more" if len(usable) > 4 else "")
        yield Hit(
            f"{pods_of(t)} asks for {name}: {amount:g}, but none of the AMD nodes it may use ({names}) offers that"
            f" many; they offer {', '.join(offered)} (partition mode and naming strategy decide the resource), so it"
            f" stays Pending (Insufficient {name})",
            "ask for the resource those nodes advertise, or repartition nodes to the mode you need (AMD's DCM:"
            " kubectl label node NODE dcm.amd.com/gpu-config-profile=<profile>) and use resource_naming_strategy"
            " mixed to see each mode as amd.com/<compute>_<memory>",
            t.obj,
        )
