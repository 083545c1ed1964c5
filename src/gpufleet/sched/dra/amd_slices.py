"""ResourceSlices and the DeviceClass for a model Node's AMD GPUs, in the shapes AMD's DRA driver (driver and
DeviceClass `gpu.amd.com`, ROCm/k8s-gpu-dra-driver, deployed by the AMD GPU Operator) publishes.

A whole GPU is `type: amdgpu`; each partition of a partitioned GPU is its own device, `type: amdgpu-partition`, with
the parent's `resource.kubernetes.io/pciBusID` (claims match or spread parents on it). Devices are named
`gpu-<card>-<renderD>` after their DRM nodes: the driver numbers them from discovery, here card N is the node's N-th
logical GPU in GPU order and its render node 128 + N. Attributes (driver domain): `type`, `productName` (spaces as
`_`), `deviceID` (`0x74a1`), `driverVersion` (semver) and `driverVersionFull`, `partitionProfile` (`spx_nps1`,
`cpx_nps4`; only on partitionable parts), `numaNode`. Capacity: `memory` (its VRAM or its share of the partition's
memory pool), `computeUnits`, `simdUnits`. The driver publishes no health taints: an unhealthy GPU stays listed.
"""

from __future__ import annotations

from gpufleet.catalog.vendors import get_vendor
from gpufleet.model.gpu import Gpu
from gpufleet.model.node import Node
from gpufleet.sched.dra.objects import (
    CELDeviceSelector,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceClass,
    DeviceClassSpec,
    DeviceSelector,
    ObjectMeta,
    ResourceSlice,
)
from gpufleet.sched.dra.slices import pool_slices
from gpufleet.sched.partition.amd_partition import Modes, PartitionMode, node_modes

DRIVER = get_vendor("amd").dra_driver  # gpu.amd.com
FULL, PARTITION = "amdgpu", "amdgpu-partition"
SOCKETS = 2  # OAM platforms put half the GPUs on each CPU socket: the NUMA node the driver reads from sysfs


def _s(value: str) -> DeviceAttribute:
    return DeviceAttribute(string=value)


def _semver(text: str) -> str:
    """amdgpu's module version as the driver's semver: 6.10.5 stays, 6.8 -> 6.8.0, 6.12.12-k -> 6.12.12."""
    parts = [p for p in text.split("-")[0].split(".") if p.isdigit()][:3]
    return ".".join([str(int(p)) for p in parts] + ["0"] * (3 - len(parts)))


def bdf(gpu: Gpu) -> str:
    """Extended BDF notation (0000:18:00.0) from NVML-style 00000000:18:00.0."""
    domain, rest = gpu.pci_bus_id.lower().split(":", 1)
    return f"{domain[-4:]}:{rest}"


def _device(node: Node, gpu: Gpu, card: int, mode: PartitionMode | None, sockets: int) -> Device:
    spec = gpu.model
    split = mode is not None and mode.partitions > 1
    attrs: dict[str, DeviceAttribute] = {
        "type": _s(PARTITION if split else FULL),
        "productName": _s(spec.product_name.replace(" ", "_")),
        "numaNode": DeviceAttribute.model_validate({"int": gpu.index * sockets // max(len(node.gpus), 1)}),
    }
    if node.software.driver_version:
        attrs["driverVersion"] = DeviceAttribute(version=_semver(node.software.driver_version))
        attrs["driverVersionFull"] = _s(node.software.driver_version)
    if spec.pci_device_id:
        attrs["deviceID"] = _s(spec.pci_device_id.lower())
    if mode is not None:
        attrs["partitionProfile"] = _s(mode.name)
    attrs["resource.kubernetes.io/pciBusID"] = _s(bdf(gpu))
    cus = mode.cus_each if mode is not None else spec.compute_units or 0
    memory = mode.memory_mib if mode is not None else spec.memory_mib
    return Device(
        name=f"gpu-{card}-{128 + card}",
        attributes=attrs,
        capacity={
            "memory": DeviceCapacity(value=f"{memory}Mi"),
            "computeUnits": DeviceCapacity(value=str(cus)),
            "simdUnits": DeviceCapacity(value=str(cus * 4)),
        },
    )


def amd_devices(node: Node, modes: Modes = None, sockets: int = SOCKETS) -> list[Device]:
    out: list[Device] = []
    for gpu, mode in zip(node.gpus, node_modes(node, modes), strict=True):
        for _ in range(mode.partitions if mode is not None else 1):
            out.append(_device(node, gpu, len(out), mode, sockets))
    return out


def amd_resource_slices(node: Node, modes: Modes = None, generation: int = 1) -> list[ResourceSlice]:
    """The node's pool (128 devices a slice): its whole GPUs, or every partition of its partitioned ones."""
    return pool_slices(node.name, DRIVER, amd_devices(node, modes), generation)


def amd_device_classes() -> list[DeviceClass]:
    """The DeviceClass the driver's chart (and the GPU Operator) installs: every device of the driver."""
    selector = DeviceSelector(cel=CELDeviceSelector(expression=f"device.driver == '{DRIVER}'"))
    return [DeviceClass(metadata=ObjectMeta(name=DRIVER), spec=DeviceClassSpec(selectors=[selector]))]
