"""nvidia-smi topo -m and nvlink -s on the corpus captures, plus NIC rows and the NIC legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.sources.topo import expand_cpu_list, parse_nvlink_status, parse_topo_matrix

# topo -m with NIC rows, tab-separated as nvidia-smi writes it (layout of an 8-GPU, 2-NIC excerpt)
WITH_NICS = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tPXB\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPIX\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tPIX\tSYS\t X \n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "\n"
    "NIC Legend:\n\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
)


@pytest.mark.parametrize(
    ("name", "nv", "cpus"),
    [("topo_m_01_a100_nv12_stas00.txt", 12, 24), ("topo_m_02_h100_nv18_stas00.txt", 18, 52)],
)
def test_corpus_matrices(corpus: Path, name: str, nv: int, cpus: int) -> None:
    matrix = parse_topo_matrix((corpus / name).read_text())
    assert matrix.gpus == [f"GPU{i}" for i in range(8)] and matrix.nics == []
    for a in matrix.gpus:
        for b in matrix.gpus:
            assert matrix.link(a, b) == ("X" if a == b else f"NV{nv}")
    assert matrix.nvlinks("GPU0", "GPU5") == nv
    assert [matrix.numa_affinity[g] for g in matrix.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(matrix.cpus("GPU0")) == cpus and matrix.cpus("GPU7")[0] == cpus


def test_nic_rows_and_legend() -> None:
    matrix = parse_topo_matrix(WITH_NICS)
    assert matrix.devices == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert matrix.link("GPU0", "NIC0") == "PXB" and matrix.link("NIC1", "GPU1") == "PIX"
    assert matrix.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert matrix.cpus("GPU1")[:2] == [56, 57] and len(matrix.cpus("GPU0")) == 112
    assert matrix.gpu_numa_id == {"GPU0": None, "GPU1": None}
    assert matrix.nvlinks("GPU0", "NIC0") == 0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no matrix here\n", "no GPU0 column"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNV1\t X\n", "unknown connection type"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV1\n", "has 2 cells|no row for GPU1"),
        ("\tGPU0\nGPU9\t X\n", "not one of the columns"),
    ],
)
def test_bad_matrices(text: str, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment):
        parse_topo_matrix(text)


def test_cpu_lists() -> None:
    assert expand_cpu_list("0-2,8") == [0, 1, 2, 8]
    assert expand_cpu_list("N/A") == []
    with pytest.raises(ParseError):
        expand_cpu_list("0-x")


def test_nvlink_status_healthy(corpus: Path) -> None:
    gpus = parse_nvlink_status((corpus / "nvlink_status_a100_ok_gpud.txt").read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert all(g.active_links == 12 and g.bandwidth_gbps == 300 for g in gpus)
    assert gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486" and gpus[0].name == "NVIDIA A100-SXM4-80GB"


def test_nvlink_status_all_inactive(corpus: Path) -> None:
    [gpu] = parse_nvlink_status((corpus / "nvlink_status_all_inactive_aznhc.txt").read_text())
    assert gpu.index == 6 and gpu.all_inactive and gpu.active_links == 0


def test_nvlink_status_inactive_link_and_errors() -> None:
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    [gpu] = parse_nvlink_status(text)
    assert [(link.link, link.active, link.speed_gbps) for link in gpu.links] == [
        (0, True, 26.562),
        (1, False, None),
    ]
    with pytest.raises(ParseError, match="before any GPU"):
        parse_nvlink_status("\t Link 0: 25 GB/s\n")
    with pytest.raises(ParseError, match="unknown link state"):
        parse_nvlink_status("GPU 0: X (UUID: GPU-1)\n\t Link 0: fast\n")
