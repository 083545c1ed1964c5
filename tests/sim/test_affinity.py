"""The twin's nodes' affinity: a DGX H100's layout (two sockets, each GPU's NIC behind its switch), carried in the
inventory its agents push."""

from __future__ import annotations

from gpufleet.model.affinity import aligned_nics
from gpufleet.sim.affinity import SOCKET_CPUS, twin_affinity
from gpufleet.sim.fleet import node_inventory
from tests.twins import small_twin


def test_dgx_h100_layout() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    host = node_inventory(twin, "n-000").affinity
    assert host is not None and host.source == "twin"
    assert [g.numa_node for g in host.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert host.gpus[0].cpus == SOCKET_CPUS[0] and host.gpus[7].cpus == SOCKET_CPUS[1]
    names = [n.name for n in host.nics]
    assert [g.nearest_nics() for g in host.gpus] == [[n] for n in names]
    assert [n.numa_node for n in host.nics] == [0, 0, 0, 0, 1, 1, 1, 1]
    gpu0 = host.gpus[0].nic_links
    assert [gpu0[n] for n in names] == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert host.gpus[0].pci_bus_id.count(":") == 2  # sysfs's spelling: 0000:bb:dd.f
    pair = aligned_nics(host, [2, 3])
    assert pair.switch == tuple(names[2:4]) and pair.numa == (names[0], names[1])


def test_fewer_nics_than_gpus_share_them_in_order() -> None:
    twin = small_twin(nodes=1, job_nodes=0)
    node = twin.cluster.node("n-000")
    node.nics = node.nics[:2]
    host = twin_affinity(node)
    assert host is not None
    first, second = (n.name for n in host.nics)
    assert [g.index for g in host.gpus if "PIX" in g.nic_links.values()] == [0, 4]  # each socket's first GPU
    assert host.gpus[4].nearest_nics() == [second]
    assert host.gpus[1].nearest_nics() == [first] and host.gpus[1].nic_links[first] == "NODE"
