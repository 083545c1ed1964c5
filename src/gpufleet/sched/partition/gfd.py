"""The node labels NVIDIA GPU Feature Discovery would set, derived from the model.

Label names and value shapes follow GFD's documentation and expected-output files: the product name with spaces as
'-' (suffix ``-SHARED`` when replicas > 1 and the resource is not renamed), memory in MiB, the architecture family,
compute capability, CUDA driver version, MIG/MPS capability and the sharing strategy with its replica count.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from gpufleet.model import Node

PREFIX = "nvidia.com/"


class SharingStrategy(StrEnum):
    none = "none"
    time_slicing = "time-slicing"
    mps = "mps"


def _version_parts(version: str) -> list[str]:
    return [*version.split("."), "", "", ""][:3]


def gfd_labels(
    node: Node,
    *,
    sharing: SharingStrategy = SharingStrategy.none,
    replicas: int = 1,
    rename_by_default: bool = False,
    mig_strategy: str = "none",
    machine: str | None = None,
) -> dict[str, str]:
    """Labels for one node. A node without GPUs gets none (GFD does not run there)."""
    if not node.gpus:
        return {}
    spec = node.gpus[0].model
    product = spec.product_name.replace(" ", "-")
    if replicas > 1 and sharing is not SharingStrategy.none and not rename_by_default:
        product += "-SHARED"
    major, minor = spec.compute_capability.split(".")
    d_major, d_minor, d_rev = _version_parts(node.software.driver_version)
    c_major, c_minor, _ = _version_parts(node.software.cuda_version)
    labels = {
        "gpu.product": product,
        "gpu.count": str(len(node.gpus)),
        "gpu.memory": str(spec.memory_mib),
        "gpu.family": spec.arch,
        "gpu.compute.major": major,
        "gpu.compute.minor": minor,
        "gpu.mode": "compute",
        "gpu.replicas": str(replicas if sharing is not SharingStrategy.none else 1),
        "gpu.sharing-strategy": str(sharing),
        "gpu.machine": machine or node.labels.get("node.kubernetes.io/instance-type", "unknown"),
        "cuda.driver-version.major": d_major,
        "cuda.driver-version.minor": d_minor,
        "cuda.driver-version.revision": d_rev,
        "cuda.driver-version.full": node.software.driver_version,
        "cuda.driver.major": d_major,
        "cuda.driver.minor": d_minor,
        "cuda.driver.rev": d_rev,
        "cuda.runtime-version.major": c_major,
        "cuda.runtime-version.minor": c_minor,
        "cuda.runtime-version.full": node.software.cuda_version,
        "cuda.runtime.major": c_major,
        "cuda.runtime.minor": c_minor,
        "mig.capable": str(spec.mig_capable).lower(),
        # True when the device plugin is configured for MPS sharing: the MPS control daemon selects on it.
        "mps.capable": str(sharing is SharingStrategy.mps).lower(),
    }
    if mig_strategy != "none" and spec.mig_capable:
        labels["mig.strategy"] = mig_strategy
    return {PREFIX + k: v for k, v in labels.items()}


def apply_gfd_labels(node: Node, **kwargs: object) -> Mapping[str, str]:
    """Merge GFD's labels into the node's own (GFD overwrites its keys, leaves the rest)."""
    labels = gfd_labels(node, **kwargs)  # type: ignore[arg-type]
    node.labels.update(labels)
    return labels
