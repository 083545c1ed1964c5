"""The node labels AMD's node labeller and Intel Gaudi feature discovery write, derived from a model Node (NVIDIA's
GPU Feature Discovery labels are gfd.py's).

AMD (ROCm/k8s-device-plugin cmd/k8s-node-labeller): a property counted over the node's logical GPUs (a partition is
one) is written as `beta.amd.com/gpu.<prop>.<value>=<count>` always; when every GPU shares one value also as
`amd.com/gpu.<prop>=<value>` and `beta.amd.com/gpu.<prop>=<value>`; when they differ as `amd.com/gpu.<prop>.<value>=
<count>`. The driver version is only `amd.com/gpu.driver-version`. The GPU Operator turns on product-name, device-id,
family, vram, cu-count, simd-count and driver-version; the partition labels (compute-memory-partition on a node in
one mode, compute- and memory-partitioning-supported) are opt-in. Values as the labeller reads them: the product name
with spaces as `_` and parentheses dropped, the PCI device id without `0x`, libdrm's family (`AI` for GC 9.x),
VRAM in whole GiB with `G`, CUs and SIMDs (4 per CU) from KFD topology.

Gaudi (HabanaAI/gaudi-feature-discovery collector): `habana.ai/device.{family,count,id,revision,type}`,
`habana.ai/driver.{version,hash}` (the habanalabs version split at `-`), `habana.ai/fw.{version,os}`,
`habana.ai/product.{name,serial}`, `habana.ai/sys.vendor`, `habana.ai/distro.{type,ostree-version}`,
`habana.ai/kernel.version` and `habana.ai/hfd.timestamp`; values sanitised to `[A-Za-z0-9_.-]`, trimmed of leading
and trailing `_.-`, cut to 63 characters. Without the driver the driver.*, fw.* and device.type labels are empty.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.model.node import Node
from gpufleet.sched.partition.amd_partition import SIMD_PER_CU, Modes, node_modes, partitionable
from gpufleet.sched.partition.device_plugin import DevicePluginConfig
from gpufleet.sched.partition.gfd import gfd_labels

AMD_DEFAULT = ("product-name", "device-id", "family", "vram", "cu-count", "simd-count")  # counted, operator defaults
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _counted(prop: str, values: Counter[str]) -> dict[str, str]:
    beta, ga = f"beta.amd.com/gpu.{prop}", f"amd.com/gpu.{prop}"
    out = {f"{beta}.{value}": str(n) for value, n in values.items()}
    if len(values) == 1:
        (value,) = values
        out[beta] = out[ga] = value
    else:
        out.update({f"{ga}.{value}": str(n) for value, n in values.items()})
    return out


def amd_product_name(spec: GpuModelSpec) -> str:
    """What the labeller reads from sysfs product_name (`Instinct_MI300X`): the catalog's underscore form, else the
    product name without the vendor, spaces as `_`, parentheses dropped."""
    for name in spec.product_names:
        if name.startswith("Instinct_"):
            return name
    text = spec.product_name.removeprefix("AMD ").strip()
    return text.replace(" ", "_").replace("(", "").replace(")", "")


def amd_family(spec: GpuModelSpec) -> str | None:
    """libdrm's family name: GC 9.x (gfx9xx: MI100 to MI355X) is AMDGPU_FAMILY_AI."""
    return "AI" if re.fullmatch(r"gfx9[0-9a-f]{2}", spec.gfx_target) else None


def amd_labels(node: Node, modes: Modes = None, *, partition_labels: bool = False) -> dict[str, str]:
    """The labeller's labels on an AMD node (none on another vendor's): one logical GPU per partition, in the modes
    given, or as the node's partition label says, or SPX/NPS1."""
    if not node.gpus or node.gpu_vendor != "amd":
        return {}
    spec = node.gpus[0].model
    values: dict[str, Counter[str]] = {prop: Counter() for prop in AMD_DEFAULT}
    per_gpu = node_modes(node, modes)
    for mode in per_gpu:
        devices = mode.partitions if mode is not None else 1
        cus = mode.cus_each if mode is not None else spec.compute_units or 0
        memory_mib = mode.memory_mib if mode is not None else spec.memory_mib
        values["product-name"][amd_product_name(spec)] += devices
        if spec.pci_device_id:
            values["device-id"][spec.pci_device_id.lower().removeprefix("0x")] += devices
        family = amd_family(spec)
        if family:
            values["family"][family] += devices
        values["vram"][f"{round(memory_mib / 1024)}G"] += devices
        if cus:
            values["cu-count"][str(cus)] += devices
            values["simd-count"][str(cus * SIMD_PER_CU)] += devices
    labels: dict[str, str] = {}
    for prop, counts in values.items():
        if counts:
            labels |= _counted(prop, counts)
    # the labeller reads the module version file, absent with the in-box kernel driver: then the value is empty
    labels["amd.com/gpu.driver-version"] = node.software.driver_version
    if partition_labels:
        supported = str(partitionable(spec)).lower()
        labels["amd.com/gpu.compute-partitioning-supported"] = supported
        labels["amd.com/gpu.memory-partitioning-supported"] = supported
        names = {m.name for m in per_gpu if m is not None}
        if len(names) == 1:  # only a node whose GPUs share one mode
            labels["amd.com/gpu.compute-memory-partition"] = names.pop()
    return dict(sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class GaudiHost:
    """What Gaudi feature discovery reads from the host that a model Node does not hold (empty: not known)."""

    revision: str = ""  # PCI revision, e.g. 01
    fw_version: str = ""  # from fw_os_ver, e.g. hl-gaudi2-1.16.0-fw-50.0.0
    fw_os: str = ""  # e.g. Zephyr
    product_name: str = ""  # DMI
    product_serial: str = ""
    sys_vendor: str = ""
    distro: str = ""  # ID_VERSION_ID from os-release, e.g. ubuntu_22.04
    ostree_version: str = ""


def sanitise(value: str) -> str:
    """Gaudi feature discovery's label value rule."""
    return _UNSAFE.sub("_", value).strip("_.-")[:63]


def gaudi_device_type(spec: GpuModelSpec) -> str:
    """What the driver's device_type sysfs file says (GAUDI2, GAUDI3)."""
    return next((n for n in spec.product_names if re.fullmatch(r"GAUDI\d", n)), spec.arch.upper())


def gaudi_labels(node: Node, host: GaudiHost | None = None, *, timestamp: float | None = None) -> dict[str, str]:
    """Gaudi feature discovery's labels on a Gaudi node (none on another vendor's); `habana.ai/hfd.timestamp` only
    when `timestamp` is given."""
    if not node.gpus or node.gpu_vendor != "intel":
        return {}
    host = host or GaudiHost()
    spec = node.gpus[0].model
    release, _, build = node.software.driver_version.partition("-")
    loaded = bool(node.software.driver_version)
    labels = {
        "habana.ai/device.family": "gaudi",
        "habana.ai/device.count": str(len(node.gpus)),
        "habana.ai/device.id": spec.pci_device_id.lower().removeprefix("0x"),
        "habana.ai/device.revision": host.revision,
        "habana.ai/device.type": sanitise(gaudi_device_type(spec)) if loaded else "",
        "habana.ai/driver.version": sanitise(release),
        "habana.ai/driver.hash": sanitise(build),
        "habana.ai/fw.version": sanitise(host.fw_version) if loaded else "",
        "habana.ai/fw.os": sanitise(host.fw_os) if loaded else "",
        "habana.ai/product.name": sanitise(host.product_name),
        "habana.ai/product.serial": sanitise(host.product_serial),
        "habana.ai/sys.vendor": sanitise(host.sys_vendor),
        "habana.ai/distro.type": sanitise(host.distro),
        "habana.ai/distro.ostree-version": sanitise(host.ostree_version),
        "habana.ai/kernel.version": sanitise(node.software.kernel),
    }
    if timestamp is not None:
        labels["habana.ai/hfd.timestamp"] = str(int(timestamp))
    return dict(sorted(labels.items()))


def discovery_labels(node: Node, config: DevicePluginConfig | None = None) -> dict[str, str]:
    """The labels the node's own vendor's feature discovery writes: NVIDIA GFD (under a device-plugin config), AMD's
    node labeller (operator defaults), Gaudi feature discovery; none on a node without accelerators."""
    if node.gpu_vendor == "amd":
        return amd_labels(node)
    if node.gpu_vendor == "intel":
        return gaudi_labels(node)
    return gfd_labels(node, config)
