"""The node affinity type and `aligned_nics` on hand-built layouts (the captures' layouts are tested with their
readers)."""

from __future__ import annotations

import msgspec
import pytest

from gpufleet.model.affinity import GpuAffinity, HostAffinity, NicAffinity, aligned_nics
from gpufleet.model.observe import NodeInventory


def dgx_h100_like() -> HostAffinity:
    """Two sockets; GPUs 0-3 and NICs 0-3 on NUMA 0, 4-7 on NUMA 1; NIC i behind GPU i's PCIe switch."""
    nics = [NicAffinity(f"mlx5_{i}", numa_node=i // 4) for i in range(8)]
    gpus = []
    for g in range(8):
        links = {}
        for n in range(8):
            links[f"mlx5_{n}"] = "PIX" if n == g else ("NODE" if n // 4 == g // 4 else "SYS")
        gpus.append(
            GpuAffinity(g, numa_node=g // 4, cpus="0-55,112-167" if g < 4 else "56-111,168-223", nic_links=links)
        )
    return HostAffinity("test", gpus, nics)


def test_nearest_nic_is_the_one_behind_the_same_switch() -> None:
    host = dgx_h100_like()
    assert [host.gpus[g].nearest_nics() for g in (0, 5)] == [["mlx5_0"], ["mlx5_5"]]
    assert GpuAffinity(0).nearest_nics() == []


def test_aligned_nics_prefers_the_shared_switch_and_keeps_the_numa_peers_apart() -> None:
    got = aligned_nics(dgx_h100_like(), [0, 1])
    assert got.switch == ("mlx5_0", "mlx5_1")
    assert got.numa == ("mlx5_2", "mlx5_3")
    assert got.unaligned == ()
    assert got.best == ("mlx5_0", "mlx5_1")


def test_a_gpu_without_a_nic_on_its_socket_is_unaligned() -> None:
    # only the NUMA-1 NICs exist: GPU 0's traffic crosses the socket through either
    host = dgx_h100_like()
    host = HostAffinity(
        "test",
        [
            GpuAffinity(
                g.index, numa_node=g.numa_node, nic_links={k: v for k, v in g.nic_links.items() if k >= "mlx5_4"}
            )
            for g in host.gpus
        ],
        host.nics[4:],
    )
    got = aligned_nics(host, [0, 4, 9])
    assert got.switch == ("mlx5_4",)
    assert got.numa == ("mlx5_5", "mlx5_6", "mlx5_7")
    assert got.unaligned == (0, 9)  # 9: not a GPU of this node


def test_numa_nodes_decide_where_no_link_was_read() -> None:
    host = HostAffinity(
        "sysfs",
        [GpuAffinity(0, numa_node=1), GpuAffinity(1)],
        [NicAffinity("mlx5_0", numa_node=0), NicAffinity("mlx5_1", numa_node=1)],
    )
    got = aligned_nics(host, [0, 1])
    assert (got.switch, got.numa, got.unaligned) == ((), ("mlx5_1",), (1,))  # GPU 1's NUMA node is unknown


def test_affinity_travels_in_the_inventory() -> None:
    inventory = NodeInventory("n1", affinity=dgx_h100_like())
    back = msgspec.json.decode(msgspec.json.encode(inventory), type=NodeInventory)
    assert back == inventory
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"hostname": "n1", "affinity": {"source": "x", "gpus": [{"index": 0, "nic_links": {"mlx5_0": "NV4"}}]}}',
            type=NodeInventory,
        )
