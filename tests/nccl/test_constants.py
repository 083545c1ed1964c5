from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.nccl.constants import ALGOS, PROTOS, available_versions, load_constants

ALL_TABLES = ("2.18", "2.20", "2.21", "2.22", "2.23", "2.24", "2.25", "2.27", "2.28", "2.29", "2.30")


def test_versions_available() -> None:
    assert set(ALL_TABLES) <= set(available_versions())


@pytest.mark.parametrize("version", ALL_TABLES)
def test_tables_complete(version: str) -> None:
    c = load_constants(version)
    for algo in ALGOS:
        assert len(c.base_latency[algo]) == 3
        for hw in ("NVLINK", "PCI", "NET"):
            assert len(c.hw_latency[hw][algo]) == 3
    for proto in PROTOS:
        assert len(c.tree_correction[proto]) == 24


def test_v230_values_match_reference() -> None:
    c = load_constants("2.30.7")
    assert c.version == "2.30"
    assert c.base("Ring", "LL") == 6.6
    assert c.hw("NET", "NVLSTree", "Simple") == 20.9
    assert c.ll_max_bw[2] == (141.0, 45.0, 35.0)
    assert c.per_ch_max_nvls_tree_bw is not None and c.per_ch_max_nvls_tree_bw[2] == (0.0, 57.7, 45.5)
    assert c.nvls_efficiency == (0.0, 0.0, 0.85, 0.74)


def test_version_drift() -> None:
    old = load_constants("2.18.5")
    mid = load_constants("2.21.5")
    assert old.version == "2.18" and mid.version == "2.21"
    assert old.ll_max_bw[2] == old.ll_max_bw[1]  # Hopper LL caps equal Ampere's up to 2.18
    assert old.variant.ring_ll == "quarter" and mid.variant.ring_ll == "half"
    assert mid.hw("NET", "NVLSTree", "Simple") == 14


@pytest.mark.parametrize(
    ("release", "table"),
    [
        ("2.18.5", "2.18"),
        ("2.19.4", "2.20"),
        ("2.20.5", "2.20"),
        ("2.21.5", "2.21"),
        ("2.22.3", "2.22"),
        ("2.23.4", "2.23"),
        ("2.24.3", "2.24"),
        ("2.25.1", "2.25"),
        ("2.26.6", "2.25"),
        ("2.27.7", "2.27"),
        ("2.28.9", "2.28"),
        ("2.29.7", "2.29"),
        ("2.30.7", "2.30"),
    ],
)
def test_each_release_reads_its_own_table(release: str, table: str) -> None:
    assert load_constants(release).version == table


def test_v2_20_5_terms() -> None:
    """NVIDIA/nccl v2.20.5-1 src/graph/tuning.cc: hwLat NVLINK NVLS 23, Ring LL busBw/4, Hopper LL caps = Ampere's."""
    c = load_constants("2.20.5")
    assert c.hw("NVLINK", "NVLS", "Simple") == 23 and c.hw("NVLINK", "NVLSTree", "Simple") == 23
    assert c.variant.ring_ll == "quarter"
    assert c.ll_max_bw[2] == (87.7, 22.5, 19.0)
    assert c.hw("NVLINK", "Tree", "Simple") == 28 and c.base("Tree", "Simple") == 0


def test_v2_21_5_terms() -> None:
    """v2.21.5-1 tuning.cc: NVLS 25, Hopper LL caps 141/45/35, no Blackwell index (sm100 reads the Hopper row);
    transport/nvls.cc NVLS_NCHANNELS 16; getAlgoTime still rescales bw by the channels launched."""
    c = load_constants("2.21.5")
    assert c.hw("NVLINK", "NVLS", "Simple") == 25
    assert c.ll_max_bw[2] == (141.0, 45.0, 35.0)
    assert c.ll_max_bw[3] == c.ll_max_bw[2] and c.per_ch_max_tree_bw[3] == c.per_ch_max_tree_bw[2]
    assert c.nvls_channels.blackwell_single_node == 16
    assert c.variant.channel_scaled_time and not c.variant.pat


def test_v2_22_3_drops_channel_scaling() -> None:
    """v2.22.3-1 ncclTopoGetAlgoTime no longer has `bw = bw / nChannels * info->nChannels`."""
    assert not load_constants("2.22.3").variant.channel_scaled_time


def test_v2_23_4_terms() -> None:
    """v2.23.4-1 tuning.cc: Tree/Simple baseLat 8.4, hwLat 4.0 (NVLink, PCI) and 14 (NET); PAT busBw x0.85;
    ppn=1 takes the Tree NET latency; 2*(nNodes-1) inter-node ring steps; the ppn<2 LL128 discount is gone."""
    c = load_constants("2.23.4")
    assert c.base("Tree", "Simple") == 8.4
    assert (c.hw("NVLINK", "Tree", "Simple"), c.hw("PCI", "Tree", "Simple"), c.hw("NET", "Tree", "Simple")) == (
        4.0,
        4.0,
        14,
    )
    v = c.variant
    assert v.pat and v.pat_bw_factor == 0.85
    assert v.ppn1_uses_tree_net_latency and v.ring_allreduce_inter_steps == "nodes_minus_one"
    assert v.ring_ll128_low_ppn is None
    assert load_constants("2.24.3").variant.pat_bw_factor == 0.75  # v2.24.3-1: PAT busBw x0.75


def test_v2_26_6_blackwell_terms() -> None:
    """v2.26.6-1: tuning.cc Blackwell index at 2x the Hopper caps; device.h MAXCHANNELS 64; transport/nvls.cc
    NVLS_NCHANNELS_SM100 32 (the NVL-domain 24 arrived in v2.27.7-1)."""
    c = load_constants("2.26.6")
    assert c.ll_max_bw[3] == (282.0, 90.0, 70.0)
    assert c.per_ch_max_ring_ll128_bw[3] == (73.4, 73.4, 73.4)
    assert c.per_ch_max_tree_bw[3] == (77.4, 82.8, 72.0)
    assert c.variant.max_channels == 32
    assert (c.nvls_channels.blackwell_single_node, c.nvls_channels.blackwell_multi_node) == (32, 32)
    assert load_constants("2.27.7").nvls_channels.blackwell_single_node == 24


def test_v2_28_to_v2_30_blackwell_rows() -> None:
    """ncclTunerConstantsDefaults: v2.28.9-1 NVLSTree NET 20.9, ring LL128 Blackwell {2*36.7, 34.6, 2*36.7},
    NVLSTree Blackwell N4 43.8, no NVLSTree size correction; v2.29.7-1 ring LL128 Blackwell 40 and the NVLSTree
    correction on sm100 with x86; v2.30.7-1 NVLSTree Blackwell N4 80."""
    c28, c29, c30 = load_constants("2.28.9"), load_constants("2.29.7"), load_constants("2.30.7")
    assert c28.hw("NET", "NVLSTree", "Simple") == 20.9
    assert c28.per_ch_max_ring_ll128_bw[3] == (73.4, 34.6, 73.4)
    assert c28.per_ch_max_nvls_tree_bw is not None and c28.per_ch_max_nvls_tree_bw[3] == (0.0, 96.0, 43.8)
    assert not c28.variant.nvlstree_size_correction
    assert c29.per_ch_max_ring_ll128_bw[3] == (40, 40, 40) and c29.variant.nvlstree_size_correction
    assert c30.per_ch_max_nvls_tree_bw is not None and c30.per_ch_max_nvls_tree_bw[3] == (0.0, 96.0, 80.0)


def test_bad_versions() -> None:
    with pytest.raises(UserError):
        load_constants("2.12")
    with pytest.raises(UserError):
        load_constants("banana")
