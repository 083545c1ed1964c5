"""The GPU<->NIC<->CPU affinity read from real `nvidia-smi topo -m` captures (tests/captures/affinity, each with its
.source.txt): H100 (NVIDIA/nccl#1453), H200 (sglang#3817) and a GB200 tray (sglang#11208)."""

from __future__ import annotations

import pytest

from gpufleet.model.affinity import aligned_nics
from gpufleet.parsers.nvidia.topo import parse_topo_matrix
from gpufleet.parsers.nvidia.topo_affinity import affinity_from_topo
from tests.conftest import CAPTURES

AFFINITY = CAPTURES / "affinity"


def read(name: str):  # type: ignore[no-untyped-def]
    return affinity_from_topo(parse_topo_matrix((AFFINITY / name).read_text(), strict=False))


def test_h100_each_gpu_has_its_nic_behind_its_switch_and_its_socket() -> None:
    host = read("topo_m_h100_nccl1453.txt")
    assert host.source == "nvidia-smi topo -m"
    assert [g.index for g in host.gpus] == list(range(8))
    # the NICs are numbered in reverse of the GPUs: GPU0-NIC8 ... GPU7-NIC1, NIC0 is on neither socket's GPUs
    assert [g.nearest_nics() for g in host.gpus] == [[f"NIC{8 - g}"] for g in range(8)]
    assert all(g.nic_links[f"NIC{8 - g.index}"] == "PIX" for g in host.gpus)
    assert [(g.numa_node, g.cpus) for g in (host.gpus[0], host.gpus[7])] == [(0, "0-79"), (1, "80-159")]
    numa = {n.name: n.numa_node for n in host.nics}
    assert numa == {"NIC0": None, **{f"NIC{i}": 1 for i in range(1, 5)}, **{f"NIC{i}": 0 for i in range(5, 9)}}
    pair = aligned_nics(host, [0, 1])
    assert (pair.switch, pair.numa, pair.unaligned) == (("NIC7", "NIC8"), ("NIC5", "NIC6"), ())
    # GPUs from both sockets: each brings its own switch's NIC; the host's NIC0 is never aligned
    assert aligned_nics(host, [3, 4]).switch == ("NIC4", "NIC5")
    assert "NIC0" not in aligned_nics(host, range(8)).best


def test_h200_rows_as_far_as_the_paste_goes() -> None:
    host = read("topo_m_h200_sglang3817.txt")
    assert [(g.index, g.nearest_nics(), g.numa_node, g.cpus) for g in host.gpus] == [
        (0, ["NIC0"], 0, "0,2,4,6,8,10"),
        (1, ["NIC1"], 0, "0,2,4,6,8,10"),
    ]
    assert host.gpus[0].nic_links["NIC4"] == "SYS"
    assert aligned_nics(host, [0]).numa == ("NIC1", "NIC2", "NIC3")


def test_gb200_numa_lists_and_no_pcie_path_to_any_nic() -> None:
    host = read("topo_m_gb200_sglang11208.txt")
    # GPU3's row is cut after its first NIC cell: left out rather than given a wrong nearest NIC
    assert [g.index for g in host.gpus] == [0, 1, 2]
    # the NUMA affinity is a list on Grace ("0,3-9,11-17"): the CPU's node first
    assert [(g.numa_node, g.cpus) for g in host.gpus] == [(0, "0-71"), (0, "0-71"), (1, "72-143")]
    assert set(host.gpus[0].nic_links.values()) == {"SYS"}
    got = aligned_nics(host, [0, 1])
    assert (got.best, got.unaligned) == ((), (0, 1))


@pytest.mark.parametrize("name", ["topo_m_01_a100_nv12_stas00.txt", "topo_m_02_h100_nv18_stas00.txt"])
def test_matrices_without_nics_still_give_numa_and_cpus(name: str) -> None:
    host = affinity_from_topo(parse_topo_matrix((CAPTURES.parent / "corpus" / name).read_text()))
    assert [g.nic_links for g in host.gpus] == [{}] * 8 and host.nics == []
    assert {g.numa_node for g in host.gpus} == {0, 1}
