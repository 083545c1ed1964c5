"""The cost model against nccl.md section 1.6 (a real 2.29.7 TUNING table: 2 ranks, 2 nodes, socket, PCI)."""

from __future__ import annotations

import itertools

import pytest

from gpufleet.errors import UserError
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
    # Same 2-rank socket case with two 20 Gb/s interfaces: the search finds 2 channels at 2.4 GB/s (4.8),
    # one GPU per node makes the tree a plain TREE: 4.8 * 0.92 * 0.85 * 0.5 = 1.88 (the log prints 1.9).
    topo = Topology(
        gpu="a10",
        nodes=2,
        gpus_per_node=1,
        nics_per_node=2,
        nic_gbps=20,
        transport="socket",
        nccl_version="2.29.7",
    )
    tree = derive_graphs(topo, 32)["Tree"]
    assert (tree.n_channels, tree.bw_intra, tree.pattern_tree) == (2, 2.4, True)
    ar = cost_table(topo, "allreduce")
    assert ar.bandwidth[("Tree", "Simple")] == pytest.approx(4.8 * 0.92 * 0.85 * 0.5)
    assert round(ar.bandwidth[("Tree", "Simple")], 1) == 1.9


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
    assert small.nccl_time_us == min(c.time_us for c in small.candidates)
    assert small.time_us >= small.nccl_time_us
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
    # Expected time may dip a little where NCCL switches protocol (its pick uses its own estimate).
    assert all(b >= a * 0.9 for a, b in itertools.pairwise(times))
    nccl_times = [r.nccl_time_us for r in rows]
    assert all(b >= a * 0.999 for a, b in itertools.pairwise(nccl_times))
    assert all(r.busbw_gbps >= 0 for r in rows)


def test_versions_differ_for_nvls() -> None:
    new = predict_one(Topology(gpu="h200"), "allreduce", 8 << 30)
    old = predict_one(Topology(gpu="h200", nccl_version="2.20.5"), "allreduce", 8 << 30)
    nvls_old = next(c for c in old.candidates if c.algo == "NVLS")
    nvls_new = next(c for c in new.candidates if c.algo == "NVLS")
    # 2.21: min(bwIntra, bwInter) * nCh * 5/6; 2.30: min(bwIntra*0.85*(nCh-1)/nCh*2, bwInter) * nCh * n/nsteps
    assert nvls_old.bw_gbps == pytest.approx(8 * 40.0 * 5 / 6)
    assert nvls_new.bw_gbps == pytest.approx(8 * min(40.0 * 0.85 * 7 / 8 * 2, 60.0) * 8 / 14)


def test_v218_ring_ll_quarter_and_nvls_ratio() -> None:
    topo = Topology(gpu="a100", nccl_version="2.18.5")
    ar = cost_table(topo, "allreduce")
    ring = derive_graphs(topo, 16)["Ring"]
    bus = ring.n_channels * ring.bw_intra
    assert ar.bandwidth[("Ring", "LL")] == pytest.approx(min(87.7, bus / 4) * 8 / 14)
    bc = cost_table(topo, "broadcast")  # single node, not AllReduce/Reduce: busBw/3
    assert bc.bandwidth[("Ring", "LL")] == pytest.approx(min(87.7, bus / 3) * 8 / 8)
    h = cost_table(Topology(gpu="h100-sxm", nccl_version="2.18.5"), "allreduce")
    nv = derive_graphs(Topology(gpu="h100-sxm", nccl_version="2.18.5"), 16)["NVLS"]
    assert h.bandwidth[("NVLS", "Simple")] == pytest.approx(nv.n_channels * nv.bw_intra * 5 / 6)
    assert h.latency[("NVLS", "Simple")] == pytest.approx(23.0)


def test_other_collectives() -> None:
    topo = Topology(gpu="h100-sxm", nodes=4, nics_per_node=8, nic_gbps=400)
    ag = predict_one(topo, "allgather", 1 << 30)
    rs = predict_one(topo, "reducescatter", 1 << 30)
    bc = predict_one(topo, "broadcast", 1 << 30)
    assert ag.algo == rs.algo == bc.algo == "Ring"  # no NVLS/CollNet for AG/RS across nodes without SHARP
    assert 280 < ag.busbw_gbps < 400 and 280 < bc.busbw_gbps < 400
    pat = cost_table(Topology(gpu="h100-sxm", nodes=4, gpus_per_node=1, nics_per_node=1, nic_gbps=400), "allgather")
    assert ("PAT", "Simple") in pat.bandwidth  # PAT only with one GPU per node
    assert ("PAT", "Simple") not in cost_table(topo, "allgather").bandwidth


def test_ll128_needs_nvlink_paths() -> None:
    pcie = cost_table(Topology(gpu="l40s", gpus_per_node=4), "allreduce")
    assert pcie.bandwidth[("Ring", "LL128")] == 0.0 and pcie.bandwidth[("Ring", "Simple")] > 0
    nvl = cost_table(Topology(gpu="a100"), "allreduce")
    assert nvl.bandwidth[("Ring", "LL128")] > 0


def test_efa_network_latency_is_higher_than_ib() -> None:
    ib = predict_one(Topology(gpu="h100-sxm", nodes=2, nics_per_node=32, nic_gbps=100, transport="ib"), "ar", 8)
    efa = predict_one(Topology(gpu="h100-sxm", nodes=2, nics_per_node=32, nic_gbps=100, transport="efa"), "ar", 8)
    assert efa.time_us > ib.time_us + 30


def test_ports_fused_per_gpu() -> None:
    dual = derive_graphs(Topology(gpu="h100-sxm", nodes=2, nics_per_node=16, nic_gbps=200, transport="roce"), 32)
    single = derive_graphs(Topology(gpu="h100-sxm", nodes=2, nics_per_node=8, nic_gbps=400, transport="roce"), 32)
    assert dual["Ring"] == single["Ring"]


def test_single_rank_has_no_communication() -> None:
    p = predict_one(Topology(gpu="h100-sxm", gpus_per_node=1), "allreduce", 1 << 20)
    assert p.algo == "none" and p.time_us == 0.0


def test_nccl_algo_proto_lists() -> None:
    base = Topology(gpu="h100-sxm", nodes=2, nics_per_node=8, nic_gbps=400)
    assert predict_one(base, "allreduce", 1 << 30).algo == "NVLSTree"
    ring = base.model_copy(update={"algo_env": "^NVLSTree"})
    assert predict_one(ring, "allreduce", 1 << 30).algo == "Ring"
    tree = base.model_copy(update={"algo_env": "ring;allreduce:tree"})
    assert predict_one(tree, "allreduce", 1 << 30).algo == "Tree"
    assert predict_one(tree, "allgather", 1 << 30).algo == "Ring"
    ll = base.model_copy(update={"proto_env": "LL"})
    assert predict_one(ll, "allreduce", 1 << 30).proto == "LL"
    with pytest.raises(UserError):
        predict_one(base.model_copy(update={"algo_env": "ring;tree"}), "allreduce", 1 << 20)
    with pytest.raises(UserError):
        predict_one(base.model_copy(update={"proto_env": "LL129"}), "allreduce", 1 << 20)
    with pytest.raises(UserError):  # only CollNet allowed, and there is no SHARP: nothing left
        predict_one(base.model_copy(update={"algo_env": "collnetdirect"}), "allreduce", 1 << 20)


def test_power_cpu_tree_latency() -> None:
    x86 = cost_table(Topology(gpu="l40s", gpus_per_node=4), "allreduce")
    power = cost_table(Topology(gpu="l40s", gpus_per_node=4, cpu_vendor="power"), "allreduce")
    # PCI Tree/Simple hw latency 4.0 -> Ring's 5.7 per intra hop (3 hops x2 on 4 GPUs)
    assert power.latency[("Tree", "Simple")] - x86.latency[("Tree", "Simple")] == pytest.approx(2 * 3 * (5.7 - 4.0))
