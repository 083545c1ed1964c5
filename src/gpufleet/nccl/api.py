"""Small, cached entry points for other parts of gpufleet (the digital twin calls these per training step)."""

from __future__ import annotations

from functools import lru_cache

from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology, Transport


@lru_cache(maxsize=65536)
def collective_time_s(
    op: str,
    gpu_model: str,
    nodes: int,
    gpus_per_node: int,
    nics_per_node: int,
    nic_gbps: float,
    transport: Transport,
    nbytes: int,
) -> float:
    """Predicted time in seconds of one ``op`` on ``nbytes`` (the full buffer) with NCCL's default choices."""
    topo = Topology(
        gpu=gpu_model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        nic_gbps=nic_gbps,
        transport=transport,
    )
    return predict_one(topo, op, nbytes).time_us * 1e-6


def allreduce_time_s(
    gpu_model: str,
    nodes: int,
    gpus_per_node: int,
    nics_per_node: int,
    nic_gbps: float,
    transport: Transport,
    nbytes: int,
) -> float:
    """Predicted AllReduce time in seconds (cached; microseconds per call after the first)."""
    return collective_time_s("allreduce", gpu_model, nodes, gpus_per_node, nics_per_node, nic_gbps, transport, nbytes)
