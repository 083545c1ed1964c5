"""What a placed gang's all-reduce should take where it landed: the NCCL model (gpufleet.nccl.gang) fed from the
scheduler's view of the fabric (the nodes' GPUs, their rails and rate, the leaves and switch hops the gang spans)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpufleet.nccl.gang import GangAllReduce, predict_gang_allreduce
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.state import ClusterState
from gpufleet.sched.framework.topology import Landing


def gang_allreduce(
    state: ClusterState, landing: Landing, members: Sequence[PodInfo], nbytes: int
) -> tuple[GangAllReduce | None, str]:
    """The prediction for the gang's all-reduce of `nbytes`, or None and why it cannot be made."""
    if landing.switch_hops is None or state.topology is None:
        return None, "no fabric map: pass the fabric (--fabric) to predict the gang's all-reduce"
    nodes = [state.nodes[state.index[n]].node for n in landing.nodes]
    gpus = [g for node in nodes for g in node.gpus]
    if not gpus:
        return None, "the gang's nodes report no GPU model"
    places = [state.places.get(n) for n in landing.nodes]
    rails = [p.rails for p in places if p is not None]
    rates = [p.rail_gbps for p in places if p is not None and p.rail_gbps]
    if len(landing.nodes) > 1 and (len(rails) < len(landing.nodes) or not rates):
        return None, "the fabric does not show every node's rails and their rate"
    per_node = math.ceil(sum(p.pod.gpu.count for p in members) / max(len(landing.nodes), 1))
    if per_node < 1:
        return None, "the gang asks for no GPUs"
    worst = [
        s.oversubscription
        for leaf in landing.leaves
        if (s := state.topology.switches.get(leaf)) is not None and s.oversubscription is not None
    ]
    prediction = predict_gang_allreduce(
        gpu=gpus[0].model.name,
        nodes=len(landing.nodes),
        gpus_per_node=min(per_node, 72),
        nics_per_node=min(rails, default=0),
        nic_gbps=min(rates, default=0.0),
        nbytes=nbytes,
        switch_hops=landing.switch_hops,
        oversubscription=max(worst, default=1.0),
    )
    return prediction, ""
