"""A placed gang's all-reduce from where it landed in the fabric.

`predict_one` models NCCL on `nodes` nodes as if every pair of nodes were one switch apart at the NICs' full rate.
Where the gang landed changes two things:

- Latency. A message between members under one leaf crosses one switch; over a spine three; over a core five.
  Every inter-node step of the algorithm pays the extra switches: a ring all-reduce has 2 * (nodes - 1) of them, a
  tree 2 * log2(nodes) (NCCL's tuning.cc counts the same inter-node steps for its latency). A cut-through InfiniBand
  switch forwards in a few hundred nanoseconds; `SWITCH_US` is that order, not one switch's measured figure.
- Bandwidth. Traffic between leaves goes up the leaves' uplinks. A leaf with fewer cables up than down
  (oversubscribed, or an uplink down) gives a member's cross-leaf flow only its share when the leaf's hosts are busy,
  which is the rate a gang can count on: the cross-leaf part runs at 1 / oversubscription of the NIC's rate.

A gang under one leaf pays neither, so the prediction for the same gang under one leaf is given beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.nccl.predict import Prediction, predict_one
from gpufleet.nccl.topology import Topology, Transport

SWITCH_US = 0.3  # one more switch on the path: a cut-through IB switch's port-to-port latency is a few hundred ns


@dataclass(frozen=True, slots=True)
class GangAllReduce:
    nodes: int
    gpus_per_node: int
    bytes: int
    algo: str
    proto: str
    time_us: float  # where the gang landed
    busbw_gbps: float
    one_leaf_time_us: float  # the same gang under one leaf
    switch_hops: int
    oversubscription: float  # the worst leaf it spans: cables down per cable up (1.0 when it spans one leaf)
    extra_latency_us: float
    bandwidth_share: float  # of the NIC's rate its cross-leaf traffic gets

    def to_dict(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "bytes": self.bytes,
            "algo": self.algo,
            "proto": self.proto,
            "time_us": round(self.time_us, 1),
            "busbw_gbps": round(self.busbw_gbps, 1),
            "one_leaf_time_us": round(self.one_leaf_time_us, 1),
            "switch_hops": self.switch_hops,
            "oversubscription": round(self.oversubscription, 2),
            "extra_latency_us": round(self.extra_latency_us, 2),
            "bandwidth_share": round(self.bandwidth_share, 3),
        }


def inter_node_steps(algo: str, nodes: int) -> int:
    """The steps of an all-reduce that cross the network one after another."""
    if nodes <= 1:
        return 0
    if algo == "Ring":
        return 2 * (nodes - 1)
    if algo.startswith("CollNet"):
        return 2  # up to the switch and back
    return 2 * math.ceil(math.log2(nodes))  # Tree, NVLSTree, PAT: down and up a tree of the nodes


def predict_gang_allreduce(
    *,
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    nics_per_node: int,
    nic_gbps: float,
    nbytes: int,
    switch_hops: int,
    oversubscription: float = 1.0,
    transport: Transport = "ib",
) -> GangAllReduce:
    """The all-reduce of `nbytes` over a gang of `nodes` nodes whose farthest members are `switch_hops` switches
    apart, through leaves with `oversubscription` cables down per cable up (the worst it spans)."""
    topo = Topology(
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node if nodes > 1 else 0,
        nic_gbps=nic_gbps if nodes > 1 else 0.0,
        transport=transport,
    )
    base: Prediction = predict_one(topo, "allreduce", nbytes)
    crosses = nodes > 1 and switch_hops > 1
    extra = inter_node_steps(base.algo, nodes) * max(0, switch_hops - 1) * SWITCH_US if crosses else 0.0
    share = 1.0 / max(1.0, oversubscription) if crosses else 1.0
    moving = nbytes / (1000.0 * base.delivered_bw_gbps) if base.delivered_bw_gbps > 0 else 0.0
    time_us = base.time_us + extra + moving * (1.0 / share - 1.0)
    algbw = nbytes / (time_us * 1000.0) if time_us > 0 else 0.0
    busbw = algbw * (2.0 * (topo.nranks - 1) / topo.nranks) if topo.nranks > 1 else 0.0
    return GangAllReduce(
        nodes,
        gpus_per_node,
        nbytes,
        base.algo,
        base.proto,
        time_us,
        busbw,
        base.time_us,
        switch_hops,
        float(oversubscription) if crosses else 1.0,
        extra,
        share,
    )
