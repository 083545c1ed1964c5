"""Partition planner: choose a MIG layout per GPU so a demand mix fits on the fewest GPUs.

Every GPU either stays whole (MIG disabled; it serves one `gpu` request) or gets a MIG layout. mig-parted applies
count maps, so the choices are the distinct profile multisets some valid layout realises (128 on the 7-slice
parts, from the enumerated 2,319 layouts). Choosing how many GPUs take each multiset is a covering integer
program: minimise the GPUs used such that, for every profile, the instances provided reach the demand. It is
solved exactly with HiGHS (scipy.optimize.milp); the LP relaxation gives a lower bound, reported with the gap.
GPUs are then matched to the chosen layouts so as to change as few GPUs, and drain as few nodes, as possible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model
from gpufleet.errors import InternalError, UserError
from gpufleet.model.cluster import Cluster
from gpufleet.model.gpu import Gpu
from gpufleet.model.node import Node
from gpufleet.sched.partition.mig import count_vectors, geometry_of, profile_names

WHOLE = "gpu"  # a whole GPU with MIG disabled, requested as nvidia.com/gpu

Counts = tuple[tuple[str, int], ...]  # a sorted profile -> count map; () means MIG disabled (whole GPU)


def parse_demand(text: str) -> dict[str, int]:
    """`1g.10gb=60,3g.40gb=10,gpu=20` -> {"1g.10gb": 60, "3g.40gb": 10, "gpu": 20}."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise UserError(f"bad demand entry {part!r}", fix="write PROFILE=COUNT pairs, e.g. 1g.10gb=60,gpu=20")
        name = name.strip().removeprefix("nvidia.com/").removeprefix("mig-")
        out[name] = out.get(name, 0) + int(value)
    if not any(out.values()):
        raise UserError("the demand is empty", fix="e.g. --demand 1g.10gb=60,3g.40gb=10,gpu=20")
    return out


@dataclass(frozen=True, slots=True)
class Solution:
    """How many GPUs take each layout, and how good that is."""

    patterns: dict[Counts, int]  # layout -> number of GPUs; () is a whole GPU (one-model plans)
    gpus: int
    lower_bound: int  # ceil of the LP relaxation: no plan can use fewer GPUs
    lp_bound: float
    optimal: bool
    provided: dict[str, int]  # instances (or whole GPUs) the plan provides, by demand key
    by_pool: dict[str, dict[Counts, int]] = field(default_factory=dict)  # per GPU model when several are planned

    @property
    def gap(self) -> float:
        """(GPUs used - lower bound) / GPUs used."""
        return 0.0 if self.gpus == 0 else (self.gpus - self.lower_bound) / self.gpus


def _useful_patterns(geometry: str, demand: Mapping[str, int]) -> list[Counts]:
    """Count maps projected on the demanded profiles, without dominated ones (another gives at least as much)."""
    wanted = {k for k, v in demand.items() if v and k != WHOLE}
    projected = set()
    for key in count_vectors(geometry):
        proj = tuple((k, v) for k, v in key if k in wanted)
        if proj:
            projected.add(proj)
    vectors = {p: dict(p) for p in projected}

    def dominated(p: Counts) -> bool:
        vp = vectors[p]
        return any(
            q != p and all(vectors[q].get(k, 0) >= n for k, n in vp.items()) for q in projected if len(q) >= len(p)
        )

    return sorted((p for p in projected if not dominated(p)), key=lambda p: (-sum(n for _, n in p), p))


def solve(geometry: str, demand: Mapping[str, int], time_limit_s: float = 20.0) -> Solution:
    """The fewest GPUs of one geometry that provide every demanded instance and whole GPU (as many as needed)."""
    return solve_fleet({geometry: (geometry, None)}, demand, time_limit_s)


def solve_fleet(
    pools: Mapping[str, tuple[str, int | None]], demand: Mapping[str, int], time_limit_s: float = 20.0
) -> Solution:
    """The fewest GPUs over several GPU models at once: `pools` maps a name to (geometry, GPUs available or None).

    A profile name (1g.10gb) is served by any model whose geometry has it; each pool gets its own layouts.
    """
    known = {name for geometry, _ in pools.values() for name in profile_names(geometry)}
    unknown = [k for k in demand if k != WHOLE and k not in known]
    if unknown:
        where = ", ".join(sorted({g for g, _ in pools.values()}))
        raise UserError(
            f"{where} has no MIG profile {unknown[0]!r}",
            fix=f"use {WHOLE} for whole GPUs or one of: {', '.join(sorted(known))}",
        )
    keys = [k for k in sorted(demand) if demand[k] > 0]
    columns: list[tuple[str, Counts]] = []
    for pool, (geometry, _) in pools.items():
        columns += [(pool, p) for p in _useful_patterns(geometry, demand)]
        if demand.get(WHOLE, 0) > 0:
            columns.append((pool, ()))
    a = np.array([[(1 if not p and k == WHOLE else dict(p).get(k, 0)) for _, p in columns] for k in keys], dtype=float)
    d = np.array([demand[k] for k in keys], dtype=float)
    c = np.ones(len(columns))
    rows, caps = [], []
    for pool, (_, available) in pools.items():
        if available is not None:
            rows.append([1.0 if q == pool else 0.0 for q, _ in columns])
            caps.append(float(available))
    cover = LinearConstraint(a, lb=d, ub=np.inf)
    constraints = [cover] + ([LinearConstraint(np.array(rows), lb=0, ub=np.array(caps))] if rows else [])
    a_ub = np.vstack([-a, *rows]) if rows else -a
    lp = linprog(c, A_ub=a_ub, b_ub=np.concatenate([-d, caps]), bounds=(0, None), method="highs")
    if lp.status == 2:
        needed = solve_fleet({k: (g, None) for k, (g, _) in pools.items()}, demand, time_limit_s).gpus
        have = round(sum(caps))
        raise UserError(
            f"the demand needs {needed} GPUs but only {have} are available",
            fix=f"add at least {needed - have} GPUs or reduce the demand",
        )
    if lp.status != 0:
        raise InternalError(f"LP relaxation failed: {lp.message}")
    res = milp(
        c,
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, np.inf),
        constraints=constraints,
        options={"time_limit": time_limit_s},
    )
    if res.x is None:
        raise UserError(
            f"no whole-GPU plan fits the {sum(caps):.0f} GPUs available ({res.message})",
            fix="add GPUs or reduce the demand",
        )
    x = np.round(res.x).astype(int)
    by_pool: dict[str, dict[Counts, int]] = {pool: {} for pool in pools}
    for (pool, pattern), n in zip(columns, x, strict=True):
        if n > 0:
            by_pool[pool][pattern] = int(n)
    provided = {k: round(float(a[j] @ x)) for j, k in enumerate(keys)}
    dual = float(getattr(res, "mip_dual_bound", 0.0) or 0.0)
    lower = max(math.ceil(lp.fun - 1e-9), math.ceil(dual - 1e-9))
    gpus = int(x.sum())
    # HiGHS stops within a relative gap; with an integer objective a bound above gpus - 1 proves optimality
    optimal = res.status == 0 and gpus <= lower
    single = next(iter(by_pool.values())) if len(by_pool) == 1 else {}
    return Solution(single, gpus, lower, float(lp.fun), optimal, provided, by_pool)


# --- matching the plan to GPUs ---------------------------------------------------------------------------------


@dataclass(slots=True)
class GpuTarget:
    node: str
    index: int
    model: GpuModelSpec
    current: Counts | None  # None: MIG disabled now
    target: Counts | None  # None: MIG disabled in the plan
    in_use_by: list[str] = field(default_factory=list)  # pods on this GPU now
    serves_demand: bool = False

    @property
    def geometry(self) -> str:
        return self.model.mig_geometry or ""

    @property
    def changed(self) -> bool:
        return self.current != self.target


def current_counts(gpu: Gpu) -> Counts | None:
    if not gpu.mig_enabled:
        return None
    counts: dict[str, int] = {}
    for inst in gpu.mig_instances:
        counts[inst.profile] = counts.get(inst.profile, 0) + 1
    return tuple(sorted(counts.items()))


def _pods_by_gpu(cluster: Cluster) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for pod in cluster.pods:
        if pod.node is None or pod.phase not in ("Running", "Pending"):
            continue
        for idx in pod.gpu_indices:
            out.setdefault((pod.node, idx), []).append(f"{pod.namespace}/{pod.name}")
    return out


def _covers(have: Counts | None, want: Counts) -> bool:
    """An unchanged GPU serves a pattern when it already has at least those instances (or is whole for ())."""
    if not want:
        return have is None
    if have is None:
        return False
    h = dict(have)
    return all(h.get(k, 0) >= n for k, n in want)


def assign(cluster: Cluster, gpus: list[tuple[Node, Gpu]], patterns: Mapping[Counts, int]) -> list[GpuTarget]:
    """Put the solution's layouts on GPUs: keep GPUs that already serve a layout, then fill the idlest nodes first.

    Reconfiguring a GPU in use forces a drain of its node, so changes go first to GPUs nobody uses, node by node
    (a node whose GPUs all change is drained once instead of several nodes each losing one GPU).
    """
    in_use = _pods_by_gpu(cluster)
    targets = [
        GpuTarget(n.name, g.index, g.model, current_counts(g), current_counts(g), in_use.get((n.name, g.index), []))
        for n, g in gpus
    ]
    todo: list[Counts] = [p for p, n in sorted(patterns.items()) for _ in range(n)]
    # 1. GPUs that already provide a wanted layout stay as they are
    # (GPUs in use are kept first; the rest from the back, so the changes pack into the first nodes)
    keepers = sorted(targets, key=lambda t: (not t.in_use_by, -targets.index(t)))
    remaining = []
    for pattern in sorted(todo, key=lambda p: -sum(n for _, n in p)):
        keep = next((t for t in keepers if not t.serves_demand and _covers(t.current, pattern)), None)
        if keep is not None:
            keep.serves_demand = True
        else:
            remaining.append(pattern)
    # 2. the rest go to free GPUs: unused GPUs on quiet nodes first, whole nodes at a time
    busy_nodes = {t.node for t in targets if t.in_use_by}
    free = [t for t in targets if not t.serves_demand]
    free.sort(key=lambda t: (bool(t.in_use_by), t.node in busy_nodes, t.node, t.index))
    if len(remaining) > len(free):
        raise InternalError(f"{len(remaining)} layouts for {len(free)} GPUs: the program's capacity was ignored")
    for pattern, t in zip(remaining, free, strict=False):
        t.target = pattern or None
        t.serves_demand = True
    return targets


def cluster_gpus(cluster: Cluster, model: GpuModelSpec | None) -> dict[str, list[tuple[Node, Gpu]]]:
    """The GPUs the plan may use, by model: those of `model`, or of every MIG-capable model in the cluster."""
    out: dict[str, list[tuple[Node, Gpu]]] = {}
    for node, gpu in cluster.iter_gpus():
        if (model is None and gpu.model.mig_capable) or (model is not None and gpu.model.name == model.name):
            out.setdefault(gpu.model.name, []).append((node, gpu))
    if not out:
        what = f"{model.name} GPUs" if model else "MIG-capable GPUs"
        fix = "pass --gpu with a model the cluster has"
        if any(g.model.vendor == "amd" and g.model.compute_partitions for _, g in cluster.iter_gpus()):
            fix += "; AMD Instinct GPUs are partitioned by compute and memory mode: `gpufleet partition amd plan`"
        raise UserError(f"the cluster has no {what}", fix=fix)
    return out


def synthetic_cluster(model: str, gpus: int, per_node: int = 8) -> Cluster:
    """`gpus` GPUs of one model on nodes of `per_node` (the last node takes the remainder), nothing running."""
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.cluster_spec import ClusterBody

    spec = get_gpu_model(model)
    full, rest = divmod(gpus, per_node)
    pools = []
    if full:
        pools.append({"name": spec.name, "count": full, "gpu": {"model": spec.name, "count": per_node}})
    if rest:
        pools.append({"name": f"{spec.name}-r", "count": 1, "gpu": {"model": spec.name, "count": rest}})
    return build_cluster(f"{spec.name}-x{gpus}", ClusterBody.model_validate({"nodePools": pools}))


@dataclass(slots=True)
class Plan:
    gpu_models: list[GpuModelSpec]
    demand: dict[str, int]
    solution: Solution
    targets: list[GpuTarget]
    cluster: Cluster

    @property
    def geometries(self) -> dict[str, str]:
        return {m.name: m.mig_geometry or "" for m in self.gpu_models}


def plan(cluster: Cluster, demand: Mapping[str, int], model: str | GpuModelSpec | None = None) -> Plan:
    """Plan on the cluster's GPUs of `model`, or jointly on all its MIG-capable models (a profile such as 1g.10gb
    may then land on any model that has it)."""
    spec = model if isinstance(model, GpuModelSpec) else (get_gpu_model(model) if model else None)
    if spec is not None:
        geometry_of(spec)  # a model without MIG is an error that says so
    by_model = cluster_gpus(cluster, spec)
    specs = [gpus[0][1].model for gpus in by_model.values()]
    pools = {m.name: (geometry_of(m), len(by_model[m.name])) for m in specs}
    solution = solve_fleet(pools, demand)
    targets: list[GpuTarget] = []
    for m in specs:
        targets += assign(cluster, by_model[m.name], solution.by_pool[m.name])
    return Plan(specs, dict(demand), solution, targets, cluster)
