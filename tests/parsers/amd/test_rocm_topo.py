"""`rocm-smi --showtopo` on a real MI300-series capture (tests/captures/affinity, modelscope/ms-swift's AMD page)."""

from __future__ import annotations

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsers.amd.rocm_topo import affinity_from_rocm_topo, parse_rocm_topology
from tests.conftest import CAPTURES

MI300 = CAPTURES / "affinity" / "rocm_smi_showtopo_mi300_msswift.txt"


def test_mi300_hive_every_gpu_one_xgmi_hop_from_every_other() -> None:
    topo = parse_rocm_topology(MI300.read_text())
    assert topo.gpus == list(range(8))
    assert topo.weight[(0, 5)] == "15" and topo.hops[(3, 4)] == "1" and topo.link_type[(2, 2)] == "0"
    assert topo.xgmi_peers(0) == list(range(1, 8))
    assert topo.numa_node == {g: g // 4 for g in range(8)} == topo.numa_affinity


def test_mi300_affinity_is_the_numa_nodes() -> None:
    host = affinity_from_rocm_topo(parse_rocm_topology(MI300.read_text()))
    assert host.source == "rocm-smi --showtopo"
    assert [(g.index, g.numa_node, g.nic_links) for g in host.gpus] == [(g, g // 4, {}) for g in range(8)]


def test_one_section_alone_and_the_older_gpu_spelling() -> None:
    numa = "GPU 0          : (Topology) Numa Node: -1\nGPU 0          : (Topology) Numa Affinity: -1\n"
    topo = parse_rocm_topology("=== Numa Nodes ===\n" + numa)
    assert topo.gpus == [0] and topo.numa_node == {0: None}


def test_a_row_cut_short_and_other_text_are_errors_that_say_so() -> None:
    text = MI300.read_text()
    cut = text.replace(
        "GPU5   15           15           15           15           15           0            15           15",
        "GPU5   15",
        1,
    )
    with pytest.raises(ParseError, match="GPU5 has 1 cells for 8 GPUs"):
        parse_rocm_topology(cut)
    with pytest.raises(ParseError, match="none of the topology sections"):
        parse_rocm_topology("GPU[0] : Card Series: AMD Instinct MI300X\n")
