"""The cost model against nccl.md section 1.6 (a real 2.29.7 TUNING table: 2 ranks, 2 nodes, socket, PCI)."""

from __future__ import annotations

import itertools

import pytest

from gpufleet.nccl.predict import algo_time, predict_one, predict_sweep
from gpufleet.nccl.topology import Topology, derive_graphs
from gpufleet.nccl.tuning import cost_table


def socket_pair() -> Topology:
    # One PCIe GPU per node, two nodes, 100 Gb/s socket transport, 2.29.7 falls under the 2.30 constants.
    return Topology(
        gpu="a10",
        nodes=2,
        gpus_per_node=1,
        nics_per_node=1,
        nic_gbps=100,
        transport="socket",
        nccl_version="2.29.7",
    )


def test_worked_latencies() -> None:
    topo = socket_pair()
    ar = cost_table(topo, "allreduce")
    assert ar.latency[("Ring", "LL")] == pytest.approx(16.6)
    assert ar.latency[("Ring", "Simple")] == pytest.approx(36.4)
    bc = cost_table(topo, "broadcast")
    assert bc.latency[("Ring", "LL")] == pytest.approx(9.3)
    ag = cost_table(topo, "allgather")
    assert ag.latency[("PAT", "Simple")] == pytest.approx(17.6)


def test_worked_tree_bandwidth() -> None:
    topo = socket_pair()
    graphs = derive_graphs(topo, 32)
    ar = cost_table(topo, "allreduce")
    tree = graphs["Tree"]
    # busBw = nCh*bw*0.92 (x0.85 for a plain TREE pattern), algbw x0.5
    expected = tree.n_channels * tree.bw_intra * 0.92 * (0.85 if tree.pattern_tree else 1.0) * 0.5
    assert ar.bandwidth[("Tree", "Simple")] == pytest.approx(expected)


def test_reference_tree_formula_with_given_inputs() -> None:
    # nccl.md 1.6: Tree/AllReduce/Simple bw = 4.8 * 0.92 * 0.85 * 0.5 = 1.88
    assert pytest.approx(1.8768) == 4.8 * 0.92 * 0.85 * 0.5


def test_h100_single_node_peaks() -> None:
    topo = Topology(gpu="h100-sxm")
    graphs = derive_graphs(topo, 32)
    assert (graphs["Ring"].n_channels, graphs["Ring"].bw_intra) == (12, 30.0)
    assert (graphs["NVLS"].n_channels, graphs["NVLS"].bw_intra, graphs["NVLS"].bw_inter) == (8, 40.0, 60.0)
    big = predict_one(topo, "allreduce", 8 << 30)
    assert big.algo == "NVLS"
    assert 460 < big.busbw_gbps < 480  # sjeaugey, nccl-tests#212: ~480 GB/s on 8 H100 with NVLS
    ring_only = predict_one(Topology(gpu="h100-sxm", nvls=False), "allreduce", 8 << 30)
    assert ring_only.algo == "Ring" and 350 < ring_only.busbw_gbps < 372


def test_selection_small_vs_large() -> None:
    topo = Topology(gpu="h100-sxm", nodes=4, nics_per_node=8, nic_gbps=400, transport="ib")
    small = predict_one(topo, "allreduce", 1024)
    large = predict_one(topo, "allreduce", 4 << 30)
    assert small.proto == "LL"
    assert large.proto == "Simple"
    assert small.time_us == min(c.time_us for c in small.candidates)
    # NVLS across nodes needs CollNet: never picked without --sharp
    assert all(c.algo != "NVLS" for c in large.candidates)
    with_sharp = predict_one(topo.model_copy(update={"sharp": True}), "allreduce", 4 << 30)
    assert any(c.algo == "NVLS" for c in with_sharp.candidates)


def test_channel_reduction_for_small_sizes() -> None:
    topo = Topology(gpu="a100")
    small = predict_one(topo, "allreduce", 64)
    large = predict_one(topo, "allreduce", 64 << 20)
    assert small.channels == 1 and large.channels > 1


def test_ring_plateau_only_multinode_simple() -> None:
    multi = Topology(gpu="a100", nodes=2, nics_per_node=8, nic_gbps=200, transport="ib")
    t = cost_table(multi, "allreduce")
    nbytes = 1 << 30
    base = t.latency[("Ring", "Simple")] + nbytes / (1000 * t.bandwidth[("Ring", "Simple")])
    plateau = t.latency[("Ring", "Simple")] * 1.4 + nbytes / (1000 * t.bandwidth[("Ring", "Simple")])
    assert algo_time(t, "Ring", "Simple", nbytes) == pytest.approx(plateau)
    assert plateau > base


@pytest.mark.parametrize("op", ["allreduce", "allgather", "reducescatter", "broadcast"])
def test_sweep_monotonic_time(op: str) -> None:
    rows = predict_sweep(Topology(gpu="h100-sxm", nodes=2, nics_per_node=8, nic_gbps=400), op, 8, 8 << 30)
    assert len(rows) == 31
    times = [r.time_us for r in rows]
    assert all(b >= a * 0.999 for a, b in itertools.pairwise(times))
    assert all(r.busbw_gbps >= 0 for r in rows)


def test_versions_differ_for_nvls() -> None:
    new = predict_one(Topology(gpu="h200"), "allreduce", 8 << 30)
    old = predict_one(Topology(gpu="h200", nccl_version="2.20.5"), "allreduce", 8 << 30)
    nvls_old = next(c for c in old.candidates if c.algo == "NVLS")
    nvls_new = next(c for c in new.candidates if c.algo == "NVLS")
    # 2.21: min(bwIntra, bwInter) * nCh * 5/6; 2.30: min(bwIntra*0.85*(nCh-1)/nCh*2, bwInter) * nCh * n/nsteps
    assert nvls_old.bw_gbps == pytest.approx(8 * 40.0 * 5 / 6)
    assert nvls_new.bw_gbps == pytest.approx(8 * min(40.0 * 0.85 * 7 / 8 * 2, 60.0) * 8 / 14)
