"""What a partition plan produces: nvidia-mig-parted config, `nvidia.com/mig.config` node labels, a device-plugin
config, the ConfigMaps that carry them, and the reconfiguration plan (nodes to drain, pods that move).

mig-parted configs are named per node layout: `all-disabled` and `all-<profile>` reuse mig-parted's default names
(`+` written as `.`) when every GPU of a node looks the same; any other mix gets a `gpufleet-<hash>` name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.catalog.mig import mig_profiles_for
from gpufleet.sched.partition.device_plugin import (
    GPU_RESOURCE,
    DevicePluginConfig,
    MigStrategy,
    build_config,
    configmap,
    mig_resource_name,
)
from gpufleet.sched.partition.planner import Counts, GpuTarget, Plan

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_PARTED_CONFIGMAP = "gpufleet-mig-parted-config"
DEVICE_PLUGIN_CONFIGMAP = "gpufleet-device-plugin-config"


def _device_filter(model: GpuModelSpec) -> str:
    """mig-parted matches GPUs by PCI device id + vendor: 0x2330 -> 0x233010DE."""
    return f"{model.pci_device_id.upper().replace('0X', '0x')}10DE"


def _layout_entry(counts: Counts | None) -> dict[str, Any]:
    if counts is None:
        return {"mig-enabled": False}
    return {"mig-enabled": True, "mig-devices": dict(counts)}


def _config_name(geometry: str, layouts: list[Counts | None], entries: list[dict[str, Any]]) -> str:
    if all(lay is None for lay in layouts):
        return "all-disabled"
    first = layouts[0]
    if first is not None and len(first) == 1 and all(lay == first for lay in layouts):
        profile, n = first[0]
        if n == mig_profiles_for(geometry)[profile].max_count:
            return "all-" + profile.replace("+", ".")
    text = yaml.safe_dump(entries, sort_keys=True)  # same content, same name, whatever the node
    return "gpufleet-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def node_layouts(plan: Plan) -> dict[str, list[GpuTarget]]:
    out: dict[str, list[GpuTarget]] = {}
    for t in plan.targets:
        out.setdefault(t.node, []).append(t)
    return out


def mig_parted_config(plan: Plan) -> tuple[dict[str, Any], dict[str, str]]:
    """The mig-parted `version: v1` document and the config name each node should be labelled with."""
    configs: dict[str, list[dict[str, Any]]] = {}
    labels: dict[str, str] = {}
    for node, gpus in node_layouts(plan).items():
        gpus.sort(key=lambda t: t.index)
        groups: dict[tuple[str, Counts | None], list[GpuTarget]] = {}
        for t in gpus:
            groups.setdefault((t.model.name, t.target), []).append(t)
        entries = []
        for (_, lay), members in groups.items():
            indices = [t.index for t in members]
            devices: str | list[int] = "all" if len(groups) == 1 else indices
            entry: dict[str, Any] = {"device-filter": _device_filter(members[0].model), "devices": devices}
            entries.append(entry | _layout_entry(lay))
        name = _config_name(gpus[0].geometry, [t.target for t in gpus], entries)
        labels[node] = name
        configs[name] = entries
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}, labels


def render_mig_parted(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def device_plugin_config(plan: Plan, time_slicing: int | None = None, rename: bool = False) -> DevicePluginConfig:
    """`mixed` whenever a node will hold MIG devices (whole GPUs and several profiles may then share a node).

    With `time_slicing`, whole GPUs and every planned MIG resource are shared that many ways.
    """
    profiles = sorted({p for t in plan.targets for p, _ in (t.target or ())})
    strategy = MigStrategy.mixed if profiles else MigStrategy.none
    resources = (GPU_RESOURCE, *(mig_resource_name(p) for p in profiles))
    return build_config(mig_strategy=strategy, time_slicing=time_slicing, rename=rename, resources=resources)


def configmaps(plan: Plan, plugin: DevicePluginConfig, namespace: str = "gpu-operator") -> list[dict[str, Any]]:
    doc, _ = mig_parted_config(plan)
    mig_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MIG_PARTED_CONFIGMAP, "namespace": namespace},
        "data": {"config.yaml": render_mig_parted(doc)},
    }
    return [mig_cm, configmap(DEVICE_PLUGIN_CONFIGMAP, {"default": plugin}, namespace)]


@dataclass(slots=True)
class Reconfiguration:
    """Which nodes change, which must be drained first, and which pods move."""

    relabel: dict[str, str] = field(default_factory=dict)  # node -> new mig.config, only where it changes
    drain: list[str] = field(default_factory=list)  # nodes with a changing GPU that a pod uses
    in_place: list[str] = field(default_factory=list)  # nodes that change with no GPU pod on a changing GPU
    moved_pods: dict[str, list[str]] = field(default_factory=dict)  # node -> pods evicted by the drain
    changed_gpus: dict[str, list[int]] = field(default_factory=dict)


def reconfiguration(plan: Plan) -> Reconfiguration:
    _, labels = mig_parted_config(plan)
    out = Reconfiguration()
    by_node: dict[str, list[GpuTarget]] = {}
    for t in plan.targets:
        by_node.setdefault(t.node, []).append(t)
    for node_name, targets in sorted(by_node.items()):
        changed = [t for t in targets if t.changed]
        if not changed:
            continue
        out.changed_gpus[node_name] = [t.index for t in changed]
        node = plan.cluster.node(node_name)
        if node.labels.get(MIG_CONFIG_LABEL) != labels[node_name]:
            out.relabel[node_name] = labels[node_name]
        if any(t.in_use_by for t in changed):
            out.drain.append(node_name)
            out.moved_pods[node_name] = sorted(
                f"{p.namespace}/{p.name}"
                for p in plan.cluster.pods
                if p.node == node_name and p.phase in ("Running", "Pending")
            )
        else:
            out.in_place.append(node_name)
    return out


def commands(recon: Reconfiguration) -> list[str]:
    """The kubectl steps that apply the plan with the GPU Operator's mig-manager, drained nodes first.

    mig-manager watches `nvidia.com/mig.config`, applies it with mig-parted and reports
    `nvidia.com/mig.config.state` (pending, rebooting, success or failed).
    """
    state = "jsonpath={.metadata.labels.nvidia\\.com/mig\\.config\\.state}=success"
    out = []
    for node in recon.drain:
        out += [
            f"kubectl cordon {node}",
            f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data",
        ]
    for node in recon.drain + recon.in_place:
        if node in recon.relabel:
            out.append(f"kubectl label node {node} {MIG_CONFIG_LABEL}={recon.relabel[node]} --overwrite")
            out.append(f"kubectl wait node/{node} --for='{state}' --timeout=20m")
    out += [f"kubectl uncordon {node}" for node in recon.drain]
    return out


def describe(counts: Counts | None) -> str:
    if counts is None:
        return "whole (MIG disabled)"
    return " + ".join(f"{n}x{p}" for p, n in counts) or "MIG enabled, empty"


def summary(plan: Plan, recon: Reconfiguration | None = None) -> dict[str, Any]:
    """The plan as plain data (what `-o json|yaml` prints)."""
    sol = plan.solution
    recon = recon or reconfiguration(plan)
    doc, labels = mig_parted_config(plan)
    return {
        "gpuModels": [m.name for m in plan.gpu_models],
        "geometries": plan.geometries,
        "demand": plan.demand,
        "gpusUsed": sol.gpus,
        "gpusAvailable": len(plan.targets),
        "lowerBound": sol.lower_bound,
        "lpRelaxation": round(sol.lp_bound, 4),
        "gap": round(sol.gap, 4),
        "optimal": sol.optimal,
        "provided": sol.provided,
        "layouts": [
            {"gpuModel": model, "layout": describe(p or None), "gpus": n, "migDevices": dict(p)}
            for model, patterns in sol.by_pool.items()
            for p, n in sorted(patterns.items(), key=lambda kv: -kv[1])
        ],
        "nodeLabels": {node: {MIG_CONFIG_LABEL: name} for node, name in labels.items()},
        "migPartedConfig": doc,
        "reconfiguration": {
            "relabel": recon.relabel,
            "drain": recon.drain,
            "inPlace": recon.in_place,
            "movedPods": recon.moved_pods,
            "changedGpus": recon.changed_gpus,
            "commands": commands(recon),
        },
    }
