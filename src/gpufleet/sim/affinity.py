"""The twin's nodes' GPU<->NIC<->CPU affinity, laid out as a DGX H100 is (what its agent would read from sysfs).

DGX H100: two sockets (2x 56-core Xeon 8480C, hyperthreaded: node 0 has CPUs 0-55 and 112-167, node 1 56-111 and
168-223); the first half of the GPUs and the NICs beside them on NUMA node 0, the second half on node 1; each compute
NIC behind the same PCIe switch as its GPU (PIX), the other NICs of its socket NODE, the far socket's SYS. A node
with fewer NICs than GPUs pairs NIC k with GPU k * GPUs // NICs.
"""

from __future__ import annotations

from gpufleet.model.affinity import GpuAffinity, HostAffinity, NicAffinity, PcieLink
from gpufleet.model.node import Node
from gpufleet.sources.node.pci_affinity import sysfs_bdf

SOCKET_CPUS = ("0-55,112-167", "56-111,168-223")


def _socket(index: int, count: int) -> int:
    return 0 if count < 2 or index < count // 2 else 1


def twin_affinity(node: Node) -> HostAffinity | None:
    """The node's affinity, or None for a node without GPUs."""
    gpus = sorted(node.gpus, key=lambda g: g.index)
    if not gpus:
        return None
    nics = sorted(node.nics, key=lambda n: (n.rail, n.name))
    count = len(gpus)
    paired = {nic.name: gpus[k * count // len(nics)].index for k, nic in enumerate(nics)}
    socket_of_gpu = {g.index: _socket(i, count) for i, g in enumerate(gpus)}
    nic_rows = [
        NicAffinity(
            nic.name,
            numa_node=socket_of_gpu[paired[nic.name]],
            cpus=SOCKET_CPUS[socket_of_gpu[paired[nic.name]]],
            netdev=nic.netdev or f"ib{nic.rail}",
        )
        for nic in nics
    ]
    gpu_rows = []
    for g in gpus:
        socket = socket_of_gpu[g.index]
        links: dict[str, PcieLink] = {}
        for nic in nic_rows:
            links[nic.name] = "PIX" if paired[nic.name] == g.index else ("NODE" if nic.numa_node == socket else "SYS")
        bdf = sysfs_bdf(g.pci_bus_id) or ""
        gpu_rows.append(
            GpuAffinity(g.index, pci_bus_id=bdf, numa_node=socket, cpus=SOCKET_CPUS[socket], nic_links=links)
        )
    return HostAffinity("twin", gpu_rows, nic_rows)
