"""Accelerators of every vendor as the scheduler sees them: what a pod asks for, what a node carries.

A pod's GPU request comes from its extended resources: a vendor's whole device (`nvidia.com/gpu`, `amd.com/gpu`,
`habana.ai/gaudi`), an NVIDIA MIG slice or shared replica, or an AMD partition under the device plugin's mixed naming
(`amd.com/cpx_nps4`, kept as a `mig`-style slice whose profile is `cpx_nps4` and whose vendor is amd).

A node's accelerators come from the label its vendor's feature discovery writes and from the capacity its device
plugin reports: NVIDIA GFD's `nvidia.com/gpu.product` (`NVIDIA-H100-80GB-HBM3`), AMD's node labeller's
`amd.com/gpu.product-name` (`Instinct_MI300X`, `Instinct_MI300X_OAM`; the `beta.amd.com/` form, or one
`amd.com/gpu.product-name.<name>` key per name on a node with several), Gaudi feature discovery's
`habana.ai/device.type` (`GAUDI3`; the PCI id in `habana.ai/device.id` when the type is empty without the driver).
One GPU stands for each device the plugin advertises: on a partitioned AMD node that is a logical GPU (a CPX
partition is its own KFD node, render device and Kubernetes device), all of them on one XGMI mesh.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from gpufleet.catalog.gpus import GpuModelSpec, load_gpu_models, model_for_product_name
from gpufleet.catalog.vendors import get_vendor, load_vendors
from gpufleet.model import Gpu, GpuHealth, GpuRequest, GpuSharing, Node, Pod
from gpufleet.sched.framework.resources import MIG_PREFIX, accelerator_vendor, accelerators
from gpufleet.sched.partition.amd_partition import AMD_RESOURCE, parse_partition_resource

GPU_SHARED_RESOURCE = "nvidia.com/gpu.shared"
AMD_PREFIX = "amd.com/"


@cache
def vendor_resources() -> Mapping[str, str]:
    """Each vendor's whole-device resource -> the vendor, in catalog order (nvidia first)."""
    return MappingProxyType({v.resource: v.name for v in load_vendors().values()})


def gpu_request_of(requests: Mapping[str, int]) -> GpuRequest:
    for resource, vendor in vendor_resources().items():
        if requests.get(resource):
            return GpuRequest(GpuSharing.exclusive, count=requests[resource], vendor=vendor)
    if requests.get(GPU_SHARED_RESOURCE):
        return GpuRequest(GpuSharing.time_slicing, count=requests[GPU_SHARED_RESOURCE])
    for name, count in requests.items():
        if not count:
            continue
        if name.startswith(MIG_PREFIX):
            profile = name[len(MIG_PREFIX) :].removesuffix(".shared")
            return GpuRequest(GpuSharing.mig, count=count, mig_profile=profile)
        if parse_partition_resource(name) is not None:
            return GpuRequest(GpuSharing.mig, count=count, mig_profile=name.removeprefix(AMD_PREFIX), vendor="amd")
    return GpuRequest()


def model_pod_requests(pod: Pod) -> dict[str, int]:
    """The Kubernetes requests a model pod stands for (twin workloads, tests), in its vendor's resource names."""
    req: dict[str, int] = {}
    if pod.cpu_milli:
        req["cpu"] = pod.cpu_milli
    if pod.memory_mib:
        req["memory"] = pod.memory_mib * 2**20
    g = pod.gpu
    if g.count and g.sharing in (GpuSharing.exclusive, GpuSharing.mps, GpuSharing.time_slicing):
        req[get_vendor(g.vendor).resource] = g.count
    elif g.count and g.sharing is GpuSharing.mig and g.mig_profile:
        name = AMD_PREFIX + g.mig_profile if g.vendor == "amd" else MIG_PREFIX + g.mig_profile
        req[name] = g.count
    return req


def requested_vendors(requests: Mapping[str, int]) -> frozenset[str]:
    """The vendors whose accelerators a pod asks for (empty: none; more than one: no node can serve it)."""
    return frozenset(v for k in accelerators(dict(requests)) if (v := accelerator_vendor(k)) is not None)


def node_vendor(node: Node, allocatable: Mapping[str, int]) -> str | None:
    """Whose accelerators a node carries: its GPUs' model, else the accelerator resources it advertises."""
    if node.gpu_vendor is not None:
        return node.gpu_vendor
    for name in accelerators(dict(allocatable)):
        return accelerator_vendor(name)
    return None


def vendor_label(vendor: str) -> str:
    return f"{get_vendor(vendor).display_name} accelerators"


# --- reading a node's labels and capacity ----------------------------------------------------------------------


@cache
def _gfd_index() -> dict[str, GpuModelSpec]:
    """GFD writes the product name with spaces as '-': index the catalog that way."""
    return {spec.product_name.replace(" ", "-").lower(): spec for spec in load_gpu_models().values()}


def gpu_model_for_product(label: str) -> GpuModelSpec | None:
    """The model behind an `nvidia.com/gpu.product` value (MIG and shared suffixes dropped)."""
    base = label.split("-MIG-")[0].removesuffix("-SHARED")
    return _gfd_index().get(base.replace(" ", "-").lower())


def _of_vendor(spec: GpuModelSpec | None, vendor: str) -> GpuModelSpec | None:
    return spec if spec is not None and spec.vendor == vendor else None


def _amd_model(labels: Mapping[str, str]) -> GpuModelSpec | None:
    key = get_vendor("amd").product_label  # amd.com/gpu.product-name
    names = [labels.get(key, ""), labels.get("beta." + key, "")]
    names += [k.removeprefix(key + ".") for k in labels if k.startswith(key + ".")]  # several names on one node
    for name in names:
        spec = _of_vendor(model_for_product_name(name), "amd") if name else None
        if spec is not None:
            return spec
    return None


def _gaudi_model(labels: Mapping[str, str]) -> GpuModelSpec | None:
    kind = labels.get(get_vendor("intel").product_label, "")  # habana.ai/device.type
    spec = _of_vendor(model_for_product_name(kind), "intel") if kind else None
    if spec is not None:
        return spec
    device_id = labels.get("habana.ai/device.id", "").lower().removeprefix("0x")
    for model in load_gpu_models().values():
        if model.vendor == "intel" and device_id and model.pci_device_id.lower().removeprefix("0x") == device_id:
            return model
    return None


def node_model(labels: Mapping[str, str]) -> GpuModelSpec | None:
    """The accelerator model a node's labels name, whichever vendor labelled it."""
    nvidia = gpu_model_for_product(labels.get(get_vendor("nvidia").product_label, ""))
    return nvidia or _amd_model(labels) or _gaudi_model(labels)


def _devices(spec: GpuModelSpec, resources: Mapping[str, int]) -> int:
    """Devices the vendor's plugin advertises: its whole-device resource, and AMD's partition resources."""
    count = resources.get(spec.resource, 0)
    if spec.vendor == "amd":
        count += sum(v for k, v in resources.items() if k != AMD_RESOURCE and parse_partition_resource(k))
    return count


def _peers(spec: GpuModelSpec, i: int, count: int) -> list[int]:
    if spec.scaleup_shape in ("switch", "mesh"):
        return [j for j in range(count) if j != i]
    if spec.scaleup_shape == "bridge" and (i ^ 1) < count:
        return [i ^ 1]  # bridged pairs (H100 NVL, MI210)
    return []


def node_gpus(
    name: str, labels: Mapping[str, str], capacity: Mapping[str, int], allocatable: Mapping[str, int]
) -> list[Gpu]:
    spec = node_model(labels)
    if spec is None:
        return []
    total = _devices(spec, capacity)
    gpus = [
        Gpu(
            index=i,
            uuid=f"{name}/gpu{i}",
            pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
            serial="",
            model=spec,
            minor=i,
            nvlink_peers=_peers(spec, i, total),
        )
        for i in range(total)
    ]
    # The device plugin reports unhealthy devices by lowering allocatable; which ones is not visible here.
    for gpu in gpus[_devices(spec, allocatable) :]:
        gpu.health = GpuHealth.unhealthy
        gpu.health_reason = "device plugin reports it unhealthy (allocatable < capacity)"
    return gpus
