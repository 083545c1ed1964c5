"""Rules on sharing GPUs between pods and on keeping GPU partitions: what time-slicing and MPS leave unisolated
and which tenants end up sharing, what dcgm-exporter's pod mapping makes of a shared GPU, and whether a MIG
layout comes back after a reboot.

Sharing is read from the NVIDIA device plugin's config (a standalone config document, or the configs held in a
ConfigMap's data, as the GPU Operator's `devicePlugin.config.name` points at) and from the labels GPU Feature
Discovery puts on nodes (`nvidia.com/gpu.sharing-strategy`, `nvidia.com/gpu.replicas`, a `-SHARED` product)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpufleet import yaml_input
from gpufleet.doctor.facts import NodeFacts
from gpufleet.doctor.objects import K8sObject, PodTemplate, as_dict, as_list, quantity, resources
from gpufleet.doctor.rules.base import Context, Hit, rule
from gpufleet.errors import GpufleetError
from gpufleet.model import Severity

TIME_SLICING, MPS = "time-slicing", "mps"
SHOWN = 8  # names listed in a message before "and N more"
_PLUGIN_CONFIG_HINT = ("sharing", "timeSlicing", "mps")  # cheap test before parsing a ConfigMap value


def listed(names: Iterable[str], limit: int = SHOWN) -> str:
    items = list(dict.fromkeys(names))
    shown = ", ".join(items[:limit])
    return f"{shown} and {len(items) - limit} more" if len(items) > limit else shown


# -- where GPUs are shared ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedResource:
    name: str  # as configured: nvidia.com/gpu, nvidia.com/mig-1g.10gb
    replicas: int
    requested_as: frozenset[str]  # the resource names a pod asks for to get a replica


@dataclass(frozen=True, slots=True)
class SharingConfig:
    """A device-plugin config that hands out replicas of GPUs, and where it was found."""

    strategy: str
    shared: tuple[SharedResource, ...]
    fail_requests_greater_than_one: bool
    where: str  # "device-plugin config" or "ConfigMap gpu-operator/time-slicing-config, key 'any'"
    file: str
    line: int
    obj: K8sObject | None = None

    @property
    def requested_as(self) -> set[str]:
        return {name for r in self.shared for name in r.requested_as}

    def describe(self) -> str:
        parts = []
        for r in self.shared:
            shown = sorted(n for n in r.requested_as if n != r.name)
            renamed = f" (asked for as {' or '.join(shown)})" if shown else ""
            parts.append(f"{r.name} x{r.replicas}{renamed}")
        return ", ".join(parts)


@dataclass(slots=True)
class SharedNodes:
    """Nodes whose GPU Feature Discovery labels say they share GPUs the same way."""

    strategy: str
    evidence: str  # the labels that say so
    nodes: list[NodeFacts] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]


def _replicas(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


def parse_sharing(
    data: dict[str, object], where: str, file: str, line: int, obj: K8sObject | None
) -> SharingConfig | None:
    """The sharing a device-plugin config sets up, or None when it hands out whole GPUs. MPS wins over
    time-slicing when both replicate something, as the plugin decides (`Sharing.SharingStrategy`)."""
    sharing = as_dict(data.get("sharing"))
    for strategy, key, fail_default in ((MPS, "mps", True), (TIME_SLICING, "timeSlicing", False)):
        section = as_dict(sharing.get(key))
        rename_by_default = section.get("renameByDefault") is True
        shared = []
        for item in as_list(section.get("resources")):
            item = as_dict(item)
            name, replicas = str(item.get("name") or ""), _replicas(item.get("replicas"))
            if not name or replicas < 2:
                continue
            # Current plugins ignore `rename` (renameByDefault gives <name>.shared); older ones honoured it.
            asked = {f"{name}.shared" if rename_by_default else name}
            if isinstance(item.get("rename"), str) and item["rename"]:
                asked.add(item["rename"])
            shared.append(SharedResource(name, replicas, frozenset(asked)))
        if shared:
            fail = section.get("failRequestsGreaterThanOne")
            return SharingConfig(
                strategy, tuple(shared), fail if isinstance(fail, bool) else fail_default, where, file, line, obj
            )
    return None


def _is_plugin_config(data: dict[str, object]) -> bool:
    """A device-plugin config (api/config/v1): `version` is required, `sharing` is what these rules read."""
    return "version" in data and "sharing" in data


def sharing_configs(ctx: Context) -> list[SharingConfig]:
    """Every device-plugin config in the input that shares GPUs: standalone documents, and the configs held in
    ConfigMaps (each data key is one config, selected per node by the nvidia.com/device-plugin.config label)."""
    out = []
    for doc in ctx.configs:
        if _is_plugin_config(doc.data):
            found = parse_sharing(doc.data, "device-plugin config", doc.file, doc.line, None)
            if found:
                out.append(found)
    for cm in ctx.of_kind("ConfigMap"):
        for key, text in as_dict(cm.data.get("data")).items():
            if not isinstance(text, str) or not any(hint in text for hint in _PLUGIN_CONFIG_HINT):
                continue
            try:
                data = yaml_input.load(text, f"{cm.ref} key {key}")
            except GpufleetError:
                continue  # not YAML: not a config the plugin could read either
            if isinstance(data, dict) and _is_plugin_config(data):
                where = f"ConfigMap {cm.namespace + '/' if cm.namespace else ''}{cm.name}, key {key!r},"
                found = parse_sharing(data, where, cm.doc.file, cm.doc.line, cm)
                if found:
                    out.append(found)
    return out


def _says_shared(key: str, value: str) -> bool:
    if not key.startswith("nvidia.com/"):
        return False
    if key.endswith(".replicas"):
        return quantity(value) > 1
    return key.endswith(".product") and value.endswith("-SHARED")


def node_sharing(node: NodeFacts) -> tuple[str, str] | None:
    """(strategy, the labels that show it) when GPU Feature Discovery labels the node's GPUs as shared."""
    labels = node.labels
    for key, value in sorted(labels.items()):
        if not key.startswith("nvidia.com/") or not key.endswith(".sharing-strategy"):
            continue
        if value in (TIME_SLICING, MPS):
            resource = key.removesuffix(".sharing-strategy")
            replicas = labels.get(f"{resource}.replicas")
            shown = f"{key}={value}" + (f", {resource}.replicas={replicas}" if replicas else "")
            return value, shown
    # GFD before the sharing-strategy label (device plugin < 0.15): replicas > 1 could only mean time-slicing.
    legacy = [f"{key}={value}" for key, value in sorted(labels.items()) if _says_shared(key, value)]
    return (TIME_SLICING, ", ".join(legacy)) if legacy else None


def shared_nodes(ctx: Context) -> list[SharedNodes]:
    groups: dict[tuple[str, str], SharedNodes] = {}
    for node in ctx.facts.nodes.values():
        found = node_sharing(node)
        if found:
            groups.setdefault(found, SharedNodes(*found)).nodes.append(node)
    return list(groups.values())


# -- who shares ---------------------------------------------------------------------------------------------------


def _asks_for(template: PodTemplate, names: set[str] | None) -> bool:
    """Whether a container asks for one of `names` (None: any NVIDIA GPU resource, shared or MIG)."""
    for c in template.containers():
        for section in ("limits", "requests"):
            for name in resources(c, section):
                wanted = (
                    (name in names) if names is not None else name.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))
                )
                if wanted:
                    return True
    return False


def _finished(obj: K8sObject) -> bool:
    return as_dict(obj.data.get("status")).get("phase") in ("Succeeded", "Failed")


def tenants(templates: list[PodTemplate], who: str) -> str:
    """Which namespaces (and workloads) the pods sharing GPUs belong to, for a finding's message."""
    namespaces = sorted({t.obj.namespace or "(no namespace)" for t in templates})
    workloads = listed(t.obj.ref for t in templates)
    if len(namespaces) > 1:
        return f"tenants that {who}: namespaces {listed(namespaces)} ({workloads})"
    return (
        f"in the input only namespace {namespaces[0]} has pods that {who} ({workloads}), but every pod given a"
        " replica is exposed the same way"
    )


def config_tenants(ctx: Context, config: SharingConfig) -> str:
    names = config.requested_as
    users = [t for t in ctx.templates if not _finished(t.obj) and _asks_for(t, names)]
    if users:
        return tenants(users, f"ask for {' or '.join(sorted(names))} and so get replicas where this config applies")
    return (
        f"no workload in the input asks for {' or '.join(sorted(names))}, so the tenants cannot be named (add"
        " `kubectl get pods -A -o json` to the input to name them)"
    )


def node_tenants(ctx: Context, group: SharedNodes) -> str:
    on = set(group.names)
    users = [
        t
        for t in ctx.templates
        if t.obj.kind == "Pod" and t.spec.get("nodeName") in on and not _finished(t.obj) and _asks_for(t, None)
    ]
    if users:
        return tenants(users, "share these GPUs")
    return (
        "no GPU pod in the input runs on them, so the tenants cannot be named (add `kubectl get pods -A -o json` to"
        " the input to name them)"
    )


def _on_config(config: SharingConfig, message: str, fix: str) -> Hit:
    if config.obj is not None:
        return Hit(message, fix, config.obj)
    return Hit(message, fix, file=config.file, line=config.line, object_ref="DevicePluginConfig")


def _on_nodes(group: SharedNodes, message: str, fix: str) -> Hit:
    first = group.nodes[0]
    return Hit(message, fix, file=first.source, object_ref=f"Node/{first.name}")


# -- the rules ----------------------------------------------------------------------------------------------------

_TIME_SLICING_RISK = (
    "replicas of one GPU are handed to different pods with nothing isolating them: each pod can use all of the"
    " GPU's memory (one can push the others out of memory), and they run in one fault domain (if one crashes the"
    " GPU, the others' work on it fails too)"
)
_TIME_SLICING_FIX = (
    "keep tenants that must not affect each other off shared GPUs: give them MIG instances (hardware memory and"
    " fault isolation), or keep time-sliced nodes for one tenant (a per-node config through the"
    " nvidia.com/device-plugin.config label, with a taint that only that tenant's pods tolerate)"
)


@rule("GF005")
def time_slicing(ctx: Context) -> Iterator[Hit]:
    for config in sharing_configs(ctx):
        if config.strategy != TIME_SLICING:
            continue
        message = f"{config.where} time-slices GPUs ({config.describe()} replicas per GPU): {_TIME_SLICING_RISK}; "
        message += config_tenants(ctx, config)
        fix = _TIME_SLICING_FIX
        if not config.fail_requests_greater_than_one:
            message += (
                ". failRequestsGreaterThanOne is false: a pod asking for 2 or more replicas is admitted but gets no"
                " more compute than a pod asking for 1, only access to a GPU others share"
            )
            fix += "; set sharing.timeSlicing.failRequestsGreaterThanOne: true so such requests are refused"
        yield _on_config(config, message, fix)
    for group in shared_nodes(ctx):
        if group.strategy != TIME_SLICING:
            continue
        message = (
            f"nodes {listed(group.names)} time-slice their GPUs (GPU Feature Discovery labels {group.evidence}):"
            f" {_TIME_SLICING_RISK}; {node_tenants(ctx, group)}"
        )
        yield _on_nodes(group, message, _TIME_SLICING_FIX)


_MPS_RISK = (
    "MPS caps each client's share of memory and compute but does not isolate faults: a fatal GPU fault in one"
    " client (an Xid that takes down the MPS server or its context) is reported to every client on that GPU and"
    " ends their work too, and the GPU takes no new clients until they have all exited"
)
_MPS_FIX = (
    "put tenants that must not take each other down on MIG instances (hardware fault isolation), or keep MPS nodes"
    " for one tenant's pods (a per-node config through the nvidia.com/device-plugin.config label, with a taint"
    " that only that tenant's pods tolerate)"
)


@rule("GF006")
def mps_sharing(ctx: Context) -> Iterator[Hit]:
    for config in sharing_configs(ctx):
        if config.strategy == MPS:
            message = f"{config.where} shares GPUs through MPS ({config.describe()} clients per GPU): {_MPS_RISK}; "
            yield _on_config(config, message + config_tenants(ctx, config), _MPS_FIX)
    for group in shared_nodes(ctx):
        if group.strategy == MPS:
            message = (
                f"nodes {listed(group.names)} share their GPUs through MPS (GPU Feature Discovery labels"
                f" {group.evidence}): {_MPS_RISK}; {node_tenants(ctx, group)}"
            )
            yield _on_nodes(group, message, _MPS_FIX)


# -- GF015: dcgm-exporter on shared GPUs --------------------------------------------------------------------------

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, which the exporter's flags use
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
KUBERNETES_FLAG, KUBERNETES_ENV = "kubernetes", "DCGM_EXPORTER_KUBERNETES"
VIRTUAL_FLAG, VIRTUAL_ENV = "kubernetes-virtual-gpus", "KUBERNETES_VIRTUAL_GPUS"


def _bool(text: str) -> bool | None:
    return True if text in _TRUE else False if text in _FALSE else None


def exporter_setting(args: list[str], env: dict[str, str], flag: str, variable: str, short: str = "") -> bool | None:
    """A boolean dcgm-exporter option as the exporter resolves it: a flag on the command line, else its environment
    variable, else off. None when the value cannot be read (the exporter would refuse to start)."""
    names = {flag, short} - {""}
    for arg in args:
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name in names:
            return _bool(value) if eq else True
    if variable in env:
        return _bool(env[variable].strip())
    return False


@dataclass(frozen=True, slots=True)
class Exporter:
    what: str  # for the message
    obj: K8sObject
    kubernetes: bool | None
    virtual_gpus: bool | None


def _container_env(container: dict[str, object]) -> dict[str, str]:
    """Plain env values (valueFrom ones cannot be known here); a YAML boolean reads as Go would print it."""
    out = {}
    for item in as_list(container.get("env")):
        value = as_dict(item).get("value")
        if "name" in as_dict(item) and isinstance(value, str | int | bool):
            out[str(item["name"])] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def exporters(ctx: Context) -> list[Exporter]:
    """dcgm-exporter containers in the input; without any, the one a ClusterPolicy has the GPU Operator deploy
    (its DaemonSet sets DCGM_EXPORTER_KUBERNETES=true; spec.dcgmExporter.env and args override it)."""
    out = []
    for template in ctx.templates:
        for c in template.containers(init=False):
            if "dcgm-exporter" not in str(c.get("image", "")):
                continue
            args = [a for a in [*as_list(c.get("command")), *as_list(c.get("args"))] if isinstance(a, str)]
            env = _container_env(c)
            out.append(
                Exporter(
                    f"dcgm-exporter (container {c.get('name', '?')!r} of {template.obj.ref})",
                    template.obj,
                    exporter_setting(args, env, KUBERNETES_FLAG, KUBERNETES_ENV, "k"),
                    exporter_setting(args, env, VIRTUAL_FLAG, VIRTUAL_ENV),
                )
            )
    if out:
        return out
    for policy in ctx.gpu_operator_policies:
        spec = as_dict(policy.spec.get("dcgmExporter"))
        if spec.get("enabled") is False:
            continue
        args = [a for a in as_list(spec.get("args")) if isinstance(a, str)]
        env = {KUBERNETES_ENV: "true", **_container_env(spec)}
        out.append(
            Exporter(
                f"the dcgm-exporter that {policy.ref} deploys",
                policy,
                exporter_setting(args, env, KUBERNETES_FLAG, KUBERNETES_ENV, "k"),
                exporter_setting(args, env, VIRTUAL_FLAG, VIRTUAL_ENV),
            )
        )
    return out


def sharing_evidence(ctx: Context) -> str:
    found = [f"{c.where} sets up {c.strategy}" for c in sharing_configs(ctx)]
    found += [f"nodes {listed(g.names, 4)} use {g.strategy} ({g.evidence})" for g in shared_nodes(ctx)]
    return "; ".join(found)


@rule("GF015", reads=("ClusterPolicy",))
def dcgm_exporter_on_shared_gpus(ctx: Context) -> Iterator[Hit]:
    evidence = sharing_evidence(ctx)
    if not evidence:
        return
    for exporter in exporters(ctx):
        if not exporter.kubernetes:
            continue  # no pod mapping (or unreadable): GPU series carry no pod labels to get wrong
        if exporter.virtual_gpus is False:
            yield Hit(
                f"{exporter.what} maps GPU metrics to pods (--kubernetes) on shared GPUs ({evidence}), without"
                " --kubernetes-virtual-gpus: it keeps one pod per GPU, so a shared GPU's series carry the labels of"
                " whichever sharing pod the kubelet listed last; the other pods' use is counted against it, and the"
                " pod labels change (a new series each time) as the sharing pods come and go",
                "set KUBERNETES_VIRTUAL_GPUS=true (flag --kubernetes-virtual-gpus, dcgm-exporter 4.1.1-4.0.3 and"
                " later; with the GPU Operator, in ClusterPolicy spec.dcgmExporter.env) so every pod on a shared GPU"
                " gets its own series, marked with a vgpu label; or turn the pod mapping off"
                " (DCGM_EXPORTER_KUBERNETES=false) and attribute GPUs to pods at query time with an info metric"
                " joined on the GPU UUID (such as gpufleet_gpu_pod_info), which adds no GPU series as pods change",
                exporter.obj,
            )
        elif exporter.virtual_gpus:
            yield Hit(
                f"{exporter.what} writes one series per sharing pod (--kubernetes-virtual-gpus) on shared GPUs"
                f" ({evidence}): each pod's series carries the whole GPU's value (only DCGM_FI_DEV_GPU_UTIL and"
                " DCGM_FI_DEV_FB_USED are split per process, from dcgm-exporter 4.5.3-4.8.2), so a sum over pods or"
                " namespaces counts a GPU once per pod, and every pod start adds series",
                "aggregate GPU-level metrics by GPU (UUID) before summing per tenant, e.g. max by (UUID) (...), and"
                " use the per-process DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED series for per-pod shares",
                exporter.obj,
                severity=Severity.info,
            )


# -- GF022: MIG layout not persisted ------------------------------------------------------------------------------

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"


def mig_in_use(node: NodeFacts) -> str:
    """Why the node's GPUs are in MIG mode with instances, or "" when nothing says so."""
    mig_resources = sorted(k for k, v in node.capacity.items() if k.startswith("nvidia.com/mig-") and v > 0)
    if mig_resources:
        return f"capacity {listed(mig_resources, 3)}"
    labels = node.labels
    if labels.get(MIG_STRATEGY_LABEL) == "single":
        product = labels.get("nvidia.com/gpu.product", "")
        if "-MIG-" in product or "nvidia.com/gpu.slices.gi" in labels:
            return f"{MIG_STRATEGY_LABEL}=single, nvidia.com/gpu.product={product or '?'}"
    config = labels.get(MIG_CONFIG_LABEL)
    if config and config != "all-disabled":
        return f"{MIG_CONFIG_LABEL}={config}"
    return ""


def mig_manager_elsewhere(ctx: Context) -> bool:
    """Whether the input shows something that re-applies MIG layouts: a MIG manager workload, or a mig-parted
    config (standalone, or in a ConfigMap such as default-mig-parted-config or <node>-mig-config)."""
    for template in ctx.templates:
        for c in template.containers():
            if "mig-manager" in str(c.get("image", "")) or "mig-manager" in str(c.get("name", "")):
                return True
    if any("mig-configs" in doc.data for doc in ctx.configs):
        return True
    for cm in ctx.of_kind("ConfigMap"):
        for text in as_dict(cm.data.get("data")).values():
            if isinstance(text, str) and "mig-configs" in text:
                return True
    return False


_MIG_LOSS = (
    "MIG mode survives a reboot but the GPU and compute instances do not: after a GPU reset or a reboot the GPUs"
    " come back in MIG mode with no instances, the device plugin has no MIG devices to advertise, and pods asking"
    " for them stay Pending"
)
_MIG_FIX = (
    "enable the GPU Operator's MIG manager (ClusterPolicy spec.migManager.enabled: true) and label each MIG node"
    " with the layout to keep (kubectl label node NODE nvidia.com/mig.config=all-1g.10gb --overwrite; it reports"
    " nvidia.com/mig.config.state=success once applied), or run mig-parted's nvidia-mig-manager.service on the"
    " hosts so the layout is applied again at every boot"
)


@rule("GF022", reads=("ClusterPolicy",))
def mig_not_persisted(ctx: Context) -> Iterator[Hit]:
    mig_nodes = {n.name: why for n in ctx.facts.nodes.values() if (why := mig_in_use(n))}
    policies = ctx.gpu_operator_policies
    for policy in policies:
        if as_dict(policy.spec.get("migManager")).get("enabled") is not False:
            continue
        strategy = as_dict(policy.spec.get("mig")).get("strategy")
        if mig_nodes:
            shown = listed(f"{name} ({why})" for name, why in mig_nodes.items())
            yield Hit(
                f"{policy.ref} turns the MIG manager off (spec.migManager.enabled: false) while nodes use MIG:"
                f" {shown}. {_MIG_LOSS}",
                _MIG_FIX,
                policy,
            )
        elif strategy == "mixed" and not any(n.labels for n in ctx.facts.nodes.values()):
            yield Hit(
                f"{policy.ref} sets spec.mig.strategy: mixed but turns the MIG manager off"
                f" (spec.migManager.enabled: false): unless the hosts re-create the MIG layout themselves, {_MIG_LOSS}",
                _MIG_FIX,
                policy,
            )
    if policies or not mig_nodes or mig_manager_elsewhere(ctx):
        return  # a ClusterPolicy says whether its MIG manager runs (handled above)
    unmanaged = [n for n in ctx.facts.nodes.values() if n.name in mig_nodes and MIG_CONFIG_LABEL not in n.labels]
    if unmanaged:
        shown = listed(f"{n.name} ({mig_nodes[n.name]})" for n in unmanaged)
        first = unmanaged[0]
        yield Hit(
            f"nodes {shown} use MIG, but none has the {MIG_CONFIG_LABEL} label the MIG manager works from, and the"
            f" input holds no MIG manager or mig-parted config: {_MIG_LOSS}",
            _MIG_FIX,
            file=first.source,
            object_ref=f"Node/{first.name}",
        )
