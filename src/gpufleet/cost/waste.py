"""The waste report: nodes left on idle, workloads holding many GPUs at low utilization, MIG slices held and
unused, and what the idle allocated and the unallocated GPU-hours cost."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from gpufleet.cost.config import UNASSIGNED, CostConfig, Rate
from gpufleet.cost.usage import Usage


class IdleNode(BaseModel):
    node: str
    pool: str
    model: str
    gpus: float
    covered_hours: float
    idle_hours: float = Field(description="Hours every GPU was unallocated or idle.")
    empty_hours: float = Field(description="Hours no GPU was even held.")
    longest_idle_h: float
    idle_share: float = Field(description="Idle hours over the hours it reported.")
    idle_cost_usd: float


class LowUtilWorkload(BaseModel):
    workload: str
    namespace: str
    team: str
    kind: str
    peak_gpus: float
    util_avg_pct: float
    gpu_hours: float
    cost_usd: float
    wasted_usd: float = Field(description="The unused share of what its GPUs cost.")


class IdleSlice(BaseModel):
    node: str
    gpu: str
    gi_id: str
    profile: str
    fraction: float
    workload: str
    namespace: str
    held_hours: float
    idle_hours: float
    idle_share: float
    util_avg_pct: float | None
    idle_cost_usd: float


class Waste(BaseModel):
    idle_allocated_gpu_hours: float
    idle_allocated_cost_usd: float
    unallocated_gpu_hours: float
    unallocated_cost_usd: float
    idle_nodes: list[IdleNode] = Field(description="Idle at a stretch at least waste.idle_node_hours; costliest first.")
    low_util_workloads: list[LowUtilWorkload]
    idle_mig_slices: list[IdleSlice]


def find_waste(usage: Usage, config: CostConfig, rate: Rate, teams: Mapping[tuple[str, str], str]) -> Waste:
    t = config.waste
    usd = lambda node, model: rate(node, model) or 0.0  # noqa: E731
    idle_nodes = [
        IdleNode(
            node=n.node, pool=n.pool, model=n.model, gpus=n.gpus, covered_hours=n.covered_hours,
            idle_hours=n.idle_hours, empty_hours=n.empty_hours,
            longest_idle_h=n.idle_stretches_h[0] if n.idle_stretches_h else 0.0,
            idle_share=round(n.idle_hours / n.covered_hours, 3) if n.covered_hours else 0.0,
            idle_cost_usd=round(n.idle_hours * n.gpus * usd(n.node, n.model), 2),
        )
        for n in usage.idle_capacity()
        if n.idle_stretches_h and n.idle_stretches_h[0] >= t.idle_node_hours
    ]  # fmt: skip
    low = []
    for w in usage.workloads:
        known = sum(p.gpu_hours - p.unknown_gpu_hours for p in w.parts)
        busy = sum(p.busy_gpu_hours for p in w.parts)
        if w.peak_gpus < t.min_gpus or known <= 0 or 100.0 * busy / known >= t.low_util_pct:
            continue
        cost = sum(p.gpu_hours * usd(p.node, p.model) for p in w.parts)
        wasted = sum((p.gpu_hours - p.unknown_gpu_hours - p.busy_gpu_hours) * usd(p.node, p.model) for p in w.parts)
        low.append(
            LowUtilWorkload(
                workload=w.workload, namespace=w.namespace, team=teams.get((w.namespace, w.workload), UNASSIGNED),
                kind=w.kind, peak_gpus=w.peak_gpus, util_avg_pct=round(100.0 * busy / known, 1),
                gpu_hours=round(sum(p.gpu_hours for p in w.parts), 3), cost_usd=round(cost, 2),
                wasted_usd=round(max(0.0, wasted), 2),
            )
        )  # fmt: skip
    slices = [
        IdleSlice(
            node=m.node, gpu=m.gpu, gi_id=m.gi_id, profile=m.profile, fraction=m.fraction, workload=m.workload,
            namespace=m.namespace, held_hours=m.held_hours, idle_hours=m.idle_hours,
            idle_share=round(m.idle_hours / m.held_hours, 3), util_avg_pct=m.util_avg_pct,
            idle_cost_usd=round(m.idle_hours * m.fraction * usd(m.node, m.model), 2),
        )
        for m in usage.mig
        if m.held_hours > 0 and m.idle_hours / m.held_hours >= t.mig_idle_share
    ]  # fmt: skip
    idle_h = sum(c.idle_gpu_hours for c in usage.capacity)
    unalloc_h = sum(c.unallocated_gpu_hours for c in usage.capacity)
    return Waste(
        idle_allocated_gpu_hours=round(idle_h, 3),
        idle_allocated_cost_usd=round(sum(c.idle_gpu_hours * usd(c.node, c.model) for c in usage.capacity), 2),
        unallocated_gpu_hours=round(unalloc_h, 3),
        unallocated_cost_usd=round(sum(c.unallocated_gpu_hours * usd(c.node, c.model) for c in usage.capacity), 2),
        idle_nodes=sorted(idle_nodes, key=lambda r: (-r.idle_cost_usd, -r.idle_hours, r.node)),
        low_util_workloads=sorted(low, key=lambda r: (-r.wasted_usd, r.namespace, r.workload)),
        idle_mig_slices=sorted(slices, key=lambda r: (-r.idle_cost_usd, -r.idle_hours, r.node, r.gpu, r.gi_id)),
    )
