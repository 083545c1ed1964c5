"""GPU time, measured from range series: who held which GPU (or MIG slice) at each step, and whether it worked.

Inputs are what any metric store answers for the period on one grid: the GPUs' utilization (DCGM_FI_DEV_GPU_UTIL,
or DCGM_FI_PROF_GR_ENGINE_ACTIVE for MIG instances, which report no GPU_UTIL) and the workload info series
(gpufleet_gpu_pod_info: present while a pod holds the GPU), joined on the GPU's identity (UUID and GPU_I_ID). Each
grid point stands for the `step` before it. A step where a GPU reports nothing is no-one's time: it is neither used
nor idle nor unallocated, so a gap in the data never turns into cost. Everything is whole-array numpy; the output
is plain data (pydantic) so it travels over the API and can be priced again elsewhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from pydantic import BaseModel, Field

from gpufleet.catalog.gpus import model_for_product_name
from gpufleet.catalog.mig import COMPUTE_SLICES, mig_profiles_for
from gpufleet.cost.config import model_key
from gpufleet.telemetry.store.query import RangeSeries

MAX_STRETCHES = 50  # idle stretches kept per node, longest first
DENSE_KEYS = 1 << 24  # group (workload, GPU) and (workload, step) pairs by counting up to this many keys
TIMELINE_POINTS = 240
HOST_LABELS = ("Hostname", "hostname", "node", "instance")


class Part(BaseModel):
    """A workload's GPU time on one node's GPUs of one model. GPU-hours count a MIG slice as its share of a GPU."""

    node: str
    model: str
    gpu_hours: float
    idle_gpu_hours: float = Field(description="Held while utilization was below the idle threshold.")
    unknown_gpu_hours: float = Field(description="Held with no utilization reading.")
    busy_gpu_hours: float = Field(description="Held GPU-hours weighted by utilization (100 % = 1).")


class WorkloadUse(BaseModel):
    workload: str = Field(description="The job or service, or the pod when the workload is not known.")
    namespace: str
    kind: str = Field(description="job, service, or pod when only the pod is known.")
    pods: int
    peak_gpus: float = Field(description="The most GPUs it held at once.")
    parts: list[Part]


class CapacityUse(BaseModel):
    """One node's GPUs of one model over the period."""

    node: str
    model: str
    gpus: float
    held_gpu_hours: float
    idle_gpu_hours: float
    unknown_gpu_hours: float
    unallocated_gpu_hours: float = Field(description="Reporting, and held by no workload.")


class NodeUse(BaseModel):
    node: str
    model: str = Field(description="The model of most of its GPUs.")
    pool: str
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: float
    covered_hours: float = Field(description="Hours the node reported anything.")
    idle_hours: float = Field(description="Hours every GPU was unallocated or below the idle threshold.")
    empty_hours: float = Field(description="Hours no GPU was held or busy: what a scale-down could remove.")
    idle_stretches_h: list[float] = Field(description="Longest first.")
    empty_stretches_h: list[float]
    peak_held_gpus: float


class MigUse(BaseModel):
    node: str
    gpu: str
    uuid: str
    gi_id: str
    profile: str
    model: str
    fraction: float = Field(description="Its share of the GPU (compute slices).")
    workload: str = Field(description="Who held it longest; empty when none did.")
    namespace: str
    held_hours: float
    idle_hours: float
    unknown_hours: float
    unallocated_hours: float
    util_avg_pct: float | None


class PoolUse(BaseModel):
    pool: str
    nodes: int
    gpus: float
    peak_nodes_in_use: int = Field(description="The most nodes with a held GPU at once.")
    peak_gpus_held: float


class Timeline(BaseModel):
    """GPUs held, held but idle, and unallocated over the period (averaged to at most 240 points; null: no data)."""

    step_s: float
    times: list[float]
    held: list[float | None]
    idle: list[float | None]
    unallocated: list[float | None]


class Usage(BaseModel):
    start: float
    end: float
    step_s: float
    idle_below_pct: float
    gpus: float = Field(description="GPUs that reported in the period (MIG slices as their share).")
    workloads: list[WorkloadUse]
    capacity: list[CapacityUse]
    nodes: list[NodeUse]
    mig: list[MigUse]
    pools: list[PoolUse]
    timeline: Timeline
    notes: list[str] = Field(default_factory=list)
    asked_s: float | None = Field(
        None, description="The period asked for, where the metric history covers less of it (start is where it begins)."
    )
    out_of_service: dict[str, str] = Field(
        default_factory=dict,
        description="Nodes out of service now (faulty, cordoned, draining), each with why: never idle capacity.",
    )

    def idle_capacity(self) -> list[NodeUse]:
        """The nodes whose idle or empty hours are capacity to give back: all but those out of service. A faulty
        node awaiting repair or a cordoned or draining one is empty because it must be, not because nobody needs
        it; scaling it away or calling it waste would be wrong (the one place this is judged)."""
        return [n for n in self.nodes if n.node not in self.out_of_service]


@dataclass(slots=True)
class _Gpu:
    node: str
    gpu: str
    uuid: str
    gi: str
    profile: str = ""
    model: str = ""


@dataclass(slots=True)
class _Rows:
    """GPU identities (UUID, GPU_I_ID) -> matrix rows, with what their labels say."""

    index: dict[tuple[str, str], int] = field(default_factory=dict)
    gpus: list[_Gpu] = field(default_factory=list)

    def row(self, labels: Mapping[str, str]) -> int | None:
        uuid = labels.get("UUID") or labels.get("uuid") or ""
        host = next((labels[k] for k in HOST_LABELS if labels.get(k)), "")
        gpu, gi = labels.get("gpu", ""), labels.get("GPU_I_ID", "")
        key = (uuid, gi) if uuid else (f"{host}/{gpu}", gi) if host and gpu else None
        if key is None:
            return None
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.gpus)
            self.gpus.append(_Gpu(host, gpu, uuid, gi))
        known = self.gpus[found]
        known.node = known.node or host
        known.profile = known.profile or labels.get("GPU_I_PROFILE", "")
        known.model = known.model or labels.get("modelName", "")
        return found


def grid_of(start: float, end: float, step: float) -> np.ndarray:
    """The points of a period: start + step, ..., end; each stands for the step before it."""
    if step <= 0 or end <= start:
        return np.empty(0)
    n = max(1, math.floor((end - start) / step + 1e-9))
    return end - step * np.arange(n)[::-1]


@cache
def slice_fraction(profile: str, model: str) -> float:
    """A MIG profile's share of its GPU: its compute slices over the GPU's (7 on A100 and H100, 4 on A30)."""
    match = re.match(r"(\d+)g\.", profile)
    if match is None:
        return 1.0
    total = COMPUTE_SLICES
    spec = model_for_product_name(model) if model else None
    if spec is not None and spec.mig_geometry is not None:
        total = max(p.compute_slices for p in mig_profiles_for(spec.mig_geometry).values())
    return min(1.0, int(match.group(1)) / total)


Placed = tuple[int, np.ndarray, np.ndarray, Mapping[str, str]]


def _place(rows: _Rows, series: Sequence[RangeSeries], first: float, step: float, width: int) -> list[Placed]:
    """(row, columns, values, labels) of each series that names a GPU, its points mapped onto the grid."""
    out: list[Placed] = []
    for s in series:
        r = rows.row(s.labels)
        if r is None or s.timestamps.size == 0:
            continue
        cols = np.rint((np.asarray(s.timestamps, dtype=np.float64) - first) / step).astype(np.int64)
        ok = (cols >= 0) & (cols < width) & ~np.isnan(np.asarray(s.values, dtype=np.float64))
        if ok.any():
            out.append((r, cols[ok], np.asarray(s.values, dtype=np.float64)[ok], s.labels))
    return out


def _group(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (each below `size`) and each key's position among them, as np.unique(return_inverse)
    gives them; by counting rather than sorting while the key space is small."""
    if size > DENSE_KEYS:
        return np.unique(keys, return_inverse=True)
    present = np.bincount(keys, minlength=size) > 0
    return np.flatnonzero(present), (np.cumsum(present) - 1)[keys]


def _runs(mask: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in a 1-D mask."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def _stretches(mask: np.ndarray, dt: float) -> list[float]:
    lengths = np.sort(_runs(mask))[::-1][:MAX_STRETCHES]
    return [round(float(n) * dt, 4) for n in lengths]


def _timeline(times: np.ndarray, rows: Sequence[np.ndarray], step: float) -> Timeline:
    block = max(1, math.ceil(times.size / TIMELINE_POINTS))
    pad = (-times.size) % block

    def squeeze(values: np.ndarray) -> list[float | None]:
        grid = np.concatenate([values, np.full(pad, np.nan)]).reshape(-1, block)
        with np.errstate(invalid="ignore"):
            counts = (~np.isnan(grid)).sum(axis=1)
            means = np.where(counts > 0, np.nansum(grid, axis=1) / np.maximum(counts, 1), np.nan)
        return [None if math.isnan(v) else round(float(v), 3) for v in means]

    starts = np.concatenate([times, np.full(pad, np.nan)]).reshape(-1, block)[:, 0]
    held, idle, unallocated = (squeeze(r) for r in rows)
    return Timeline(step_s=step * block, times=[float(t) for t in starts], held=held, idle=idle,
                    unallocated=unallocated)  # fmt: skip


def measure(
    util: Sequence[RangeSeries],
    held: Sequence[RangeSeries],
    *,
    start: float,
    end: float,
    step: float,
    idle_below: float = 10.0,
    engine: Sequence[RangeSeries] = (),
    kinds: Mapping[str, str] | None = None,
    pools: Mapping[str, str] | None = None,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> Usage:
    """GPU time over [start, end] on a `step` grid. `util` in percent, `engine` as ratios (MIG instances);
    `held` the workload info series; `kinds` names workloads that are jobs or services; `pools` and `labels` say
    what the control plane knows of each node (a node with no pool is pooled by its GPU model's short name)."""
    times = grid_of(start, end, step)
    width, dt = times.size, step / 3600.0
    rows = _Rows()
    first = float(times[0]) if width else start
    placed_util = _place(rows, util, first, step, width)
    placed_engine = _place(rows, engine, first, step, width)
    placed_held = sorted(_place(rows, held, first, step, width), key=lambda p: int(p[1][0]))
    n = len(rows.gpus)
    u = np.full((n, width), np.nan, dtype=np.float32)
    for r, cols, values, _ in placed_util:
        u[r, cols] = np.fmax(u[r, cols], values)
    for r, cols, values, _ in placed_engine:  # only where GPU_UTIL says nothing
        u[r, cols] = np.where(np.isnan(u[r, cols]), values * 100.0, u[r, cols])
    owner = np.full((n, width), -1, dtype=np.int32)
    owners: dict[tuple[str, str], int] = {}
    pods: list[set[str]] = []
    for r, cols, _values, lab in placed_held:  # later pods win a step two overlap in (the older one's lookback)
        key = (lab.get("namespace", ""), lab.get("workload") or lab.get("pod", ""))
        o = owners.setdefault(key, len(owners))
        if o == len(pods):
            pods.append(set())
        pods[o].add(lab.get("pod", ""))
        owner[r, cols] = o
    # a MIG GPU's own series would count its capacity twice: its slices stand for it
    sliced = {g.uuid for g in rows.gpus if g.gi and g.uuid}
    keep = np.array([not (not g.gi and g.uuid in sliced) for g in rows.gpus], dtype=bool)
    gpus = [g for g, k in zip(rows.gpus, keep, strict=True) if k]
    u, owner = u[keep], owner[keep]
    return _summarise(gpus, u, owner, owners, pods, times, dt, step, idle_below, start, end, kinds or {},
                      pools or {}, labels or {})  # fmt: skip


def _summarise(
    gpus: list[_Gpu],
    u: np.ndarray,
    owner: np.ndarray,
    owners: dict[tuple[str, str], int],
    pods: list[set[str]],
    times: np.ndarray,
    dt: float,
    step: float,
    idle_below: float,
    start: float,
    end: float,
    kinds: Mapping[str, str],
    pools: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> Usage:
    n, width = u.shape
    w = np.array([slice_fraction(g.profile, g.model) if g.gi else 1.0 for g in gpus], dtype=np.float64)
    has = ~np.isnan(u)
    held = owner >= 0
    idle = has & (u < idle_below)
    busy = (has & (u >= idle_below)) | (held & ~has)  # held with no reading is not called idle
    hours = lambda mask: mask.sum(axis=1) * dt * w  # noqa: E731
    held_h, idle_h, unknown_h, unalloc_h = hours(held), hours(held & idle), hours(held & ~has), hours(has & ~held)
    workloads = _workloads(gpus, u, owner, owners, pods, w, idle, has, dt, width, kinds)
    sums: dict[tuple[str, str], np.ndarray] = {}
    per_gpu = np.stack([w, held_h, idle_h, unknown_h, unalloc_h], axis=1)
    for i, g in enumerate(gpus):
        key = (g.node, g.model)
        sums[key] = sums[key] + per_gpu[i] if key in sums else per_gpu[i].copy()
    capacity = [
        CapacityUse(node=node, model=model, gpus=round(float(v[0]), 4), held_gpu_hours=round(float(v[1]), 4),
                    idle_gpu_hours=round(float(v[2]), 4), unknown_gpu_hours=round(float(v[3]), 4),
                    unallocated_gpu_hours=round(float(v[4]), 4))
        for (node, model), v in sorted(sums.items())
    ]  # fmt: skip
    nodes, pool_rows = _nodes(gpus, w, has, held, busy, dt, pools, labels)
    totals = [
        np.where(has.any(axis=0) | held.any(axis=0), (m * w[:, None]).sum(axis=0), np.nan)
        for m in (held, held & idle, has & ~held)
    ]
    notes = [] if n else ["no GPU reported utilization or a workload in this period"]
    return Usage(
        start=start, end=end, step_s=step, idle_below_pct=idle_below, gpus=round(float(w.sum()), 4),
        workloads=workloads, capacity=capacity, nodes=nodes,
        mig=_mig(gpus, u, owner, owners, w, idle, has, dt), pools=pool_rows,
        timeline=_timeline(times, totals, step), notes=notes,
    )  # fmt: skip


def _workloads(
    gpus: list[_Gpu],
    u: np.ndarray,
    owner: np.ndarray,
    owners: dict[tuple[str, str], int],
    pods: list[set[str]],
    w: np.ndarray,
    idle: np.ndarray,
    has: np.ndarray,
    dt: float,
    width: int,
    kinds: Mapping[str, str],
) -> list[WorkloadUse]:
    held = owner >= 0
    if not held.any():
        return []
    n = len(gpus)
    r_idx, t_idx = np.nonzero(held)
    o_idx = owner[r_idx, t_idx].astype(np.int64)
    pairs, inverse = _group(o_idx * n + r_idx, len(owners) * n)
    steps = np.bincount(inverse).astype(np.float64)
    idle_steps = np.bincount(inverse, weights=idle[r_idx, t_idx])
    unknown_steps = np.bincount(inverse, weights=~has[r_idx, t_idx])
    busy_steps = np.bincount(inverse, weights=np.nan_to_num(u[r_idx, t_idx]) / 100.0)
    # the most GPUs each workload held at once
    at, at_inverse = _group(o_idx * width + t_idx, len(owners) * width)
    at_gpus = np.bincount(at_inverse, weights=w[r_idx])
    peak = np.zeros(len(owners))
    np.maximum.at(peak, at // width, at_gpus)
    parts: dict[int, dict[tuple[str, str], list[float]]] = {}
    for k, pair in enumerate(pairs.tolist()):
        o, r = divmod(pair, n)
        g = gpus[r]
        acc = parts.setdefault(o, {}).setdefault((g.node, g.model), [0.0, 0.0, 0.0, 0.0])
        scale = dt * w[r]
        acc[0] += steps[k] * scale
        acc[1] += idle_steps[k] * scale
        acc[2] += unknown_steps[k] * scale
        acc[3] += busy_steps[k] * scale
    out = []
    for (namespace, name), o in owners.items():
        if o not in parts:
            continue
        named = name not in pods[o]  # the info series named a workload, not only its pod
        out.append(
            WorkloadUse(
                workload=name, namespace=namespace, kind=kinds.get(name, "workload" if named else "pod"),
                pods=len(pods[o]), peak_gpus=round(float(peak[o]), 4),
                parts=[
                    Part(node=node, model=model, gpu_hours=round(a[0], 4), idle_gpu_hours=round(a[1], 4),
                         unknown_gpu_hours=round(a[2], 4), busy_gpu_hours=round(a[3], 4))
                    for (node, model), a in sorted(parts[o].items())
                ],
            )
        )  # fmt: skip
    return out


def _nodes(
    gpus: list[_Gpu],
    w: np.ndarray,
    has: np.ndarray,
    held: np.ndarray,
    busy: np.ndarray,
    dt: float,
    pools: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[list[NodeUse], list[PoolUse]]:
    if not gpus:
        return [], []
    names = sorted({g.node for g in gpus})
    position = {name: k for k, name in enumerate(names)}
    node_idx = np.array([position[g.node] for g in gpus])
    order = np.argsort(node_idx, kind="stable")
    starts = np.flatnonzero(np.diff(np.concatenate(([-1], node_idx[order]))))

    def per_node(mask: np.ndarray) -> np.ndarray:
        return np.add.reduceat(mask[order].astype(np.float64), starts, axis=0)

    data_n = per_node(has | held) > 0
    busy_n = per_node(busy) > 0
    held_n = per_node(held) > 0
    held_gpus_n = np.add.reduceat((held * w[:, None])[order], starts, axis=0)
    idle_n, empty_n = data_n & ~busy_n, data_n & ~busy_n & ~held_n
    nodes: list[NodeUse] = []
    by_pool: dict[str, list[int]] = {}
    models_of: list[dict[str, float]] = [{} for _ in names]
    for i, g in enumerate(gpus):
        models_of[position[g.node]][g.model] = models_of[position[g.node]].get(g.model, 0.0) + float(w[i])
    for k, name in enumerate(names):
        models = models_of[k]
        model = max(models, key=lambda m: models[m])
        pool = pools.get(name) or model_key(model)  # no pool label: the GPU model's short name
        by_pool.setdefault(pool, []).append(k)
        nodes.append(
            NodeUse(
                node=name, model=model, pool=pool, labels=dict(labels.get(name, {})),
                gpus=round(float(sum(models.values())), 4), covered_hours=round(float(data_n[k].sum()) * dt, 4),
                idle_hours=round(float(idle_n[k].sum()) * dt, 4), empty_hours=round(float(empty_n[k].sum()) * dt, 4),
                idle_stretches_h=_stretches(idle_n[k], dt), empty_stretches_h=_stretches(empty_n[k], dt),
                peak_held_gpus=round(float(held_gpus_n[k].max(initial=0.0)), 4),
            )
        )  # fmt: skip
    pool_rows = [
        PoolUse(
            pool=pool, nodes=len(ks), gpus=round(sum(nodes[k].gpus for k in ks), 4),
            peak_nodes_in_use=int(held_n[ks].sum(axis=0).max(initial=0)),
            peak_gpus_held=round(float(held_gpus_n[ks].sum(axis=0).max(initial=0.0)), 4),
        )
        for pool, ks in sorted(by_pool.items())
    ]  # fmt: skip
    return nodes, pool_rows


def _mig(
    gpus: list[_Gpu],
    u: np.ndarray,
    owner: np.ndarray,
    owners: dict[tuple[str, str], int],
    w: np.ndarray,
    idle: np.ndarray,
    has: np.ndarray,
    dt: float,
) -> list[MigUse]:
    names = {o: key for key, o in owners.items()}
    out = []
    for i, g in enumerate(gpus):
        if not g.gi:
            continue
        held = owner[i] >= 0
        counts = np.bincount(owner[i][held]) if held.any() else np.empty(0)
        top = names.get(int(counts.argmax())) if counts.size else None
        readings = u[i][held & has[i]]
        out.append(
            MigUse(
                node=g.node, gpu=g.gpu, uuid=g.uuid, gi_id=g.gi, profile=g.profile, model=g.model,
                fraction=round(float(w[i]), 4), workload=top[1] if top else "", namespace=top[0] if top else "",
                held_hours=round(float(held.sum()) * dt, 4), idle_hours=round(float((held & idle[i]).sum()) * dt, 4),
                unknown_hours=round(float((held & ~has[i]).sum()) * dt, 4),
                unallocated_hours=round(float((has[i] & ~held).sum()) * dt, 4),
                util_avg_pct=round(float(readings.mean()), 2) if readings.size else None,
            )
        )  # fmt: skip
    return out
