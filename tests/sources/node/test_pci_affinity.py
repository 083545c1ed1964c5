"""The node's affinity read from a sysfs tree built as the kernel lays it out, on the PCIe hierarchy of a real
machine (tests/captures/affinity/lspci_tv_v100_cx5_nccl246.*: two V100s and a ConnectX-5 under one switch), and
nvidia-smi's link types from PCIe paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.model.affinity import aligned_nics
from gpufleet.sources.node.pci_affinity import gpu_bus_ids, pcie_link, read_host_affinity, sysfs_bdf

# NVIDIA/nccl#246's lspci -tv, host bridge 0000:53: root port, outer switch, inner switch, then its slots
INNER_SWITCH = ("pci0000:53", "0000:53:00.0", "0000:54:00.0", "0000:55:04.0", "0000:56:00.0")
CX5 = (*INNER_SWITCH, "0000:57:04.0", "0000:58:00.0")
V100_A = (*INNER_SWITCH, "0000:57:08.0", "0000:5c:00.0")
V100_B = (*INNER_SWITCH, "0000:57:0c.0", "0000:60:00.0")


def device(sys: Path, path: tuple[str, ...], *, numa: int, cpus: str, vendor: str, cls: str) -> Path:
    """A PCI device as sysfs shows it: its directory down its PCIe path, its files, and its bus link."""
    where = sys / "devices" / Path(*path)
    where.mkdir(parents=True)
    for name, value in (("numa_node", str(numa)), ("local_cpulist", cpus), ("vendor", vendor), ("class", cls)):
        (where / name).write_text(value + "\n")
    bus = sys / "bus/pci/devices"
    bus.mkdir(parents=True, exist_ok=True)
    (bus / path[-1]).symlink_to(os.path.relpath(where, bus))
    return where


def rdma(sys: Path, name: str, pci: Path, netdev: str) -> None:
    (pci / "net" / netdev).mkdir(parents=True)
    ib = sys / "class/infiniband" / name
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(os.path.relpath(pci, ib))


@pytest.fixture
def v100_node(tmp_path: Path) -> Path:
    sys = tmp_path / "sys"
    nic = device(sys, CX5, numa=0, cpus="0-19,40-59", vendor="0x15b3", cls="0x020700")
    rdma(sys, "mlx5_0", nic, "ib0")
    for path in (V100_A, V100_B):
        device(sys, path, numa=0, cpus="0-19,40-59", vendor="0x10de", cls="0x030200")
    # a second socket's host bridge with a NIC of its own (not in the capture: the NODE/SYS cases)
    other = device(
        sys, ("pci0000:d7", "0000:d7:00.0", "0000:d8:00.0"), numa=1, cpus="20-39,60-79", vendor="0x15b3", cls="0x020700"
    )
    rdma(sys, "mlx5_1", other, "ib1")
    return sys


def test_gpus_under_the_nics_switch_are_pix_and_the_other_socket_is_sys(v100_node: Path) -> None:
    host = read_host_affinity([(0, "00000000:5C:00.0"), (1, "00000000:60:00.0")], v100_node)
    assert host is not None and host.source == "sysfs"
    assert [(g.index, g.pci_bus_id, g.numa_node, g.cpus) for g in host.gpus] == [
        (0, "0000:5c:00.0", 0, "0-19,40-59"),
        (1, "0000:60:00.0", 0, "0-19,40-59"),
    ]
    assert [g.nic_links for g in host.gpus] == [{"mlx5_0": "PIX", "mlx5_1": "SYS"}] * 2
    assert [(n.name, n.pci_bus_id, n.numa_node, n.netdev) for n in host.nics] == [
        ("mlx5_0", "0000:58:00.0", 0, "ib0"),
        ("mlx5_1", "0000:d8:00.0", 1, "ib1"),
    ]
    assert aligned_nics(host, [0, 1]).best == ("mlx5_0",)


def test_gpus_listed_from_sysfs_when_no_library_names_them(v100_node: Path) -> None:
    assert gpu_bus_ids(v100_node) == ["0000:5c:00.0", "0000:60:00.0"]  # the NICs' class is not a GPU's
    host = read_host_affinity(None, v100_node)
    assert host is not None and [g.index for g in host.gpus] == [0, 1]


def test_no_gpu_no_affinity(tmp_path: Path) -> None:
    assert read_host_affinity(None, tmp_path) is None
    assert read_host_affinity([(0, "0000:99:00.0")], tmp_path) is None


def test_unknown_numa_is_one_node(tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    device(sys, ("pci0000:00", "0000:00:02.0", "0000:01:00.0"), numa=-1, cpus="0-7", vendor="0x10de", cls="0x030200")
    nic = device(
        sys, ("pci0000:40", "0000:40:01.0", "0000:41:00.0"), numa=-1, cpus="0-7", vendor="0x15b3", cls="0x020700"
    )
    rdma(sys, "mlx5_0", nic, "ens1")
    host = read_host_affinity(None, sys)
    assert host is not None
    assert host.gpus[0].numa_node is None and host.gpus[0].nic_links == {"mlx5_0": "NODE"}


@pytest.mark.parametrize(
    ("a", "b", "numa", "link"),
    [
        (V100_A, CX5, (0, 0), "PIX"),  # one switch's downstream ports
        # the NIC one level up, under the outer switch: the GPU's side crosses the inner switch too
        (V100_A, ("pci0000:53", "0000:53:00.0", "0000:54:00.0", "0000:55:08.0", "0000:59:00.0"), (0, 0), "PXB"),
        (V100_A, ("pci0000:53", "0000:53:01.0", "0000:70:00.0"), (0, 0), "PHB"),  # another root port, same bridge
        (V100_A, ("pci0000:17", "0000:17:00.0", "0000:18:00.0"), (0, 0), "NODE"),
        (V100_A, ("pci0000:d7", "0000:d7:00.0", "0000:d8:00.0"), (0, 1), "SYS"),
        ((), (), (0, 0), "NODE"),  # a paravirtual device: no path, the NUMA nodes decide
        ((), (), (0, 1), "SYS"),
    ],
)
def test_link_types(a: tuple[str, ...], b: tuple[str, ...], numa: tuple[int, int], link: str) -> None:
    assert pcie_link(a, b, *numa) == link == pcie_link(b, a, numa[1], numa[0])


def test_nvml_addresses_in_sysfs_spelling() -> None:
    assert sysfs_bdf("00000000:1B:00.0") == "0000:1b:00.0" == sysfs_bdf("1b:00.0")
    assert sysfs_bdf("not a bus id") is None
