"""ResourceSlices and DeviceClasses for a model Node, in the shapes NVIDIA's DRA driver (gpu.nvidia.com) publishes.

A full GPU is device `gpu-<minor>`; a MIG instance is `gpu-<minor>-mig-<profile without dots>-<profile id>-<start>`.
Attributes live in the driver's domain (`productName`, `architecture`, `uuid`, `brand`, `driverVersion`,
`cudaComputeCapability`, `index`, `type` gpu/mig ...), the PCI bus id under `resource.kubernetes.io`; capacity
`memory` is a quantity (the framebuffer size nvidia-smi reports, in Mi).
"""

from __future__ import annotations

from gpufleet.catalog.mig import MEMORY_SLICES, mig_profiles_for
from gpufleet.model.gpu import Gpu, MigInstance
from gpufleet.model.node import Node
from gpufleet.sched.dra.objects import (
    CELDeviceSelector,
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceClass,
    DeviceClassSpec,
    DeviceCounterConsumption,
    DeviceSelector,
    DeviceTaint,
    ObjectMeta,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)

DRIVER = "gpu.nvidia.com"
BRAND = "Nvidia"  # what NVML's brand query gives data-centre parts, as the driver publishes it


def _s(value: str) -> DeviceAttribute:
    return DeviceAttribute(string=value)


def _v(text: str) -> DeviceAttribute:
    """Driver and CUDA versions as semver: 550.90.07 -> 550.90.7, 12.4 -> 12.4.0."""
    parts = [str(int(p)) for p in text.split(".")[:3]]
    return DeviceAttribute(version=".".join(parts + ["0"] * (3 - len(parts))))


def _common(node: Node, gpu: Gpu) -> dict[str, DeviceAttribute]:
    spec = gpu.model
    return {
        "productName": _s(spec.product_name),
        "brand": _s(BRAND),
        "architecture": _s(spec.arch.replace("-", " ").title()),
        "cudaComputeCapability": _v(spec.compute_capability),
        "driverVersion": _v(node.software.driver_version),
        "cudaDriverVersion": _v(node.software.cuda_version),
        "index": DeviceAttribute.model_validate({"int": gpu.index}),
    }


def _taints(gpu: Gpu) -> list[DeviceTaint] | None:
    if gpu.schedulable:
        return None
    return [DeviceTaint(key=f"{DRIVER}/unhealthy", value=gpu.health_reason or str(gpu.health), effect="NoSchedule")]


def gpu_device(node: Node, gpu: Gpu) -> Device:
    attrs = {
        "type": _s("gpu"),
        "uuid": _s(gpu.uuid),
        **_common(node, gpu),
        "resource.kubernetes.io/pciBusID": _s(gpu.pci_bus_id.lower()[-12:]),
    }
    return Device(
        name=f"gpu-{gpu.minor}",
        attributes=attrs,
        capacity={"memory": DeviceCapacity(value=f"{gpu.memory_mib}Mi")},
        taints=_taints(gpu),
    )


def mig_device_name(gpu: Gpu, inst: MigInstance, profile_id: int) -> str:
    return f"gpu-{gpu.minor}-mig-{inst.profile.replace('.', '').replace('+', '')}-{profile_id}-{inst.start}"


def mig_device(node: Node, gpu: Gpu, inst: MigInstance) -> Device:
    prof = mig_profiles_for(gpu.model.mig_geometry or "")[inst.profile]
    attrs = {
        "type": _s("mig"),
        "uuid": _s(inst.uuid),
        "parentUUID": _s(gpu.uuid),
        "profile": _s(inst.profile),
        **_common(node, gpu),
    }
    capacity = {"memory": DeviceCapacity(value=f"{round(prof.memory_gib * 1024)}Mi")}
    if prof.sm_count:
        capacity["multiprocessors"] = DeviceCapacity(value=str(prof.sm_count))
    for i in range(inst.start, min(inst.start + inst.size, MEMORY_SLICES)):
        capacity[f"memorySlice{i}"] = DeviceCapacity(value="1")
    return Device(
        name=mig_device_name(gpu, inst, prof.profile_id), attributes=attrs, capacity=capacity, taints=_taints(gpu)
    )


def node_devices(node: Node) -> list[Device]:
    out: list[Device] = []
    for gpu in node.gpus:
        if gpu.mig_enabled:
            out.extend(mig_device(node, gpu, inst) for inst in gpu.mig_instances)
        else:
            out.append(gpu_device(node, gpu))
    return out


def resource_slices(node: Node, generation: int = 1) -> list[ResourceSlice]:
    """The node's pool: one slice (more if over 128 devices), named like the driver's `<node>-gpu.nvidia.com-N`."""
    return pool_slices(node.name, DRIVER, node_devices(node), generation)


def pool_slices(node: str, driver: str, devices: list[Device], generation: int = 1) -> list[ResourceSlice]:
    """A node's pool of one driver's devices as ResourceSlices of at most 128 devices (the API's limit), named
    `<node>-<driver>-N` as the drivers name theirs."""
    chunks = [devices[i : i + 128] for i in range(0, len(devices), 128)] or [[]]
    return [
        ResourceSlice(
            metadata=ObjectMeta(name=f"{node}-{driver}-{i}"),
            spec=ResourceSliceSpec(
                driver=driver,
                pool=ResourcePool(name=node, generation=generation, resource_slice_count=len(chunks)),
                node_name=node,
                devices=chunk,
            ),
        )
        for i, chunk in enumerate(chunks)
    ]


def nvidia_device_classes() -> list[DeviceClass]:
    """The DeviceClasses NVIDIA's driver chart installs for whole GPUs and MIG devices."""

    def cls(name: str, kind: str, extended: str | None = None) -> DeviceClass:
        expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        return DeviceClass(
            metadata=ObjectMeta(name=name),
            spec=DeviceClassSpec(
                selectors=[DeviceSelector(cel=CELDeviceSelector(expression=expr))], extended_resource_name=extended
            ),
        )

    return [cls("gpu.nvidia.com", "gpu", "nvidia.com/gpu"), cls("mig.nvidia.com", "mig")]


def _counter_set(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor}-counter-set"


def _slice_counter(i: int) -> str:
    return f"memory-slice-{i}"  # counter names are DNS labels


MEDIA_COUNTER = "media-extensions"


def partitionable_slices(node: Node, generation: int = 1) -> list[ResourceSlice]:
    """Dynamic MIG as partitionable devices (KEP-4815, gate DRAPartitionableDevices), one slice per GPU.

    Each MIG-capable GPU gets a counter set with one counter per memory slice and one for media extensions. The
    full GPU consumes all of them; every valid placement of every profile is a device consuming the slices it
    covers (and the media counter for +me). Allocation then enforces exactly the MIG validity rules: no shared
    memory slice, at most one +me, and the max counts that follow from the listed starts.
    """
    per_gpu: list[tuple[list[Device], list[CounterSet] | None]] = []
    for gpu in node.gpus:
        if gpu.model.mig_geometry is None:
            per_gpu.append(([gpu_device(node, gpu)], None))
            continue
        name = _counter_set(gpu)
        counters = {_slice_counter(i): Counter(value="1") for i in range(MEMORY_SLICES)}
        counters[MEDIA_COUNTER] = Counter(value="1")
        full = gpu_device(node, gpu)
        full.consumes_counters = [DeviceCounterConsumption(counter_set=name, counters=dict(counters))]
        devices = [full]
        for prof in mig_profiles_for(gpu.model.mig_geometry).values():
            for start in prof.starts:
                inst = MigInstance(prof.name, 0, start, prof.size, "")
                dev = mig_device(node, gpu, inst)
                assert dev.attributes is not None
                del dev.attributes["uuid"]  # created on allocation
                use = {_slice_counter(i): Counter(value="1") for i in range(start, start + prof.size)}
                if prof.media_extensions:
                    use[MEDIA_COUNTER] = Counter(value="1")
                dev.consumes_counters = [DeviceCounterConsumption(counter_set=name, counters=use)]
                devices.append(dev)
        per_gpu.append((devices, [CounterSet(name=name, counters=counters)]))
    return [
        ResourceSlice(
            metadata=ObjectMeta(name=f"{node.name}-{DRIVER}-{i}"),
            spec=ResourceSliceSpec(
                driver=DRIVER,
                pool=ResourcePool(name=node.name, generation=generation, resource_slice_count=len(per_gpu)),
                node_name=node.name,
                devices=devices,
                shared_counters=counter_sets,
            ),
        )
        for i, (devices, counter_sets) in enumerate(per_gpu)
    ]
