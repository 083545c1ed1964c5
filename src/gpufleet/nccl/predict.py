"""Per-size predictions: ``ncclTopoGetAlgoTime`` for every enabled (algorithm, protocol), NCCL's pick, and the
channel/thread count ``topoGetAlgoInfo`` would launch with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.errors import UserError
from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.delivery import delivered
from gpufleet.nccl.topology import Topology
from gpufleet.nccl.tuning import COLLECTIVES, CostTable, cost_table, size_correction

WARP = 32


def bus_factor(coll: str, n: int) -> float:
    """nccl-tests busbw = algbw * factor (doc/PERFORMANCE.md)."""
    if n <= 1:
        return 1.0
    if coll == "allreduce":
        return 2 * (n - 1) / n
    if coll in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def normalize_coll(op: str) -> str:
    key = op.lower().replace("_", "").replace("-", "")
    aliases = {"ar": "allreduce", "ag": "allgather", "rs": "reducescatter", "bcast": "broadcast"}
    key = aliases.get(key, key)
    if key not in COLLECTIVES:
        raise UserError(f"unknown collective {op!r}", fix=f"use one of: {', '.join(COLLECTIVES)}")
    return key


@dataclass(frozen=True)
class AlgoTime:
    algo: str
    proto: str
    time_us: float  # NCCL's own estimate (ncclTopoGetAlgoTime)
    latency_us: float
    bw_gbps: float  # algbw-equivalent after size corrections


@dataclass(frozen=True)
class Prediction:
    """One row: what NCCL picks for ``bytes`` and how long it should take.

    ``algo``/``proto`` are NCCL's pick, from the run's release's own table. ``time_us`` is what a healthy run should
    measure: NCCL's latency for the pick, the bandwidth the hardware delivers for it (``delivered_bw_gbps``, from
    ``delivery_source``; data/delivery.yaml) and pipeline fill (data/expected.yaml). ``nccl_time_us`` is NCCL's own
    ``ncclTopoGetAlgoTime`` estimate that drove the pick.
    """

    op: str
    bytes: int
    algo: str
    proto: str
    channels: int
    threads: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    nccl_time_us: float = 0.0
    candidates: tuple[AlgoTime, ...] = ()
    delivered_bw_gbps: float = 0.0  # algbw-equivalent the hardware gives the pick (delivery.py), before fill
    delivery_source: str = ""  # where that figure comes from


def algo_time(table: CostTable, algo: str, proto: str, nbytes: int, num_pipe_ops: int = 1) -> float:
    """``ncclTopoGetAlgoTime``: -1 when the pair is disabled."""
    bw = table.bandwidth.get((algo, proto), 0.0)
    lat = table.latency.get((algo, proto), 0.0)
    if bw <= 0:
        return -1.0
    bw *= _size_correction(table, algo, proto, nbytes)
    lat *= _ring_plateau(table, algo, proto, nbytes)
    lat_count = num_pipe_ops if algo == "Ring" else math.ceil(num_pipe_ops / table.consts.max_dev_work_batch_colls)
    return lat * lat_count + nbytes / (1000.0 * bw)


def _size_correction(table: CostTable, algo: str, proto: str, nbytes: int) -> float:
    return size_correction(table.consts, table.topo, table.coll, algo, proto, nbytes)


def _ring_plateau(table: CostTable, algo: str, proto: str, nbytes: int) -> float:
    topo = table.topo
    if (
        algo == "Ring"
        and proto == "Simple"
        and topo.nodes > 1
        and table.coll == "allreduce"
        and nbytes // (table.comm_channels * topo.nranks) >= 64
    ):
        return 1.9 if topo.sm < 80 else 1.4
    return 1.0


def _launch_shape(table: CostTable, algo: str, proto: str, nbytes: int) -> tuple[int, int]:
    """``topoGetAlgoInfo``: channels and threads for the chosen pair."""
    nc = table.comm_channels
    nt = table.max_threads[(algo, proto)]
    thr = table.thread_threshold[(algo, proto)]
    if algo in ("NVLS", "NVLSTree"):
        nc = (
            min(table.nvls_channels, table.comm_channels)
            if (table.topo.nodes > 1 and algo == "NVLS")
            else table.nvls_channels
        )
    elif algo == "CollNetDirect":
        nc = table.graphs["CollNetDirect"].n_channels
    else:
        while nbytes < nc * nt * thr and nc >= 2:
            nc -= 1
    if algo not in ("NVLS", "NVLSTree", "CollNetDirect"):
        while nbytes < nc * nt * thr and nt % 128 == 0:
            nt //= 2
    if proto == "Simple":
        if algo == "Ring":
            nt += WARP
        if algo == "Tree":
            nt += 4 * WARP
    nt = max(nt, 3 * WARP)
    if algo in ("Tree", "PAT"):
        nt = table.max_threads[("Tree", "LL128")]
    return nc, nt


def predict_one(topo: Topology, op: str, nbytes: int) -> Prediction:
    coll = normalize_coll(op)
    if nbytes <= 0:
        raise UserError(f"message size must be positive, got {nbytes}")
    if topo.nranks == 1:
        # One rank: NCCL copies locally (or nothing in place); no communication to model.
        return Prediction(coll, nbytes, "none", "none", 0, 0, 0.0, 0.0, 0.0)
    table = cost_table(topo, coll)
    candidates: list[AlgoTime] = []
    for algo, proto in table.bandwidth:
        t = algo_time(table, algo, proto, nbytes)
        if t >= 0:
            bw = table.bandwidth[(algo, proto)] * _size_correction(table, algo, proto, nbytes)
            lat = table.latency[(algo, proto)] * _ring_plateau(table, algo, proto, nbytes)
            candidates.append(AlgoTime(algo, proto, t, lat, bw))
    if not candidates:
        forced = " with the given NCCL_ALGO/NCCL_PROTO" if (topo.algo_env or topo.proto_env) else ""
        raise UserError(
            f"no algorithm/protocol available for {coll} on this topology{forced}",
            fix="allow more algorithms/protocols (NCCL would fail the same way)",
        )
    # Selection: the run's own release's table, exactly.
    best = min(candidates, key=lambda c: c.time_us)
    nc, nt = _launch_shape(table, best.algo, best.proto, nbytes)
    launched = 1.0
    if table.consts.variant.channel_scaled_time and best.algo in ("Ring", "Tree") and nc < table.comm_channels:
        # Older getAlgoTime rescaled bw by the channels actually launched.
        launched = nc / table.comm_channels
    nccl_time = best.time_us if launched == 1.0 else best.latency_us + nbytes / (1000.0 * best.bw_gbps * launched)
    # Delivery: what the hardware moves for that pick (delivery.py), plus pipeline fill.
    delivery = delivered(table, best.algo, best.proto, nbytes)
    time_us = best.latency_us + nbytes / (1000.0 * delivery.bw_gbps * launched)
    time_us += pipeline_fill_us(
        nbytes, nc, concurrent_peers(topo, best.algo), step_bytes(best.algo, best.proto), delivery.bw_gbps
    )
    algbw = nbytes / (time_us * 1000.0) if time_us > 0 else 0.0
    busbw = algbw * bus_factor(coll, topo.nranks)
    return Prediction(
        coll,
        nbytes,
        best.algo,
        best.proto,
        nc,
        nt,
        time_us,
        algbw,
        busbw,
        nccl_time,
        tuple(candidates),
        delivery.bw_gbps,
        delivery.source,
    )


def concurrent_peers(topo: Topology, algo: str) -> int:
    """How many peers each channel streams to at once: the fan-out of the primitive the algorithm runs
    (src/device/all_reduce.h). A ring channel sends to its one next rank (FanSymmetric<1>) and walks the ranks'
    chunks one step after another; NVLS/NVLSTree scatter to every head (FanAsymmetric<0, NCCL_MAX_NVLS_ARITY>),
    CollNetDirect to the node's GPUs; trees and PAT pipeline whole chunks along one chain."""
    if algo in ("NVLS", "NVLSTree", "CollNetDirect"):
        return topo.gpus_per_node
    return 1


def step_bytes(algo: str, proto: str) -> int:
    """Bytes one pipeline step moves to a peer (data/expected.yaml): the protocol's buffer step, or NVLS's own
    smaller chunk. NVLSTree keeps the protocol step: its tree half goes through net/P2P connections whose
    steps are the protocol's buffer slots."""
    fill = load_yaml("expected.yaml")["pipeline_fill"]
    return int(fill["algo_step_bytes"].get(algo, fill["step_bytes"][proto]))


def pipeline_fill_us(nbytes: int, channels: int, peers: int, step: int, algbw_gbps: float) -> float:
    """Store-and-forward cost until every channel holds a full step per peer (data/expected.yaml)."""
    fill = load_yaml("expected.yaml")["pipeline_fill"]
    window = max(1, channels) * max(1, peers) * step
    return float(fill["factor"]) * min(nbytes, window) / (1000.0 * algbw_gbps) if algbw_gbps > 0 else 0.0


def size_sweep(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise UserError(f"bad size range {min_bytes}..{max_bytes}", fix="give 0 < --min-bytes <= --max-bytes")
    if factor < 2:
        raise UserError("size step factor must be at least 2")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def predict_sweep(
    topo: Topology, op: str, min_bytes: int = 8, max_bytes: int = 8 << 30, factor: int = 2
) -> list[Prediction]:
    return [predict_one(topo, op, s) for s in size_sweep(min_bytes, max_bytes, factor)]
