"""This host as an agent reads it: InfiniBand ports from sysfs into the frame (counters and link state), and the
node's inventory (versions from NVML, /proc and uname; GPUs from NVML; HCA ports from sysfs).

Every part is optional: a host without NVML still has an inventory (no GPUs), one without InfiniBand has no ports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet import __version__
from gpufleet.catalog import load_ib_counters
from gpufleet.model.observe import GpuInfo, NodeInventory, PortInfo
from gpufleet.sources.ib_sysfs import HcaSnapshot, read_sysfs
from gpufleet.telemetry.frame import IbPort, MetricFrame

SYSFS_IB = Path("/sys/class/infiniband")
PROC_DRIVER = Path("/proc/driver/nvidia/version")
_PROC_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")


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
        for hca in read_sysfs(self.root):
            for port in hca.ports:
                i = index.get((hca.hca, port.port))
                if i is None:
                    continue
                frame.ib_up[i] = 1.0 if port.up else 0.0
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


def gpu_inventory(nvml: Any | None) -> tuple[list[GpuInfo], str]:
    """GPUs and the CUDA version the driver supports, through NVML (an NvmlSource's bindings), or none."""
    if nvml is None:
        return [], ""
    lib, gpus = nvml.nvml, []
    for i, h in enumerate(nvml.handles):

        def get(fn: str, *args: Any, handle: Any = h) -> Any:
            try:
                value = getattr(lib, fn)(handle, *args)
            except lib.NVMLError:
                return None
            return value.decode() if isinstance(value, bytes) else value

        mig = get("nvmlDeviceGetMigMode")
        memory = get("nvmlDeviceGetMemoryInfo")
        pci = get("nvmlDeviceGetPciInfo")
        gpus.append(
            GpuInfo(
                index=i,
                uuid=str(get("nvmlDeviceGetUUID") or ""),
                model=str(get("nvmlDeviceGetName") or ""),
                pci_bus_id=(pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)) if pci else "",
                serial=str(get("nvmlDeviceGetSerial") or ""),
                mig_mode=bool(mig[0]) if isinstance(mig, (list, tuple)) and mig else None,
                memory_mib=float(memory.total) / 2**20 if memory is not None else None,
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


def port_speeds(frame: MetricFrame, inventory: NodeInventory) -> np.ndarray:
    """Each frame port's rate in Gb/s (400 where sysfs did not say), for the symbol-error budget."""
    rates = {p.name: p.rate_gbps for p in inventory.ports}
    return np.array([rates.get(f"{p.hca}/{p.port}") or 400.0 for p in frame.ib_ports], dtype=np.float64)
