"""nvidia-smi topo -m and nvlink -s on the corpus captures, plus NIC rows and the NIC legend."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.nvidia.topo import expand_cpu_list, parse_nvlink_status, parse_topo_matrix, read_nvlink_status

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


def test_single_spaced_columns_and_a_header_at_the_margin() -> None:
    # as a paste loses the tabs (environment dumps print the matrix this way)
    text = (
        "GPU0 NIC0 NIC1 CPU Affinity NUMA Affinity GPU NUMA ID\n"
        "GPU0 X NODE SYS 16-31 1 N/A\nNIC0 NODE X SYS\nNIC1 SYS SYS X\n"
        "\nNIC Legend:\n\nNIC0: mlx5_2\nNIC1: mlx5_bond_0\n"
    )
    matrix = parse_topo_matrix(text)
    assert matrix.devices == ["GPU0", "NIC0", "NIC1"] and matrix.cpu_affinity == {"GPU0": "16-31"}
    assert matrix.numa_affinity == {"GPU0": 1} and matrix.nic_names["NIC1"] == "mlx5_bond_0"


def test_lenient_matrix_says_where_it_is_cut(corpus: Path) -> None:
    text = (corpus / "topo_m_01_a100_nv12_stas00.txt").read_text()
    rows = parse_topo_matrix(text[: text.index("GPU6  NV12")], strict=False)
    assert rows.cut_short == "the matrix ends before the rows for GPU6, GPU7" and len(rows.rows) == 6
    mid_row = parse_topo_matrix(text[: text.index("GPU7  NV12") + 20], strict=False)
    assert mid_row.cut_short == "the row for GPU7 stops after 3 of its 8 columns"
    no_affinity = parse_topo_matrix(text[: text.rindex("24-47")], strict=False)
    assert no_affinity.cut_short == "the row for GPU7 stops before its CPU affinity"
    assert parse_topo_matrix(text, strict=False).cut_short is None


def test_product_names_pasted_alongside_are_kept() -> None:
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
    assert parse_topo_matrix(WITH_NICS + listing).product_names == ["NVIDIA H100 80GB HBM3"] * 2


def test_absurd_numbers_are_parse_errors_or_read_as_unknown() -> None:
    with pytest.raises(ParseError, match="unknown connection type"):
        parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tNV" + "9" * 5000 + "\nGPU1\tNV1\t X\n")
    huge = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-99999999999\t" + "9" * 5000 + "\n")
    assert huge.numa_affinity == {"GPU0": None}
    with pytest.raises(ParseError, match="bad CPU list"):
        huge.cpus("GPU0")
    with pytest.raises(ParseError, match="more than"):
        expand_cpu_list("0-999999")


def test_nvlink_status_as_other_drivers_print_it() -> None:
    text = (
        "GPU 0: NVIDIA A100-PCIE-40GB\n"  # UUID left out by the one who pasted it
        "NVML: Unable to retrieve Nvlink information as all links are inActive\n"
        "GPU 1: NVIDIA GeForce RTX 5090 (UUID: GPU-2)\n"
        "Device does not have or support Nvlink\n"
        "GPU 2: NVIDIA GB200 (UUID: GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde)\n"
        "Link 0: 53.125 GB/s\n"
        "         Link 1: ERR!\n"
        "\t Link 2: Active\n"
    )
    a100, geforce, gb200 = parse_nvlink_status(text)
    assert a100.all_inactive and a100.uuid == "" and geforce.unsupported and not geforce.links
    assert [(link.state, link.speed_gbps) for link in gb200.links] == [
        ("active", 53.125),
        ("unreadable", None),
        ("active", None),
    ]
    assert gb200.lines[0].startswith("GPU 2:") and gb200.active_links == 2


def test_nvlink_lenient_reading() -> None:
    status = read_nvlink_status("\t Link 0: 25 GB/s\nGPU 1: X (UUID: GPU-1)\n\t Link 0: 25 GB", strict=False)
    assert [g.index for g in status.gpus] == [-1, 1]
    assert status.cut_short is not None and "25 GB" in status.cut_short
    assert status.gpus[1].links[0].state == "unknown" and len(status.problems) == 1
    cut_header = read_nvlink_status("GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-9667d95e", strict=False)
    assert cut_header.cut_short == "the last line does not read as nvlink -s output"
