"""Which DRA driver publishes a node's accelerators, and what to say when a vendor has none.

NVIDIA's driver is `gpu.nvidia.com`, AMD's `gpu.amd.com` (the catalog's `dra_driver`). Intel Gaudi has no DRA driver
in the catalog: its devices reach pods only as the Habana device plugin's `habana.ai/gaudi` extended resource, so a
claim that asks for Gaudi devices is answered with that, never with an empty match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.catalog.vendors import VendorSpec, get_vendor, load_vendors
from gpufleet.errors import UserError
from gpufleet.model.node import Node
from gpufleet.sched.dra.amd_slices import Modes, amd_device_classes, amd_resource_slices
from gpufleet.sched.dra.objects import DeviceClass, ResourceSlice
from gpufleet.sched.dra.slices import nvidia_device_classes, partitionable_slices, resource_slices


def drivers() -> dict[str, str]:
    """DRA driver -> vendor, for the vendors that have one."""
    return {v.dra_driver: v.name for v in load_vendors().values() if v.dra_driver}


def no_driver_error(vendor: VendorSpec, what: str) -> UserError:
    return UserError(
        f"{what}: {vendor.display_name} has no DRA driver, so no ResourceSlice lists its devices and no claim can "
        "be allocated from them",
        fix=f"request {vendor.resource} as an extended resource in the pod's limits (the device plugin in "
        f"{vendor.device_plugin_namespace}), or use a vendor with a DRA driver ({', '.join(sorted(drivers()))})",
    )


def _mentions(vendor: VendorSpec, text: str) -> bool:
    """Whether a class name or CEL expression names the vendor: its resource domain or its product name."""
    domain = vendor.label_prefix.rstrip("/")
    words = {domain, vendor.resource, *vendor.display_name.lower().split()[1:]}  # habana.ai, habana.ai/gaudi, gaudi
    lowered = text.lower()
    return any(re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", lowered) for w in words if w)


def driverless_vendor(text: str) -> VendorSpec | None:
    """The vendor without a DRA driver that a device class name or selector asks for, if any."""
    for vendor in load_vendors().values():
        if not vendor.dra_driver and _mentions(vendor, text):
            return vendor
    return None


def node_slices(
    node: Node, *, modes: Modes = None, dynamic_mig: bool = False, generation: int = 1
) -> list[ResourceSlice]:
    """What the node's vendor's DRA driver publishes for it (nothing for a node without accelerators)."""
    if node.gpu_vendor is None:
        return []
    vendor = get_vendor(node.gpu_vendor)
    if not vendor.dra_driver:
        raise no_driver_error(vendor, f"node {node.name}")
    if vendor.name == "amd":
        return amd_resource_slices(node, modes, generation)
    return partitionable_slices(node, generation) if dynamic_mig else resource_slices(node, generation)


def device_classes(vendors: Iterable[str] | None = None) -> list[DeviceClass]:
    """The DeviceClasses of the vendors' drivers (all by default): gpu.nvidia.com and mig.nvidia.com, gpu.amd.com."""
    wanted = set(vendors) if vendors is not None else {"nvidia", "amd"}
    return [
        *(nvidia_device_classes() if "nvidia" in wanted else []),
        *(amd_device_classes() if "amd" in wanted else []),
    ]


def published(nodes: Iterable[Node], *, dynamic_mig: bool = False) -> tuple[list[ResourceSlice], list[str]]:
    """The slices every node's driver publishes, and the nodes left out because their vendor has no driver."""
    slices: list[ResourceSlice] = []
    left_out: list[str] = []
    for node in nodes:
        if node.gpu_vendor is not None and not get_vendor(node.gpu_vendor).dra_driver:
            left_out.append(node.name)
            continue
        slices += node_slices(node, dynamic_mig=dynamic_mig)
    return slices, left_out
