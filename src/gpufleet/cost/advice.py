"""Scale-to-zero recommendations for GPU node pools that sat empty: which nodes could have gone, what it would have
saved, and the settings that make Karpenter or the cluster autoscaler do it.

A node is removable while it is empty (no GPU held by a workload, none busy), for every empty stretch longer than
the wait the autoscaler is told to keep (Karpenter's consolidateAfter, the autoscaler's --scale-down-unneeded-time):
the saving is what those stretches cost past the wait. A node whose GPUs are held but idle is waste too (the waste
report lists it), but no autoscaler removes it until the workload lets its GPUs go. A node out of service (faulty,
cordoned, draining: `Usage.out_of_service`) is empty because it must be: it is never proposed for removal, and the
recommendation names it and why.
"""

from __future__ import annotations

import math

import yaml
from pydantic import BaseModel, Field

from gpufleet.cost.config import CostConfig, Rate
from gpufleet.cost.usage import NodeUse, Usage

ALWAYS_EMPTY = 0.95  # a node empty this share of the hours it reported could go for good
KARPENTER_SAFE = 'karpenter.sh/do-not-disrupt: "true"'
AUTOSCALER_SAFE = 'cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'


class Recommendation(BaseModel):
    pool: str
    model: str
    nodes: int
    gpus_per_node: float
    removable_nodes: list[str] = Field(description="Nodes with empty stretches past the wait, most hours first.")
    always_empty_nodes: list[str] = Field(description="Empty nearly all the time they reported.")
    out_of_service_nodes: dict[str, str] = Field(
        default_factory=dict,
        description="Nodes of the pool left out as out of service (faulty, cordoned, draining), each with why.",
    )
    empty_node_hours: float
    saved_node_hours: float = Field(description="Empty node-hours past the wait: what scaling down removes.")
    saved_gpu_hours: float
    saved_usd: float
    consolidation_policy: str = Field(description="Karpenter NodePool spec.disruption.consolidationPolicy.")
    consolidate_after: str
    gpu_limit: int = Field(description="NodePool spec.limits nvidia.com/gpu: the peak held, in whole nodes.")
    max_nodes: int
    why: str
    karpenter: str = Field(description="The NodePool settings, as YAML to merge into the pool's NodePool.")
    cluster_autoscaler: str = Field(description="The cluster-autoscaler flags and the node group's size.")


def _duration(minutes: float) -> str:
    whole = round(minutes)
    return f"{whole // 60}h{whole % 60}m".replace("h0m", "h") if whole >= 60 else f"{whole}m"


def _saved_hours(node: NodeUse, wait_h: float) -> float:
    return sum(max(0.0, s - wait_h) for s in node.empty_stretches_h)


def recommend(usage: Usage, config: CostConfig, rate: Rate) -> list[Recommendation]:
    wait_min = config.scale_down.after_minutes
    wait_h = wait_min / 60.0
    # gangs: a training job's pods, or anything spread over nodes, restart when one is moved
    gang_nodes = {
        p.node for w in usage.workloads if w.kind == "job" or len({p.node for p in w.parts}) > 1 for p in w.parts
    }
    out = []
    idle = {n.node for n in usage.idle_capacity()}
    for pool in usage.pools:
        everyone = [n for n in usage.nodes if n.pool == pool.pool]
        members = [n for n in everyone if n.node in idle]
        held_back = [n.node for n in everyone if n.node not in idle]
        saved = {n.node: _saved_hours(n, wait_h) for n in members}
        if not members or sum(saved.values()) <= 0:
            continue
        per_node = max(n.gpus for n in members)
        model = max({n.model for n in members}, key=lambda m: sum(n.gpus for n in members if n.model == m))
        removable = sorted((n for n in members if saved[n.node] > 0), key=lambda n: (-saved[n.node], n.node))
        always = [n.node for n in members if n.covered_hours and n.empty_hours >= ALWAYS_EMPTY * n.covered_hours]
        saved_gpu_h = sum(saved[n.node] * n.gpus for n in members)
        saved_usd = sum(saved[n.node] * n.gpus * (rate(n.node, n.model) or 0.0) for n in members)
        gangs = any(n.node in gang_nodes for n in members)
        policy = "WhenEmpty" if gangs else "WhenEmptyOrUnderutilized"
        max_nodes = max(1, pool.peak_nodes_in_use)
        limit = int(max(1, math.ceil(pool.peak_gpus_held / per_node)) * per_node) if per_node else 0
        after = _duration(wait_min)
        empty_h = sum(n.empty_hours for n in members)
        why = (
            f"{len(removable)} of {len(everyone)} nodes sat empty {empty_h:.1f} node-hours; past a {after} wait that "
            f"is {sum(saved.values()):.1f} node-hours ({saved_gpu_h:.1f} GPU-hours) a scale-down removes. At most "
            f"{_count(pool.peak_nodes_in_use, 'node')} ({pool.peak_gpus_held:g} GPUs) were in use at once."
        )
        if gangs:
            why += " It runs multi-node or training work, which restarts when a pod is moved: consolidate only empty "
            why += "nodes."
        if held_back:
            why += " Left out as out of service, not idle: " + "; ".join(
                f"{node} ({usage.out_of_service[node]})" for node in sorted(held_back)
            )
            why += "."
        out.append(
            Recommendation(
                pool=pool.pool, model=model, nodes=len(everyone), gpus_per_node=per_node,
                removable_nodes=[n.node for n in removable], always_empty_nodes=always,
                out_of_service_nodes={node: usage.out_of_service[node] for node in sorted(held_back)},
                empty_node_hours=round(empty_h, 3), saved_node_hours=round(sum(saved.values()), 3),
                saved_gpu_hours=round(saved_gpu_h, 3), saved_usd=round(saved_usd, 2), consolidation_policy=policy,
                consolidate_after=after, gpu_limit=limit, max_nodes=max_nodes, why=why,
                karpenter=_karpenter(pool.pool, policy, after, limit, gangs),
                cluster_autoscaler=_autoscaler(pool.pool, after, max_nodes, gangs),
            )
        )  # fmt: skip
    return sorted(out, key=lambda r: (-r.saved_usd, -r.saved_gpu_hours, r.pool))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _karpenter(pool: str, policy: str, after: str, limit: int, gangs: bool) -> str:
    node_pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool},
        "spec": {
            "disruption": {"consolidationPolicy": policy, "consolidateAfter": after},
            "limits": {"nvidia.com/gpu": str(limit)},
        },
    }
    text = yaml.safe_dump(node_pool, sort_keys=False)
    if gangs:
        text += f"# and on pods that must not be moved while they run (training ranks): {KARPENTER_SAFE}\n"
    return text


def _autoscaler(pool: str, after: str, max_nodes: int, gangs: bool) -> str:
    text = (
        "--scale-down-enabled=true\n"
        f"--scale-down-unneeded-time={after}\n"
        "--scale-down-gpu-utilization-threshold=0.5\n"
        f"--nodes=0:{max_nodes}:<node group of pool {pool}>\n"
        f"# the node group's minimum size 0 (an ASG, managed node group or GKE node pool with min 0), at most "
        f"{_count(max_nodes, 'node')}\n"
    )
    if gangs:
        text += f"# and on pods that must not be moved while they run (training ranks): {AUTOSCALER_SAFE}\n"
    return text
