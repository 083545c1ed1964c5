"""ncclTopoTuneModel per NCCL release: the terms that differ between releases, each pinned to its source."""

from __future__ import annotations

import pytest

from gpufleet.nccl.topology import Topology, derive_graphs
from gpufleet.nccl.tuning import bandwidth_under, cost_table


def test_v2_20_5_nvls_latency_and_quarter_ring_ll() -> None:
    """v2.20.5-1 tuning.cc: NVLS latency = hwLat[NVLINK][NVLS] 23 on one node; Ring LL busBw/4 capped by llMaxBw,
    whose Hopper single-node cell is still 87.7."""
    topo = Topology(gpu="h200", nccl_version="2.20.5")
    t = cost_table(topo, "allreduce")
    assert t.latency[("NVLS", "Simple")] == pytest.approx(23.0)
    ring = derive_graphs(topo, 16)["Ring"]
    assert t.bandwidth[("Ring", "LL")] == pytest.approx(min(87.7, ring.n_channels * ring.bw_intra / 4) * 8 / 14)
    assert cost_table(Topology(gpu="h200", nccl_version="2.21.5"), "allreduce").latency[("NVLS", "Simple")] == 25.0


def test_v2_26_6_blackwell_launches_32_nvls_channels() -> None:
    """transport/nvls.cc: NVLS_NCHANNELS_SM100 32 in v2.26.6-1; 24 within one NVLink domain from v2.27.7-1."""
    assert cost_table(Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.26.6"), "allreduce").nvls_channels == 32
    assert cost_table(Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.27.7"), "allreduce").nvls_channels == 24
    assert cost_table(Topology(gpu="b200", nccl_version="2.21.5"), "allreduce").nvls_channels == 16


def test_pat_bandwidth_factor_by_release() -> None:
    """PAT busBw x0.85 in v2.23.4-1, x0.75 from v2.24.3-1 (one GPU per node, AllGather)."""
    shape = dict(gpu="h100-sxm", nodes=4, gpus_per_node=1, nics_per_node=1, nic_gbps=400)
    g = derive_graphs(Topology(**shape), 16)["PAT"]  # type: ignore[arg-type]
    for release, factor in (("2.23.4", 0.85), ("2.24.3", 0.75)):
        ag = cost_table(Topology(**shape, nccl_version=release), "allgather")  # type: ignore[arg-type]
        assert ag.bandwidth[("PAT", "Simple")] == pytest.approx(g.n_channels * g.bw_intra * factor)
    assert ("PAT", "Simple") not in cost_table(Topology(**shape, nccl_version="2.22.3"), "allgather").bandwidth  # type: ignore[arg-type]


def test_bandwidth_under_is_the_table_cell_and_drops_only_the_one_node_ceiling() -> None:
    """bandwidth_under with the search ceiling is cost_table's cell; without it only one-node NVLS changes."""
    b200 = Topology(gpu="b200", cpu_vendor="arm", nccl_version="2.30.7")
    table = cost_table(b200, "allreduce")
    consts = table.consts
    for algo, proto in (("Ring", "Simple"), ("Ring", "LL128"), ("Tree", "Simple"), ("NVLS", "Simple")):
        assert bandwidth_under(b200, "allreduce", algo, proto, consts, one_node_search_ceiling=True) == pytest.approx(
            table.bandwidth[(algo, proto)]
        )
        if algo != "NVLS":
            assert bandwidth_under(
                b200, "allreduce", algo, proto, consts, one_node_search_ceiling=False
            ) == pytest.approx(table.bandwidth[(algo, proto)])
    # bwInter 90 (pass 2's ceiling) binds NCCL's own figure; without it, the NVLink term 80 x 0.74 x 7/8 x 2
    assert table.bandwidth[("NVLS", "Simple")] == pytest.approx(90 * 8 * 8 / 14)
    assert bandwidth_under(b200, "allreduce", "NVLS", "Simple", consts, one_node_search_ceiling=False) == pytest.approx(
        80 * 0.74 * 7 / 8 * 2 * 8 * 8 / 14
    )
    # across nodes bwInter is the network: kept either way
    oci = Topology(gpu="h100-sxm", nodes=2, nics_per_node=16, nic_gbps=200, transport="roce", nccl_version="2.30.7")
    oci_consts = cost_table(oci, "allreduce").consts
    with_ceiling = bandwidth_under(oci, "allreduce", "NVLSTree", "Simple", oci_consts, one_node_search_ceiling=True)
    without = bandwidth_under(oci, "allreduce", "NVLSTree", "Simple", oci_consts, one_node_search_ceiling=False)
    assert with_ceiling == without == pytest.approx(cost_table(oci, "allreduce").bandwidth[("NVLSTree", "Simple")])
