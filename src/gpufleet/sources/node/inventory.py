"""This host as an agent reads it: InfiniBand ports from sysfs into the frame (counters and link state), and the
node's inventory (versions from NVML, /proc and uname; GPUs from NVML; HCA ports from sysfs).

Every part is optional: a host without NVML still has an inventory (no GPUs), one without InfiniBand has no ports.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet import __version__
from gpufleet.catalog import load_ib_counters
from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.catalog.mig import mig_profiles_for
from gpufleet.errors import NotFoundError
from gpufleet.model.observe import GpuInfo, MigInfo, NodeInventory, PortInfo
from gpufleet.parsers.infiniband.sysfs import HcaSnapshot
from gpufleet.sources.gpu.nvml_state import fabric_info
from gpufleet.sources.infiniband.sysfs import read_sysfs
from gpufleet.telemetry.fields import IB_PORT_RATE
from gpufleet.telemetry.frame import IbPort, MetricFrame

SYSFS_IB = Path("/sys/class/infiniband")
PROC_DRIVER = Path("/proc/driver/nvidia/version")
_PROC_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")
MAX_ID = 255  # GI ids, starts and sizes as the contract bounds them
MAX_MIG_INSTANCES = 64


def ib_ports(root: Path = SYSFS_IB, hostname: str = "") -> list[IbPort]:
    """The HCA ports under `root` (none when the host has no InfiniBand)."""
    if not root.is_dir():
        return []
    return [
        IbPort(hca=h.hca, port=p.port, rail=_rail(h.hca), hostname=hostname) for h in read_sysfs(root) for p in h.ports
    ]


def _rail(hca: str) -> str:
    digits = re.sub(r"\D", "", hca)
    return digits or ""


class IbSysfsSource:
    """Port counters (under the catalog's metric names) and link state, read from sysfs each collection."""

    name = "ib-sysfs"

    def __init__(self, root: Path = SYSFS_IB) -> None:
        self.root = root
        self.counters = load_ib_counters()

    def collect(self, frame: MetricFrame) -> None:
        index = {(p.hca, p.port): i for i, p in enumerate(frame.ib_ports)}
        if not index:
            return
        rate = frame.ib(IB_PORT_RATE) if frame.has_ib_field(IB_PORT_RATE) else None
        for hca in read_sysfs(self.root):
            for port in hca.ports:
                i = index.get((hca.hca, port.port))
                if i is None:
                    continue
                frame.ib_up[i] = 1.0 if port.up else 0.0
                if rate is not None:
                    rate[i] = port.rate_gbps * 1e9 / 8 if port.rate_gbps else np.nan
                for name, value in port.counters.items():
                    info = self.counters.get(name)
                    if info is not None:
                        frame.ib(info.metric)[i] = float(value) * (4 if info.octets_div4 else 1)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def driver_version(proc: Path = PROC_DRIVER) -> str:
    """The loaded kernel module's version, as /proc/driver/nvidia/version states it ("" when not loaded)."""
    match = _PROC_VERSION.search(_read(proc))
    return match.group("v") if match else ""


def _guid(gid: str) -> str:
    """A port GUID from GID 0, whose upper half is the subnet prefix:
    fe80:0000:0000:0000:0c42:a103:0017:6a2e -> 0x0c42a10300176a2e."""
    parts = gid.split(":")
    return "0x" + "".join(p.zfill(4) for p in parts[4:8]) if len(parts) == 8 else ""


def port_inventory(root: Path = SYSFS_IB, snapshots: list[HcaSnapshot] | None = None) -> list[PortInfo]:
    if not root.is_dir():
        return []
    out = []
    for hca in snapshots if snapshots is not None else read_sysfs(root):
        net = root / hca.hca / "device" / "net"
        netdevs = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        for port in hca.ports:
            base = root / hca.hca / "ports" / str(port.port)
            lid_text = _read(base / "lid")
            try:
                lid: int | None = int(lid_text, 16) if lid_text else None
            except ValueError:
                lid = None
            out.append(
                PortInfo(
                    hca=hca.hca,
                    port=port.port,
                    rail=_rail(hca.hca),
                    guid=_guid(_read(base / "gids" / "0")) or hca.attributes.get("node_guid", ""),
                    lid=lid,
                    rate_gbps=port.rate_gbps,
                    link_layer=port.link_layer or "",
                    netdev=netdevs[port.port - 1] if 0 < port.port <= len(netdevs) else "",
                )
            )
    return out


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _call(lib: Any, fn: str, *args: Any) -> Any:
    """One NVML call, or None when it fails (NotSupported on a GPU without MIG, NoPermission, a lost GPU) or the
    bindings predate it: one missing reading leaves the rest of the inventory standing."""
    call = getattr(lib, fn, None)
    if call is None:
        return None
    try:
        value = call(*args)
    except lib.NVMLError:
        return None
    return _text(value) if isinstance(value, bytes) else value


def _catalog_profiles(model: str) -> dict[int, str]:
    """Profile names by GPU-instance profile id (19 -> 1g.10gb) for a GPU model the catalog knows, else none."""
    try:
        geometry = get_gpu_model(model).mig_geometry
        return {p.profile_id: p.name for p in mig_profiles_for(geometry).values()} if geometry else {}
    except NotFoundError:
        return {}


def _gpu_instance_profiles(lib: Any, handle: Any, model: str) -> dict[int, tuple[str, int]]:
    """The GPU-instance profiles this GPU offers, by profile id: the name NVML gives it ("MIG 3g.40gb" -> 3g.40gb)
    and how many instances of it may exist. Drivers without the v2 profile info have no names; the catalog's stand
    in for those."""
    known = _catalog_profiles(model)
    out: dict[int, tuple[str, int]] = {}
    for enum in range(int(getattr(lib, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
        info = _call(lib, "nvmlDeviceGetGpuInstanceProfileInfo", handle, enum)
        if info is None:
            info = _call(lib, "nvmlDeviceGetGpuInstanceProfileInfo", handle, enum, 1)
        if info is None or not info.instanceCount:
            continue  # a profile this GPU does not offer
        name = _text(getattr(info, "name", b"")).strip().removeprefix("MIG ").strip()
        out[int(info.id)] = (name or known.get(int(info.id), ""), int(info.instanceCount))
    return out


def _gpu_instances(lib: Any, handle: Any, profile_id: int, capacity: int) -> list[Any]:
    """The GPU instances of one profile (the array NVML fills holds at most the profile's instance count)."""
    array = getattr(lib, "c_nvmlGpuInstance_t", None)
    if array is None or capacity <= 0:
        return []
    found, count = (array * capacity)(), ctypes.c_uint(0)
    if _call(lib, "nvmlDeviceGetGpuInstances", handle, profile_id, found, ctypes.byref(count)) is None:
        return []
    return list(found[: min(count.value, capacity)])


def _mig_devices(lib: Any, handle: Any) -> dict[int, tuple[str, int | None]]:
    """Each GPU instance's MIG device (its lowest compute instance), by GI id: the MIG-... UUID and the CI id."""
    out: dict[int, tuple[str, int | None]] = {}
    for i in range(int(_call(lib, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0)):
        device = _call(lib, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        if device is None:
            continue  # an unused slot answers NotFound
        gi = _call(lib, "nvmlDeviceGetGpuInstanceId", device)
        ci = _call(lib, "nvmlDeviceGetComputeInstanceId", device)
        if gi is None:
            continue
        seen = out.get(int(gi))
        if seen is None or (ci is not None and (seen[1] is None or int(ci) < seen[1])):
            out[int(gi)] = (str(_call(lib, "nvmlDeviceGetUUID", device) or ""), None if ci is None else int(ci))
    return out


def mig_inventory(lib: Any, handle: Any, model: str) -> list[MigInfo]:
    """The GPU instances of a MIG-enabled GPU, each with its placement on the memory-slice axis and its MIG device;
    whatever NVML will not say is left out or empty, never an error."""
    devices = _mig_devices(lib, handle)
    out = []
    for profile_id, (name, capacity) in _gpu_instance_profiles(lib, handle, model).items():
        for instance in _gpu_instances(lib, handle, profile_id, capacity):
            info = _call(lib, "nvmlGpuInstanceGetInfo", instance)
            if info is None:
                continue
            gi, start, size = int(info.id), int(info.placement.start), int(info.placement.size)
            if not (gi <= MAX_ID and start <= MAX_ID and 1 <= size <= MAX_ID):
                continue  # outside the contract: the whole push would be refused for it
            uuid, ci = devices.get(gi, ("", None))
            out.append(MigInfo(profile=name, gi_id=gi, start=start, size=size, uuid=uuid, ci_id=ci))
    return sorted(out, key=lambda m: (m.start, m.gi_id))[:MAX_MIG_INSTANCES]


def gpu_inventory(nvml: Any | None) -> tuple[list[GpuInfo], str]:
    """GPUs and the CUDA version the driver supports, through NVML (an NvmlSource's bindings), or none."""
    if nvml is None:
        return [], ""
    lib, gpus = nvml.nvml, []
    for i, h in enumerate(nvml.handles):
        mig = _call(lib, "nvmlDeviceGetMigMode", h)
        mig_on = bool(mig[0]) if isinstance(mig, (list, tuple)) and mig else None
        memory = _call(lib, "nvmlDeviceGetMemoryInfo", h)
        pci = _call(lib, "nvmlDeviceGetPciInfo", h)
        limit_mw = _call(lib, "nvmlDeviceGetEnforcedPowerLimit", h)
        model = str(_call(lib, "nvmlDeviceGetName", h) or "")
        fabric = fabric_info(lib, h)
        joined = fabric is not None and fabric.joined  # a clique and cluster mean something once registered
        gpus.append(
            GpuInfo(
                index=i,
                uuid=str(_call(lib, "nvmlDeviceGetUUID", h) or ""),
                model=model,
                pci_bus_id=_text(pci.busId) if pci else "",
                serial=str(_call(lib, "nvmlDeviceGetSerial", h) or ""),
                mig_mode=mig_on,
                memory_mib=float(memory.total) / 2**20 if memory is not None else None,
                power_limit_w=float(limit_mw) / 1000.0 if isinstance(limit_mw, int | float) else None,  # mW
                mig=mig_inventory(lib, h, model) if mig_on else [],
                clique_id=fabric.clique_id if fabric is not None and joined else None,
                cluster_uuid=fabric.cluster_uuid if fabric is not None and joined else "",
            )
        )
    cuda = ""
    try:
        version = int(lib.nvmlSystemGetCudaDriverVersion_v2())
        cuda = f"{version // 1000}.{version % 1000 // 10}"
    except (lib.NVMLError, AttributeError):
        pass
    return gpus, cuda


def read_inventory(
    hostname: str,
    nvml: Any | None = None,
    ib_root: Path = SYSFS_IB,
    labels: dict[str, str] | None = None,
    fabric_manager: str = "",
) -> NodeInventory:
    gpus, cuda = gpu_inventory(nvml)
    driver = getattr(nvml, "driver", "") or driver_version()
    return NodeInventory(
        hostname=hostname,
        driver=driver,
        cuda=cuda,
        kernel=os.uname().release,
        fabric_manager=fabric_manager,
        agent_version=__version__,
        gpus=gpus,
        ports=port_inventory(ib_root),
        labels=dict(labels or {}),
    )
