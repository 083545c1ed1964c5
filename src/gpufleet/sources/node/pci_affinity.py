"""The node's GPU<->NIC<->CPU affinity read from sysfs (model/affinity.py says what it is).

What the kernel shows, per PCI device (`/sys/bus/pci/devices/<domain:bus:device.function>`):

- `numa_node`: the NUMA node the device's root complex belongs to; -1 where the firmware gives none (a one-socket
  machine, most VMs)
- `local_cpulist`: the CPUs on that node, as a CPU list (`0-55,112-167`)
- the device's directory is a symlink into `/sys/devices/pci<domain>:<bus>/<root port>/<bridge>/.../<device>`:
  its PCIe path from the host bridge down, one component per bridge (a PCIe switch shows as its upstream port
  with a downstream port per slot)

and, per RDMA device, `/sys/class/infiniband/<mlx5_0>/device` is a symlink to its PCI device and
`.../device/net/` names its network interfaces.

The PCIe link between a GPU and a NIC follows nvidia-smi's legend (`nvidia-smi topo -m`): below one host bridge,
the nearest bridge both paths share decides between PIX (that bridge is a PCIe switch both hang off directly:
upstream port, one downstream port each) and PXB (deeper: more switches between); sharing only the host bridge is
PHB; different host bridges are NODE on one NUMA node and SYS across nodes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from gpufleet.model.affinity import GpuAffinity, HostAffinity, NicAffinity, PcieLink

SYS = Path("/sys")
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NVML_BDF = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$"
)
GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x1da3": "habana"}
GPU_CLASSES = ("0x0300", "0x0302", "0x1200")  # VGA, 3D controller, processing accelerator (AMD Instinct, Gaudi)
MAX_DEVICES = 256


def sysfs_bdf(bus_id: str) -> str | None:
    """NVML's `00000000:18:00.0` (or `18:00.0`) as sysfs names the device: `0000:18:00.0`."""
    match = _NVML_BDF.match(bus_id.strip())
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    if domain > 0xFFFF:
        return None
    return f"{domain:04x}:{match.group('bus').lower()}:{match.group('dev').lower()}.{match.group('fn')}"


def pcie_path(device_dir: Path, sys_root: Path = SYS) -> tuple[str, ...]:
    """The device's PCIe path from its host bridge (`pci0000:53`) down to itself; empty when it is not under one
    (a paravirtual device)."""
    real = Path(os.path.realpath(device_dir))
    try:
        parts = real.relative_to(os.path.realpath(sys_root / "devices")).parts
    except ValueError:
        return ()
    start = next((i for i, part in enumerate(parts) if part.startswith("pci")), None)
    if start is None:
        return ()
    path = parts[start:]
    return path if all(_BDF.match(p) for p in path[1:]) and len(path) > 1 else ()


def pcie_link(a: tuple[str, ...], b: tuple[str, ...], numa_a: int | None, numa_b: int | None) -> PcieLink:
    """nvidia-smi's link type between two devices from their PCIe paths (pcie_path) and NUMA nodes.

    A NUMA node the platform does not give (-1, None) counts as the other's: such a machine has one node."""
    if a and b and a[0] == b[0]:
        shared = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            shared += 1
        if shared == 1:
            return "PHB"  # only the host bridge: through the root complex
        # below the shared bridge: a downstream port and the device itself when both hang off one switch
        return "PIX" if max(len(a), len(b)) - shared <= 2 else "PXB"
    if numa_a is None or numa_b is None or numa_a == numa_b:
        return "NODE"
    return "SYS"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _numa(device_dir: Path) -> int | None:
    text = _read(device_dir / "numa_node")
    return int(text) if text.isdigit() and len(text) < 5 else None  # -1: not given


def _cpus(device_dir: Path) -> str:
    text = _read(device_dir / "local_cpulist")
    return text if re.fullmatch(r"[0-9,\-]{1,4096}", text) else ""


def gpu_bus_ids(sys_root: Path = SYS) -> list[str]:
    """The GPUs' PCI addresses as sysfs lists them (display, 3D and accelerator classes of NVIDIA, AMD and
    Habana), in address order: for a node whose GPU library gives none."""
    root = sys_root / "bus/pci/devices"
    found = []
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        if _read(entry / "vendor") in GPU_VENDORS and _read(entry / "class")[:6] in GPU_CLASSES:
            found.append(entry.name)
    return found[:MAX_DEVICES]


def rdma_nics(sys_root: Path = SYS) -> list[tuple[str, Path, str]]:
    """Each RDMA device (`mlx5_0`): its PCI directory and first network interface."""
    root = sys_root / "class/infiniband"
    nics = []
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        device = entry / "device"
        if not device.exists():
            continue
        net = device / "net"
        names = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
        nics.append((entry.name, device, names[0] if names else ""))
    return nics[:MAX_DEVICES]


def read_host_affinity(gpus: Iterable[tuple[int, str]] | None = None, sys_root: Path = SYS) -> HostAffinity | None:
    """The node's affinity from sysfs. `gpus`: (index, PCI address as the GPU library prints it); None lists them
    from sysfs, numbered in address order. None when the node shows no GPU."""
    if gpus is None:
        gpus = list(enumerate(gpu_bus_ids(sys_root)))
    devices = sys_root / "bus/pci/devices"
    nic_rows = []
    for name, device, netdev in rdma_nics(sys_root):
        path = pcie_path(device, sys_root)
        real = Path(os.path.realpath(device))
        bdf = real.name if _BDF.match(real.name) else ""
        nic = NicAffinity(name, pci_bus_id=bdf, numa_node=_numa(device), cpus=_cpus(device), netdev=netdev)
        nic_rows.append((nic, path))
    gpu_rows = []
    for index, bus_id in gpus:
        address = sysfs_bdf(bus_id)
        if address is None or not (devices / address).exists():
            continue
        device = devices / address
        numa, path = _numa(device), pcie_path(device, sys_root)
        links = {nic.name: pcie_link(path, nic_path, numa, nic.numa_node) for nic, nic_path in nic_rows}
        gpu_rows.append(GpuAffinity(index, pci_bus_id=address, numa_node=numa, cpus=_cpus(device), nic_links=links))
    if not gpu_rows:
        return None
    return HostAffinity("sysfs", gpu_rows, [nic for nic, _ in nic_rows])
