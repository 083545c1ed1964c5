"""The cost report: measured GPU time (cost_usage.Usage) priced with the cost config, per workload, namespace, team
and GPU model, with the idle cost of allocated GPUs, unallocated capacity, the waste report and the scale-to-zero
recommendations. Pure: the same usage and config always give the same report, so a client holding a report's
usage can price it again with its own price file."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from gpufleet.cost.advice import Recommendation, recommend
from gpufleet.cost.config import UNASSIGNED, CostConfig, PriceBook, Rate
from gpufleet.cost.usage import Usage, WorkloadUse
from gpufleet.cost.waste import Waste, find_waste

CURRENCY = "USD"


class Totals(BaseModel):
    gpus: float
    gpu_hours: float = Field(description="GPU-hours the fleet reported: held plus unallocated.")
    held_gpu_hours: float
    idle_gpu_hours: float = Field(description="Held with utilization below the idle threshold.")
    unknown_gpu_hours: float = Field(description="Held with no utilization reading.")
    unallocated_gpu_hours: float
    util_avg_pct: float | None = Field(description="Average utilization of held GPUs with a reading.")
    cost_usd: float = Field(description="What the held GPU-hours cost.")
    idle_cost_usd: float = Field(description="What the idle held GPU-hours cost: money burnt.")
    unallocated_cost_usd: float = Field(description="What capacity nobody held cost.")
    unpriced_gpu_hours: float = Field(description="GPU-hours no price covers (left out of the costs).")


class WorkloadCost(BaseModel):
    workload: str
    namespace: str
    team: str
    kind: str
    pods: int
    nodes: list[str]
    models: list[str]
    peak_gpus: float
    gpu_hours: float
    idle_gpu_hours: float
    unknown_gpu_hours: float
    busy_gpu_hours: float = Field(description="Held GPU-hours weighted by utilization.")
    util_avg_pct: float | None
    cost_usd: float
    idle_cost_usd: float


class GroupCost(BaseModel):
    """A namespace's or a team's share (for a team, `namespaces` lists what it holds)."""

    name: str
    team: str
    namespaces: list[str]
    workloads: int
    gpu_hours: float
    idle_gpu_hours: float
    util_avg_pct: float | None
    cost_usd: float
    idle_cost_usd: float


class ModelCost(BaseModel):
    model: str
    provider: str
    offering: str
    usd_per_gpu_hour: float | None
    gpus: float
    gpu_hours: float
    held_gpu_hours: float
    idle_gpu_hours: float
    unallocated_gpu_hours: float
    cost_usd: float
    idle_cost_usd: float
    unallocated_cost_usd: float


class PriceUsed(BaseModel):
    model: str
    provider: str
    offering: str
    usd_per_gpu_hour: float | None
    source: str


class CostReport(BaseModel):
    currency: str = CURRENCY
    start: float
    end: float
    step_s: float
    hours: float = Field(description="The period the report covers: from start, where the metric history begins.")
    asked_hours: float | None = Field(None, description="The period asked for, where the history covers less of it.")
    idle_below_pct: float
    totals: Totals
    by_workload: list[WorkloadCost] = Field(description="Costliest first.")
    by_namespace: list[GroupCost]
    by_team: list[GroupCost]
    by_model: list[ModelCost]
    waste: Waste
    recommendations: list[Recommendation]
    prices: list[PriceUsed] = Field(description="Every price the report used, and where it comes from.")
    notes: list[str]
    usage: Usage = Field(description="The measured GPU time the report priced.")


def _money(x: float) -> float:
    return round(x, 2)


def _pct(busy: float, known: float) -> float | None:
    return round(100.0 * busy / known, 1) if known > 0 else None


class _Pricer:
    """The price of a GPU-hour on each node, from its pool's provider and offering, remembered per node and model."""

    def __init__(self, usage: Usage, config: CostConfig, book: PriceBook) -> None:
        self.config, self.book = config, book
        self.nodes = {n.node: n for n in usage.nodes}
        self.used: dict[tuple[str, str, str], PriceUsed] = {}
        self._rates: dict[tuple[str, str], float | None] = {}

    def purchase(self, node: str, model: str) -> tuple[str, str]:
        known = self.nodes.get(node)
        return self.config.purchase_of(known.pool if known else model, known.labels if known else {})

    def rate(self, node: str, model: str) -> float | None:
        key = (node, model)
        if key not in self._rates:
            provider, offering = self.purchase(node, model)
            price = self.book.price(model, provider, offering)
            self._rates[key] = None if price is None else price.usd_per_gpu_hour
            self.used.setdefault((model, provider, offering), PriceUsed(
                model=model, provider=provider, offering=offering,
                usd_per_gpu_hour=None if price is None else price.usd_per_gpu_hour,
                source="no price in the catalog or the cost config" if price is None else price.source))  # fmt: skip
        return self._rates[key]


def build_report(usage: Usage, config: CostConfig, book: PriceBook | None = None) -> CostReport:
    pricer = _Pricer(usage, config, book or PriceBook(config))
    rate = pricer.rate
    workloads = [_workload(w, config, rate) for w in usage.workloads]
    workloads.sort(key=lambda r: (-r.cost_usd, -r.gpu_hours, r.namespace, r.workload))
    by_model = _by_model(usage, pricer)
    unpriced = sum(c.held_gpu_hours + c.unallocated_gpu_hours for c in usage.capacity if rate(c.node, c.model) is None)
    busy = sum(p.busy_gpu_hours for w in usage.workloads for p in w.parts)
    known = sum(p.gpu_hours - p.unknown_gpu_hours for w in usage.workloads for p in w.parts)
    totals = Totals(
        gpus=usage.gpus,
        gpu_hours=round(sum(m.gpu_hours for m in by_model), 3),
        held_gpu_hours=round(sum(c.held_gpu_hours for c in usage.capacity), 3),
        idle_gpu_hours=round(sum(c.idle_gpu_hours for c in usage.capacity), 3),
        unknown_gpu_hours=round(sum(c.unknown_gpu_hours for c in usage.capacity), 3),
        unallocated_gpu_hours=round(sum(c.unallocated_gpu_hours for c in usage.capacity), 3),
        util_avg_pct=_pct(busy, known),
        cost_usd=_money(sum(m.cost_usd for m in by_model)),
        idle_cost_usd=_money(sum(m.idle_cost_usd for m in by_model)),
        unallocated_cost_usd=_money(sum(m.unallocated_cost_usd for m in by_model)),
        unpriced_gpu_hours=round(unpriced, 3),
    )
    notes = list(usage.notes)
    if unpriced:
        missing = sorted({f"{p.model} ({p.provider} {p.offering})" for p in pricer.used.values() if p.usd_per_gpu_hour
                          is None})  # fmt: skip
        notes.append(f"{unpriced:.1f} GPU-hours have no price ({', '.join(missing)}): add them to the price file's "
                     "prices, or set default_usd_per_gpu_hour")  # fmt: skip
    return CostReport(
        start=usage.start, end=usage.end, step_s=usage.step_s, hours=round((usage.end - usage.start) / 3600.0, 3),
        asked_hours=None if usage.asked_s is None else round(usage.asked_s / 3600.0, 3),
        idle_below_pct=usage.idle_below_pct, totals=totals, by_workload=workloads,
        by_namespace=_groups(workloads, lambda w: w.namespace, config),
        by_team=_groups(workloads, lambda w: w.team, config), by_model=by_model,
        waste=find_waste(usage, config, rate, {(w.namespace, w.workload): w.team for w in workloads}),
        recommendations=recommend(usage, config, rate),
        prices=sorted(pricer.used.values(), key=lambda p: (p.model, p.provider, p.offering)), notes=notes,
        usage=usage,
    )  # fmt: skip


def _workload(w: WorkloadUse, config: CostConfig, rate: Rate) -> WorkloadCost:
    cost = idle_cost = busy = known = 0.0
    for p in w.parts:
        usd = rate(p.node, p.model) or 0.0
        cost += p.gpu_hours * usd
        idle_cost += p.idle_gpu_hours * usd
        busy += p.busy_gpu_hours
        known += p.gpu_hours - p.unknown_gpu_hours
    return WorkloadCost(
        workload=w.workload, namespace=w.namespace, team=config.team_of(w.namespace), kind=w.kind, pods=w.pods,
        nodes=sorted({p.node for p in w.parts}), models=sorted({p.model for p in w.parts}), peak_gpus=w.peak_gpus,
        gpu_hours=round(sum(p.gpu_hours for p in w.parts), 3),
        idle_gpu_hours=round(sum(p.idle_gpu_hours for p in w.parts), 3),
        unknown_gpu_hours=round(sum(p.unknown_gpu_hours for p in w.parts), 3), busy_gpu_hours=round(busy, 3),
        util_avg_pct=_pct(busy, known), cost_usd=_money(cost), idle_cost_usd=_money(idle_cost),
    )  # fmt: skip


def _groups(workloads: list[WorkloadCost], key: Callable[[WorkloadCost], str], config: CostConfig) -> list[GroupCost]:
    groups: dict[str, list[WorkloadCost]] = {}
    for w in workloads:
        groups.setdefault(key(w), []).append(w)
    out = []
    for name, members in groups.items():
        hours = sum(w.gpu_hours for w in members)
        known = sum(w.gpu_hours - w.unknown_gpu_hours for w in members)
        busy = sum(w.busy_gpu_hours for w in members)
        teams = {w.team for w in members}
        out.append(
            GroupCost(
                name=name, team=teams.pop() if len(teams) == 1 else UNASSIGNED,
                namespaces=sorted({w.namespace for w in members}), workloads=len(members), gpu_hours=round(hours, 3),
                idle_gpu_hours=round(sum(w.idle_gpu_hours for w in members), 3), util_avg_pct=_pct(busy, known),
                cost_usd=_money(sum(w.cost_usd for w in members)),
                idle_cost_usd=_money(sum(w.idle_cost_usd for w in members)),
            )
        )  # fmt: skip
    return sorted(out, key=lambda g: (-g.cost_usd, -g.gpu_hours, g.name))


def _by_model(usage: Usage, pricer: _Pricer) -> list[ModelCost]:
    rows: dict[tuple[str, str, str], ModelCost] = {}
    for c in usage.capacity:
        provider, offering = pricer.purchase(c.node, c.model)
        usd = pricer.rate(c.node, c.model)
        m = rows.setdefault((c.model, provider, offering), ModelCost(
            model=c.model, provider=provider, offering=offering, usd_per_gpu_hour=usd, gpus=0, gpu_hours=0,
            held_gpu_hours=0, idle_gpu_hours=0, unallocated_gpu_hours=0, cost_usd=0, idle_cost_usd=0,
            unallocated_cost_usd=0))  # fmt: skip
        m.gpus += c.gpus
        m.gpu_hours += c.held_gpu_hours + c.unallocated_gpu_hours
        m.held_gpu_hours += c.held_gpu_hours
        m.idle_gpu_hours += c.idle_gpu_hours
        m.unallocated_gpu_hours += c.unallocated_gpu_hours
        m.cost_usd += c.held_gpu_hours * (usd or 0.0)
        m.idle_cost_usd += c.idle_gpu_hours * (usd or 0.0)
        m.unallocated_cost_usd += c.unallocated_gpu_hours * (usd or 0.0)
    for m in rows.values():
        for name in ("gpus", "gpu_hours", "held_gpu_hours", "idle_gpu_hours", "unallocated_gpu_hours"):
            setattr(m, name, round(getattr(m, name), 3))
        for name in ("cost_usd", "idle_cost_usd", "unallocated_cost_usd"):
            setattr(m, name, _money(getattr(m, name)))
    return sorted(rows.values(), key=lambda m: (-m.cost_usd - m.unallocated_cost_usd, m.model))
