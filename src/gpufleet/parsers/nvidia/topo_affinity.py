"""A node's GPU<->NIC<->CPU affinity (model/affinity.py) from `nvidia-smi topo -m` as parsed by `topo.py`.

Each GPU row gives the GPU's PCIe link to every NIC column, its CPU affinity and its NUMA affinity. NICs are named
by the NIC Legend (NIC0: mlx5_0) where the text has it, else by their column heads (older drivers print mlx5_0 as
the head; a cut paste keeps NIC0). A NIC's NUMA node is not printed: it is the node of the GPUs it shares a PCIe
switch or host bridge with (PIX, PXB, PHB or NODE), when those agree.

On Grace (GH200, GB200) the NUMA affinity is a list: the CPU's node, then the GPU memory nodes; the GPU's NUMA node
here is the first, the CPU's, since that is where its CPUs and their memory are.
"""

from __future__ import annotations

from typing import cast

from gpufleet.model.affinity import PCIE_LINKS, GpuAffinity, HostAffinity, NicAffinity, PcieLink
from gpufleet.parsers.nvidia.topo import TopoMatrix

SOURCE = "nvidia-smi topo -m"


def affinity_from_topo(matrix: TopoMatrix) -> HostAffinity:
    """The affinity the matrix shows: its NIC columns and its GPU rows (a GPU whose row is missing or cut before
    its last NIC is left out)."""
    names = {nic: matrix.nic_names.get(nic, nic) for nic in matrix.nics}
    gpus: list[GpuAffinity] = []
    for device in matrix.gpus:
        links: dict[str, PcieLink] = {}
        for nic in matrix.nics:
            link = matrix.links.get((device, nic), "")
            if link in PCIE_LINKS:
                links[names[nic]] = cast(PcieLink, link)
        if device not in matrix.rows or len(links) < len(matrix.nics):
            continue  # a row cut short would name a wrong nearest NIC
        nodes = matrix.numa_lists.get(device) or []
        numa = matrix.numa_affinity.get(device)
        gpus.append(
            GpuAffinity(
                int(device[3:]),
                numa_node=numa if numa is not None else (nodes[0] if nodes else None),
                cpus=matrix.cpu_affinity.get(device, "") if matrix.cpus(device) else "",
                nic_links=links,
            )
        )
    nics = []
    for nic in matrix.nics:
        near = {g.numa_node for g in gpus if g.nic_links.get(names[nic]) in ("PIX", "PXB", "PHB", "NODE")}
        nics.append(NicAffinity(names[nic], numa_node=near.pop() if len(near) == 1 and None not in near else None))
    return HostAffinity(SOURCE, gpus, nics)
