"""The node labels NVIDIA GPU Feature Discovery sets, derived from the model and the device-plugin config.

Label names and value shapes follow GFD's documentation and expected-output files: the product name with spaces as
'-' (suffix `-SHARED` when replicas > 1 and the resource is not renamed), memory in MiB, the architecture family,
compute capability, CUDA driver and runtime versions (with the deprecated names GFD still writes), MIG/MPS
capability, the sharing strategy with its replica count, and under a MIG strategy the per-profile labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpufleet.catalog.mig import mig_profiles_for
from gpufleet.model.node import Node
from gpufleet.sched.partition.device_plugin import (
    GPU_RESOURCE,
    DevicePluginConfig,
    MigStrategy,
    SharingStrategy,
    mig_resource_name,
)
from gpufleet.sched.partition.sharing import advertise


def _version_parts(version: str) -> list[str]:
    """major, minor, revision; "0" where the version has fewer parts."""
    parts = version.split(".")
    return [parts[i] if len(parts) > i else "0" for i in range(3)]


def _sanitise(text: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", text).split())


def _product(parts: list[str], shared: bool) -> str:
    return "-".join([_sanitise(p) for p in parts if p] + (["SHARED"] if shared else []))


def _base(resource: str, count: int, replicas: int, strategy: SharingStrategy, product: str) -> dict[str, str]:
    return {
        f"{resource}.product": product,
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": str(strategy if replicas > 1 else SharingStrategy.none),
    }


def gfd_labels(node: Node, config: DevicePluginConfig | None = None, *, machine: str | None = None) -> dict[str, str]:
    """The labels GFD would set on `node` under a device-plugin `config` (default: no sharing, no MIG strategy), but
    its timestamp. A node without NVIDIA GPUs gets none (GFD does not run there; see vendor_labels for AMD's and
    Gaudi's)."""
    if not node.gpus or node.gpu_vendor != "nvidia":
        return {}
    config = config or DevicePluginConfig(version="v1")
    spec = node.gpus[0].model
    sharing, strategy = config.sharing, config.mig_strategy
    driver = _version_parts(node.software.driver_version)
    cuda = _version_parts(node.software.cuda_version)
    labels = {
        "nvidia.com/cuda.driver-version.full": node.software.driver_version,
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1],
        "nvidia.com/cuda.driver-version.revision": driver[2],
        "nvidia.com/cuda.driver.major": driver[0],  # the deprecated names GFD still sets
        "nvidia.com/cuda.driver.minor": driver[1],
        "nvidia.com/cuda.driver.rev": driver[2],
        "nvidia.com/cuda.runtime-version.full": node.software.cuda_version,
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/cuda.runtime-version.minor": cuda[1],
        "nvidia.com/cuda.runtime.major": cuda[0],
        "nvidia.com/cuda.runtime.minor": cuda[1],
        "nvidia.com/gpu.machine": machine or node.labels.get("node.kubernetes.io/instance-type", "unknown"),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": str(spec.mig_capable).lower(),
        # true when the device plugin shares by MPS: the MPS control daemon selects nodes on it
        "nvidia.com/mps.capable": str(sharing.strategy is SharingStrategy.mps).lower(),
    }
    # GFD counts every GPU of the model in gpu.count; MIG-enabled GPUs are labelled without sharing (replicas 0)
    # unless a MIG-disabled GPU exists, whose sharing labels override them. This holds under every strategy.
    full = [g for g in node.gpus if not g.mig_enabled]
    mig_on = [g for g in node.gpus if g.mig_enabled]
    total = len(node.gpus)
    arch = {
        f"{GPU_RESOURCE}.memory": str(spec.memory_mib),
        f"{GPU_RESOURCE}.family": spec.arch,  # the catalog names architectures as GFD's family label does
        f"{GPU_RESOURCE}.compute.major": spec.compute_capability.split(".")[0],
        f"{GPU_RESOURCE}.compute.minor": spec.compute_capability.split(".")[1],
    }
    if mig_on:  # MIG-enabled GPUs are labelled without sharing; full GPUs below override them
        labels |= _base(GPU_RESOURCE, total, 0, SharingStrategy.none, _product([spec.product_name], False))
        labels |= arch
    if full:
        entry = sharing.replicas_for(GPU_RESOURCE)
        replicas = entry.replicas if entry else 1
        shared = replicas > 1 and not sharing.is_renamed(GPU_RESOURCE)
        labels |= _base(GPU_RESOURCE, total, replicas, sharing.strategy, _product([spec.product_name], shared))
        labels |= arch
    if strategy is MigStrategy.none:
        return labels
    labels["nvidia.com/mig.strategy"] = str(strategy)
    if not mig_on:
        return labels
    adv = advertise(node, config)
    if strategy is MigStrategy.single and adv.errors:
        labels |= {
            f"{GPU_RESOURCE}.product": _product([spec.product_name, "MIG", "INVALID"], False),
            f"{GPU_RESOURCE}.count": "0",
            f"{GPU_RESOURCE}.replicas": "0",
            f"{GPU_RESOURCE}.memory": "0",
        }
        return labels
    profiles = mig_profiles_for(spec.mig_geometry or "")
    by_profile: dict[str, int] = {}
    for gpu in mig_on:
        for inst in gpu.mig_instances:
            by_profile[inst.profile] = by_profile.get(inst.profile, 0) + 1
    for profile, count in sorted(by_profile.items()):
        resource = GPU_RESOURCE if strategy is MigStrategy.single else mig_resource_name(profile)
        entry = sharing.replicas_for(resource)
        replicas = entry.replicas if entry else 1
        shared = replicas > 1 and not sharing.is_renamed(resource)
        prof = profiles[profile]
        labels |= _base(
            resource, count, replicas, sharing.strategy, _product([spec.product_name, "MIG", profile], shared)
        )
        labels[f"{resource}.memory"] = str(round(prof.memory_gib * 1024))
        labels[f"{resource}.slices.gi"] = str(prof.compute_slices)
        labels[f"{resource}.slices.ci"] = str(prof.compute_slices)
        if prof.sm_count:
            labels[f"{resource}.multiprocessors"] = str(prof.sm_count)
    return labels


def apply_gfd_labels(
    node: Node, config: DevicePluginConfig | None = None, *, machine: str | None = None
) -> Mapping[str, str]:
    """Merge GFD's labels into the node's own (GFD overwrites its keys, leaves the rest)."""
    labels = gfd_labels(node, config, machine=machine)
    node.labels.update(labels)
    return labels
