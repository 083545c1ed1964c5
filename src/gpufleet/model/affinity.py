"""Inside one node: which NUMA node, CPUs and NICs sit nearest each GPU (the GPU<->NIC<->CPU affinity).

A GPU whose RDMA traffic leaves through a NIC on the other socket crosses the SMP interconnect on every transfer;
one whose NIC shares its PCIe switch (GPUDirect RDMA peer to peer) does not. The agent reports this per node
(from sysfs, or `nvidia-smi topo -m`), the control plane keeps it, and placement asks `aligned_nics` which NICs
suit a set of GPUs.

The PCIe link types are nvidia-smi's (`nvidia-smi topo -m` legend), nearest first:

- PIX: through at most one PCIe switch (the GPU and the NIC share a switch)
- PXB: through several PCIe switches, without the host bridge
- PHB: through a PCIe host bridge (the CPU's root complex)
- NODE: between host bridges within one NUMA node
- SYS: across the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)

Plain data, no I/O; a msgspec Struct so it travels in the agent's inventory as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal

import msgspec

PCIE_LINKS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first
SAME_SWITCH = ("PIX", "PXB")  # no host bridge between: peer-to-peer DMA stays below the CPU
SAME_NUMA = ("PHB", "NODE")

PcieLink = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
Label = Annotated[str, msgspec.Meta(max_length=256)]
CpuList = Annotated[str, msgspec.Meta(max_length=4096)]  # as the kernel prints it: "0-55,112-167"
Numa = Annotated[int, msgspec.Meta(ge=0, le=4095)]


class GpuAffinity(msgspec.Struct, omit_defaults=True):
    """One GPU: its NUMA node and local CPUs, and its PCIe link to each NIC of the node (by NIC name)."""

    index: Annotated[int, msgspec.Meta(ge=0, le=4095)]
    pci_bus_id: Label = ""  # domain:bus:device.function as sysfs names it: 0000:18:00.0
    numa_node: Numa | None = None  # None: the platform does not say (sysfs -1, topo -m N/A)
    cpus: CpuList = ""
    nic_links: Annotated[dict[Label, PcieLink], msgspec.Meta(max_length=256)] = {}

    def nearest_nics(self) -> list[str]:
        """The NIC(s) with this GPU's nearest link, in name order; none when it has no NIC links."""
        if not self.nic_links:
            return []
        best = min(PCIE_LINKS.index(link) for link in self.nic_links.values())
        return sorted(name for name, link in self.nic_links.items() if PCIE_LINKS.index(link) == best)


class NicAffinity(msgspec.Struct, omit_defaults=True):
    """One RDMA NIC (mlx5_0): its PCI address, NUMA node and local CPUs, and its network device when known."""

    name: Label
    pci_bus_id: Label = ""
    numa_node: Numa | None = None
    cpus: CpuList = ""
    netdev: Label = ""  # ibp24s0, ens1np0


class HostAffinity(msgspec.Struct, omit_defaults=True):
    """A node's GPUs and NICs with their NUMA nodes, CPUs and the PCIe links between them."""

    source: Label  # where it was read: sysfs, nvidia-smi topo -m, twin
    gpus: Annotated[list[GpuAffinity], msgspec.Meta(max_length=4096)] = []
    nics: Annotated[list[NicAffinity], msgspec.Meta(max_length=256)] = []

    def gpu(self, index: int) -> GpuAffinity | None:
        return next((g for g in self.gpus if g.index == index), None)

    def nic(self, name: str) -> NicAffinity | None:
        return next((n for n in self.nics if n.name == name), None)


class NicAlignment(msgspec.Struct, frozen=True):
    """Which NICs suit a set of GPUs: `switch` share a PCIe switch with one of them (PIX/PXB), `numa` are on the
    NUMA node of one of them without a shared switch. `unaligned` are the GPUs with neither: their traffic would
    cross sockets through any NIC."""

    switch: tuple[str, ...]
    numa: tuple[str, ...]
    unaligned: tuple[int, ...]

    @property
    def best(self) -> tuple[str, ...]:
        """The NICs to use: behind a shared switch if any, else on a shared NUMA node, else none."""
        return self.switch or self.numa


def aligned_nics(affinity: HostAffinity, gpus: Iterable[int]) -> NicAlignment:
    """The NICs aligned with `gpus` on this node: same PCIe switch best, same NUMA node next.

    A NIC counts for the set when it is aligned with at least one GPU of it (a gang's GPUs each use their own
    nearest NIC). Where a GPU has no PCIe link recorded for a NIC, their NUMA nodes decide (equal and known: same
    NUMA node). GPUs the node does not list are unaligned.
    """
    switch: set[str] = set()
    numa: set[str] = set()
    unaligned: list[int] = []
    nic_numa = {n.name: n.numa_node for n in affinity.nics}
    names = sorted(set(nic_numa) | {name for g in affinity.gpus for name in g.nic_links})
    for index in sorted(set(gpus)):
        gpu = affinity.gpu(index)
        if gpu is None:
            unaligned.append(index)
            continue
        near = False
        for name in names:
            link = gpu.nic_links.get(name)
            if link in SAME_SWITCH:
                switch.add(name)
                near = True
            elif link in SAME_NUMA or (
                link is None and gpu.numa_node is not None and gpu.numa_node == nic_numa.get(name)
            ):
                numa.add(name)
                near = True
        if not near:
            unaligned.append(index)
    return NicAlignment(tuple(sorted(switch)), tuple(sorted(numa - switch)), tuple(unaligned))
