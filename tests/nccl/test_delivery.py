"""Selection and delivery apart: NCCL's pick from the run's release's own table, the bandwidth it gets from the
hardware's figure (data/delivery.yaml), each pinned to its NCCL source."""

from __future__ import annotations

import re

import pytest

from gpufleet.nccl.delivery import correction_for, corrections, delivered
from gpufleet.nccl.predict import algo_time, predict_one
from gpufleet.nccl.topology import Topology
from gpufleet.nccl.tuning import cost_table

# The corpus' GB200 run: 2 trays x 4 GPUs in one NVLink domain (MNNVL), NCCL 2.26.6; NVLS graph 8 heads at
# bwIntra 80 (9 x 80 <= 18 x 40.1 NVLink5), bwInter raised by pass 2 to 90 (top of the sm100 speed array).
GB200_2_26 = Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.26.6")
OCI_2_21 = Topology(gpu="h100-sxm", nodes=2, nics_per_node=16, nic_gbps=200, transport="roce", nccl_version="2.21.5")


def test_selection_uses_the_run_release_table() -> None:
    """v2.26.6-1 tuning.cc:251,293: NVLS bw = min(bwIntra, bwInter) x nCh x 5/6 = 80 x 8 x 5/6; that is what
    picked NVLS, and NCCL's own time estimate is built from it."""
    table = cost_table(GB200_2_26, "allreduce")
    assert table.bandwidth[("NVLS", "Simple")] == pytest.approx(80 * 8 * 5 / 6)
    p = predict_one(GB200_2_26, "allreduce", 1 << 30)
    assert (p.algo, p.proto) == ("NVLS", "Simple")
    assert p.nccl_time_us == pytest.approx(algo_time(table, "NVLS", "Simple", 1 << 30))
    assert min(p.candidates, key=lambda c: c.time_us).algo == "NVLS"
    own = {(c.algo, c.proto): c.bw_gbps for c in p.candidates}
    assert own[("NVLS", "Simple")] == pytest.approx(80 * 8 * 5 / 6)


def test_delivery_uses_the_measured_nvls_efficiency_with_its_source() -> None:
    """v2.30.7-1 tuning.cc:139-144 nvlsEfficiency Blackwell 0.74, :307-322 intraBw = bwIntra x eff x (nCh-1)/nCh
    x2 for AllReduce, :379 algbw = busBw x nRanks/nsteps."""
    p = predict_one(GB200_2_26, "allreduce", 1 << 30)
    assert p.delivered_bw_gbps == pytest.approx(8 * (80 * 0.74 * 7 / 8 * 2) * 8 / 14)
    assert "v2.30.7-1 src/graph/tuning.cc:139-144 nvlsEfficiency" in p.delivery_source
    # busbw at the peak: 8 x 103.6 = 829 GB/s less pipeline fill; the run measured 847 (NCCL 2.26.6 says 933)
    peak = predict_one(GB200_2_26, "allreduce", 32 << 30)
    assert 0.95 < 847.4 / peak.busbw_gbps < 1.05


def test_the_one_node_bwinter_ceiling_stays_in_selection_only() -> None:
    """NCCL 2.28+ takes min(intraBw, bwInter) on one node too; bwInter there is pass 2's unchecked ceiling (90 on
    sm100). NCCL's own 2.30 table keeps it (90 x 8 x 8/14); delivery leaves it out."""
    latest = Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.30.7")
    assert cost_table(latest, "allreduce").bandwidth[("NVLS", "Simple")] == pytest.approx(90 * 8 * 8 / 14)
    d = delivered(cost_table(latest, "allreduce"), "NVLS", "Simple", 1 << 30)
    assert d.bw_gbps == pytest.approx(8 * (80 * 0.74 * 7 / 8 * 2) * 8 / 14)


def test_nvlstree_on_two_nodes_delivers_the_hopper_cap() -> None:
    """v2.30.7-1 tuning.cc:209 perChMaxNVLSTreeBws Hopper N2 57.7 (since v2.28.3-1) caps NVLSTree per channel; the
    OCI RoCE run's 2.21.5 picked it believing min(bwIntra, bwInter) x 5/6 (v2.21.5-1)."""
    table = cost_table(OCI_2_21, "allreduce")
    assert table.bandwidth[("NVLSTree", "Simple")] == pytest.approx(40 * 8 * 5 / 6)
    p = predict_one(OCI_2_21, "allreduce", 16 << 30)
    assert p.algo == "NVLSTree"
    assert p.delivered_bw_gbps == pytest.approx(8 * 57.7 * 16 / 30)


def test_other_algorithms_deliver_the_run_table_figure() -> None:
    """No later release corrected Ring/Tree from measurement in data/delivery.yaml: the run's own figure delivers."""
    a100 = Topology(gpu="a100", cpu_vendor="amd", nccl_version="2.18.5")
    p = predict_one(a100, "allreduce", 1 << 30)
    assert p.algo == "Ring"
    assert p.delivered_bw_gbps == cost_table(a100, "allreduce").bandwidth[("Ring", p.proto)]
    assert p.delivery_source == "NCCL 2.18 tuning table (the run's own)"
    assert correction_for("Ring", "2.30.7") is None and correction_for("Tree", "2.21.5") is None


def test_older_nvls_kernels_keep_their_own_figure() -> None:
    """v2.18.5-1 collectives/device/all_reduce.h:436 reduces through the NVLS buffer (recvSend), not directly:
    not the data path the correction was measured on."""
    assert correction_for("NVLS", "2.18.5") is None
    assert correction_for("NVLS", "2.20.5") is not None
    h100 = Topology(gpu="h100-sxm", nccl_version="2.18.5")
    p = predict_one(h100, "allreduce", 1 << 30)
    assert p.algo == "NVLS"
    assert p.delivered_bw_gbps == cost_table(h100, "allreduce").bandwidth[("NVLS", "Simple")]


def test_every_figure_names_its_tag_file_and_line() -> None:
    cited = re.compile(r"v2\.\d+\.\d+-1 src/[\w/]+\.(cc|h):\d+")
    for corr in corrections():
        assert corr.figures and corr.data_path
        for name, source in corr.figures.items():
            assert cited.search(source), name
        assert len(list(cited.finditer(corr.data_path))) >= 6
