"""NCCL's cost tables: ``ncclTopoTuneModel`` (latency and bandwidth per collective, algorithm and protocol).

A transcription of the formulas in tuning.cc; version-specific pieces come from the constants' ``variant``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from gpufleet.nccl.constants import ALGOS, PROTOS, NcclConstants, load_constants
from gpufleet.nccl.enable import algo_enabled, proto_setting
from gpufleet.nccl.topology import Graph, Topology, derive_graphs, path_le

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALLOWED_ALGOS = {
    "broadcast": ("Ring",),
    "reduce": ("Ring",),
    "allgather": ("Ring", "NVLS", "CollNetDirect", "PAT"),
    "reducescatter": ("Ring", "NVLS", "CollNetDirect", "PAT"),
    "allreduce": ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"),
}


@dataclass(frozen=True)
class CostTable:
    """Latency (us) and bandwidth (GB/s, algbw-equivalent) per (algo, proto) for one collective."""

    coll: str
    latency: dict[tuple[str, str], float]
    bandwidth: dict[tuple[str, str], float]
    graphs: dict[str, Graph]
    comm_channels: int
    nvls_channels: int
    max_threads: dict[tuple[str, str], int]
    thread_threshold: dict[tuple[str, str], int]
    consts: NcclConstants
    topo: Topology


def log2i(n: int) -> int:
    return int(n).bit_length() - 1 if n > 0 else -1


def _cc_index(sm: int) -> int:
    return 3 if sm >= 100 else 2 if sm >= 90 else 1 if sm >= 80 else 0


def _nsteps(coll: str, n: int) -> int:
    if coll == "allreduce":
        return 2 * (n - 1)
    if coll in ("allgather", "reducescatter"):
        return n - 1
    return n


def _algo_enabled(topo: Topology, algo: str, graphs: dict[str, Graph]) -> bool:
    if algo == "NVLSTree" and topo.nodes == 1:
        return False
    if algo in ("NVLS", "NVLSTree") and (not topo.nvls_enabled or graphs["NVLS"].n_channels < 2):
        return False
    collnet_needed = algo in ("CollNetDirect", "CollNetChain") or (algo == "NVLS" and topo.nodes > 1)
    if collnet_needed and (not topo.sharp or topo.nodes == 1):
        return False
    return not (algo == "CollNetDirect" and not topo.has_nvswitch)


def _ll128_enabled(topo: Topology, graph: Graph) -> bool:
    sm = topo.sm
    ok = path_le(graph.type_inter, "PXN") if sm >= 90 else path_le(graph.type_inter, "PXB")
    ok = ok and path_le(graph.type_intra, "NVB")
    return ok and sm >= 70


@cache
def cost_table(topo: Topology, coll: str) -> CostTable:
    c = load_constants(topo.nccl_version)
    v = c.variant
    graphs = derive_graphs(topo, v.max_channels)
    n, nodes = topo.nranks, topo.nodes
    ppn = n / nodes
    sm = topo.sm
    ll_max, tree_max, ring_ll128_max, tree_ll128_max, nvlstree_max, nvls_eff = _caps(topo, c)
    net_overhead = c.net_overhead_us.get(topo.cpu_vendor, c.net_overhead_us["other"])
    nsteps = _nsteps(coll, n)
    latency: dict[tuple[str, str], float] = {}
    bandwidth: dict[tuple[str, str], float] = {}
    for a in ALLOWED_ALGOS[coll]:
        if a == "PAT" and not v.pat:
            continue
        if coll in ("allgather", "reducescatter") and a not in v.allgather_reducescatter_algos:
            continue
        g = graphs[a]
        enabled = _algo_enabled(topo, a, graphs)
        for p in PROTOS:
            if a in ("NVLS", "NVLSTree") and p != "Simple":
                continue
            if a == "PAT" and (p != "Simple" or nodes != n):
                continue
            bus = _bus_bw(
                topo,
                coll,
                a,
                p,
                g,
                c,
                ppn,
                nsteps,
                ll_max,
                tree_max,
                ring_ll128_max,
                tree_ll128_max,
                nvlstree_max,
                nvls_eff,
            )
            proto_on = proto_setting(topo.proto_env, coll, p)
            if proto_on == 2:
                proto_on = int(p != "LL128" or _ll128_enabled(topo, g))
            if not enabled or not proto_on or not algo_enabled(topo.algo_env, coll, a) or g.n_channels == 0:
                bus = 0.0
            bandwidth[(a, p)] = bus
            latency[(a, p)] = _latency(topo, coll, a, p, g, c, ppn, nsteps, net_overhead)
    for o_coll, o_algo, o_proto, o_lat, o_bw in topo.tuning_override:
        if o_coll == coll and (o_algo, o_proto) in bandwidth:
            # NCCL's printed table is final: disabled pairs already show bandwidth 0.
            latency[(o_algo, o_proto)] = o_lat
            bandwidth[(o_algo, o_proto)] = max(0.0, o_bw)
    ring = graphs["Ring"]
    comm_channels = min(2 * v.max_channels, 2 * ring.n_channels) if ring.n_channels else 1
    nvls_ch = c.nvls_channels.hopper
    if sm >= 100:
        nvls_ch = c.nvls_channels.blackwell_multi_node if nodes > 1 else c.nvls_channels.blackwell_single_node
    mt = c.max_threads
    tt = c.thread_thresholds
    max_threads: dict[tuple[str, str], int] = {}
    thresholds: dict[tuple[str, str], int] = {}
    for a in ALGOS:
        for p in PROTOS:
            if p == "Simple":
                if a == "Ring":
                    max_threads[(a, p)] = mt.ring_simple_pci if ring.bw_intra * ring.n_channels <= 12 else mt.simple
                elif a == "Tree":
                    max_threads[(a, p)] = mt.simple
                else:
                    max_threads[(a, p)] = mt.max
                thresholds[(a, p)] = tt.collnet_simple if a.startswith("CollNet") else tt.Simple
            elif p == "LL":
                max_threads[(a, p)] = mt.ll
                thresholds[(a, p)] = tt.LL * (n if a == "Ring" and tt.ring_ll_times_nranks else 1)
            else:
                max_threads[(a, p)] = mt.ll128
                thresholds[(a, p)] = tt.LL128
    return CostTable(coll, latency, bandwidth, graphs, comm_channels, nvls_ch, max_threads, thresholds, c, topo)


def _caps(topo: Topology, c: NcclConstants) -> tuple[float, float, float, float, float, float]:
    """The per-architecture caps tuning.cc indexes by compute capability and node count (and the NVLS
    efficiency): llMaxBw, perChMaxTreeBw, perChMaxRingLL128Bw, perChMaxTreeLL128Bw, perChMaxNVLSTreeBw."""
    nodes = topo.nodes
    cci = _cc_index(topo.sm)
    i2 = nodes - 1 if nodes <= 2 else 2
    i1 = cci if nodes == 1 else (1 if topo.cpu_vendor == "amd" else 0)
    return (
        c.ll_max_bw[i1][i2],
        c.per_ch_max_tree_bw[cci][i2],
        c.per_ch_max_ring_ll128_bw[cci][i2],
        c.per_ch_max_tree_ll128_bw[cci][i2],
        c.per_ch_max_nvls_tree_bw[cci][i2] if c.per_ch_max_nvls_tree_bw else math.inf,
        c.nvls_efficiency[cci] if c.nvls_efficiency else 0.0,
    )


def bandwidth_under(
    topo: Topology, coll: str, algo: str, proto: str, consts: NcclConstants, *, one_node_search_ceiling: bool
) -> float:
    """One (algorithm, protocol) bandwidth cell as tuning.cc computes it with ``consts``' terms, on ``topo``'s graphs
    (algbw-equivalent GB/s; enablement is the caller's business). ``one_node_search_ceiling=False`` leaves out
    the NVLS graph's bwInter on one node: no link stands behind it there (see delivery.py)."""
    graphs = derive_graphs(topo, consts.variant.max_channels)
    ppn = topo.nranks / topo.nodes
    return _bus_bw(
        topo,
        coll,
        algo,
        proto,
        graphs[algo],
        consts,
        ppn,
        _nsteps(coll, topo.nranks),
        *_caps(topo, consts),
        one_node_search_ceiling=one_node_search_ceiling,
    )


def _bus_bw(
    topo: Topology,
    coll: str,
    a: str,
    p: str,
    g: Graph,
    c: NcclConstants,
    ppn: float,
    nsteps: int,
    ll_max: float,
    tree_max: float,
    ring_ll128_max: float,
    tree_ll128_max: float,
    nvlstree_max: float,
    nvls_eff: float,
    *,
    one_node_search_ceiling: bool = True,
) -> float:
    v = c.variant
    nodes, n = topo.nodes, topo.nranks
    collnet = a.startswith("CollNet")
    bw = g.bw_intra if nodes <= 2 or collnet else g.bw_inter
    ratio_override: float | None = None
    if a in ("NVLS", "NVLSTree"):
        if v.nvls_bw == "efficiency":
            intra = g.bw_intra * nvls_eff * (g.n_channels - 1) / max(1, g.n_channels)
            intra *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
            inter = g.bw_inter * (2 if nodes <= 2 and a == "NVLSTree" else 1)
            if nodes == 1 and not one_node_search_ceiling:
                inter = math.inf
            bw = min(intra, inter, nvlstree_max if a == "NVLSTree" else math.inf)
        elif v.nvls_bw == "min_intra_inter":
            if a == "NVLS":
                bw = min(g.bw_intra, g.bw_inter)
            else:
                bw = min(g.bw_intra, g.bw_inter if nodes <= 2 else g.bw_inter / 2)
        else:  # 2.18: plain per-channel bw, fixed ratios below
            if a == "NVLS":
                ratio_override = 5.0 / 6.0
            else:
                ratio_override = 0.7 * nodes / (2 * (nodes - 1)) if nodes > 1 else 0.0
    bus = g.n_channels * bw
    if a == "Ring" and p == "LL":
        if v.ring_ll == "half":
            bus = min(ll_max, bus * 0.5)
        else:
            quarter = nodes > 1 or coll in ("allreduce", "reduce")
            bus = min(ll_max, bus * (0.25 if quarter else 1.0 / 3.0))
    if a == "Ring" and p == "LL128":
        factor = v.ring_ll128_low_ppn if (v.ring_ll128_low_ppn is not None and ppn < 2) else 0.92
        bus = min(bus * factor, g.n_channels * ring_ll128_max)
    if a == "Tree" and coll == "allreduce":
        bus = min(bus * 0.92, g.n_channels * tree_max)
    if a == "Tree" and p == "LL":
        bus = min(bus / 3.8, ll_max)
    if a == "Tree" and p == "LL128":
        bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0), g.n_channels * tree_ll128_max)
    if a == "Tree" and g.pattern_tree:
        bus *= 0.85
    if a == "PAT":
        bus *= v.pat_bw_factor
    if collnet and p != "Simple":
        bus = 0.0
    if a == "CollNetDirect" and p == "Simple":
        if coll in ("allgather", "reducescatter"):
            bus = ppn * min(g.bw_intra, g.bw_inter * 0.9)
        else:
            factor = ppn / max(1, g.n_channels)
            factor -= (factor - 1) / 2
            bus /= factor
            if topo.sm >= 90:
                bus *= 0.85
    if a in ("NVLS", "CollNetDirect") and coll in ("allgather", "reducescatter") and nodes > 1 and not topo.sharp:
        bus = 0.0
    if not (a != "Ring" and coll in ("allgather", "reducescatter")):
        if ratio_override is not None:
            ratio = ratio_override
        elif a == "Ring" or (a in ("NVLS", "NVLSTree") and v.nvls_ratio == "nranks_over_nsteps"):
            ratio = n / _nsteps(coll, n)
        elif a in ("NVLS", "NVLSTree"):
            ratio = 5.0 / 6.0
        else:
            ratio = 0.5
        bus *= ratio
    return bus


def _latency(
    topo: Topology,
    coll: str,
    a: str,
    p: str,
    g: Graph,
    c: NcclConstants,
    ppn: float,
    nsteps: int,
    net_overhead: float,
) -> float:
    v = c.variant
    nodes, n = topo.nodes, topo.nranks
    intra_hw = "NVLINK" if g.type_intra == "NVL" else "PCI"
    hw = intra_hw if nodes == 1 else "NET"

    def hw_lat(kind: str, algo: str, proto: str) -> float:
        # POWER CPUs: tuning.cc de-penalizes PCI Tree/Simple to the Ring value so trees get picked.
        if topo.cpu_vendor == "power" and kind == "PCI" and algo == "Tree" and proto == "Simple":
            return c.hw("PCI", "Ring", "Simple")
        return c.hw(kind, algo, proto)

    lat = c.base(a, p)
    intra = hw_lat(intra_hw, a, p)
    inter_algo = "Tree" if (ppn == 1 and v.ppn1_uses_tree_net_latency) else a
    inter = c.hw("NET", inter_algo, p) + g.latency_inter
    if p == "Simple":
        inter += g.latency_inter
    local = int(n // nodes)
    if a == "Ring":
        if coll in ("reduce", "broadcast"):
            if g.same_channels:
                lat += c.hw(hw, "Ring", p)
            else:
                lat += nsteps * hw_lat(hw, "Tree" if p == "Simple" else "Ring", p)
        else:
            overhead = net_overhead * (3 if p == "Simple" else 1) if nodes > 1 else 0.0
            intra = max(intra, overhead)
            if nodes == 1:
                n_inter = 0
            elif coll == "allreduce":
                n_inter = 2 * (nodes - 1) if v.ring_allreduce_inter_steps == "nodes_minus_one" else 2 * nodes
            else:
                n_inter = nodes - 1
            lat += (nsteps - n_inter) * intra + n_inter * inter
    elif a == "Tree":
        if coll == "allreduce":
            lat += 2 * ((local - 1) * intra + log2i(nodes) * inter)
    elif a == "CollNetDirect":
        lat += 2 * (min(1, local - 1) * intra + (local - 1) * v.collnet_arity_latency_us) + inter
    elif a == "CollNetChain":
        lat += 2 * (local - 1) * intra + inter
    elif a == "NVLS":
        if v.nvls_latency == "intra_plus_inter":
            lat = intra + (inter if nodes > 1 else 0.0)
        elif nodes > 1:
            lat += c.hw("NET", a, p)
    elif a == "NVLSTree":
        if v.nvlstree_latency == "log_nodes":
            lat += intra + 2 * log2i(nodes) * inter
        else:
            lat += 2 * (nodes - 1) * c.hw("NET", a, p)
    elif a == "PAT" and coll in ("allgather", "reducescatter"):
        lat += log2i(nodes) * (inter / 3.5) + n * 2.8
    return lat


def size_correction(consts: NcclConstants, topo: Topology, coll: str, algo: str, proto: str, nbytes: int) -> float:
    """getAlgoTime's treeCorrectionFactor: Tree AllReduce in every release; NVLSTree on sm100 with x86 CPUs where
    the release has it (2.29+)."""
    log_size = log2i(nbytes >> 6)
    factors = consts.tree_correction[proto]
    if algo == "Tree" and coll == "allreduce" and 0 <= log_size < 23:
        return factors[log_size]
    if (
        algo == "NVLSTree"
        and coll == "allreduce"
        and 0 <= log_size < 24
        and topo.sm >= 100
        and topo.cpu_vendor in ("intel", "amd")
        and consts.variant.nvlstree_size_correction
    ):
        return factors[log_size]
    return 1.0
