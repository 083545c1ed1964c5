"""Partition planning for AMD Instinct nodes: one (compute, memory) mode per node so that a demand for partitions
fits, changing as few nodes as possible, and what each change drains.

Demand is counted in logical GPUs of a compute mode: `cpx=40` is 40 pods of one CPX partition, `gpu=3` (or `spx=3`)
3 jobs of a whole GPU; a key may fix the memory mode too (`cpx_nps4=40`). A node takes one mode for all its GPUs (AMD's
Device Config Manager applies a profile per node, and a node labelled in one mode works under both device-plugin
naming strategies), so a node of G GPUs in a mode of P partitions serves G x P of that key.

Choosing the modes is a small integer program (scipy's HiGHS): every node exactly one mode; every demand key covered;
the cost of a change is paid per node changed, higher the more GPU pods it stops, and higher still when the memory
(NPS) mode changes, which needs the amdgpu driver reloaded. A node left alone costs nothing.

A change needs every GPU client stopped: the node is tainted `amd-dcm=up:NoExecute`, which evicts every pod that
does not tolerate it (DCM's own pod does), then labelled with the DCM profile; the taint comes off when DCM is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from gpufleet.catalog.gpus import GpuModelSpec
from gpufleet.errors import InternalError, UserError
from gpufleet.model.cluster import Cluster
from gpufleet.model.node import Node, Taint, TaintEffect
from gpufleet.model.workload import Pod, Toleration
from gpufleet.sched.partition.amd_partition import (
    COMPUTE_MODES,
    MEMORY_MODES,
    PartitionMode,
    node_modes,
    partitionable,
    valid_modes,
)

WHOLE = "gpu"  # a whole GPU: one SPX partition
DCM_TAINT = Taint("amd-dcm", TaintEffect.no_execute, "up")
CHANGE, PER_GPU_POD, NPS_CHANGE = 1000.0, 100.0, 10.0  # costs: a node changed, a GPU pod it stops, a driver reload


def parse_amd_demand(text: str) -> dict[str, int]:
    """`cpx=40,gpu=3` -> {"cpx": 40, "spx": 3}; keys are compute modes, `gpu` (SPX), or `cpx_nps4`-style pairs."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        key = name.strip().lower().removeprefix("amd.com/")
        key = "spx" if key == WHOLE else key
        compute, _, memory = key.partition("_")
        if not sep or not value.strip().isdigit():
            raise UserError(f"bad demand entry {part!r}", fix="write MODE=COUNT pairs, e.g. cpx=40,gpu=3")
        if compute.upper() not in COMPUTE_MODES or (memory and memory.upper() not in MEMORY_MODES):
            raise UserError(
                f"bad demand entry {part!r}: {name.strip()!r} is not a partition mode",
                fix=f"use gpu, {', '.join(m.lower() for m in COMPUTE_MODES)}, or a pair such as cpx_nps4",
            )
        out[key] = out.get(key, 0) + int(value)
    bare = {k for k in out if "_" not in k}
    if clash := sorted(k for k in out if "_" in k and k.split("_")[0] in bare):
        raise UserError(
            f"demand names {clash[0].split('_')[0]} both with and without a memory mode ({clash[0]})",
            fix="give each compute mode once: with its memory mode, or without to accept any",
        )
    if not any(out.values()):
        raise UserError("the demand is empty", fix="e.g. --demand cpx=40,gpu=3")
    return out


def _serves(key: str, m: PartitionMode) -> bool:
    return m.name == key if "_" in key else m.compute.lower() == key


def _tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect is not None and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


@dataclass(slots=True)
class NodeChoice:
    node: str
    model: GpuModelSpec
    gpus: int
    current: PartitionMode
    target: PartitionMode
    gpu_pods: list[str] = field(default_factory=list)  # must stop: they hold the node's GPUs
    evicted: list[str] = field(default_factory=list)  # every pod the NoExecute taint removes
    kept: list[str] = field(default_factory=list)  # GPU pods that tolerate the taint: stop them by hand

    @property
    def changed(self) -> bool:
        return self.current.name != self.target.name

    @property
    def driver_reload(self) -> bool:
        return self.changed and self.current.memory != self.target.memory

    @property
    def logical_gpus(self) -> int:
        return self.gpus * self.target.partitions


@dataclass(slots=True)
class AmdPlan:
    demand: dict[str, int]
    choices: list[NodeChoice]
    provided: dict[str, int]
    dcm_only: bool
    optimal: bool

    @property
    def changed(self) -> list[NodeChoice]:
        return [c for c in self.choices if c.changed]


def current_mode(node: Node) -> PartitionMode:
    """The node labeller's `amd.com/gpu.compute-memory-partition`, else the boot default (SPX, NPS1)."""
    found = node_modes(node)[0]
    if found is None:
        raise InternalError(f"node {node.name}: its GPUs cannot be partitioned")
    return found


def _pods(cluster: Cluster, node: str) -> list[Pod]:
    return [p for p in cluster.pods if p.node == node and p.phase in ("Running", "Pending")]


def _choice(cluster: Cluster, node: Node, current: PartitionMode) -> NodeChoice:
    choice = NodeChoice(node.name, node.gpus[0].model, len(node.gpus), current, current)
    for pod in _pods(cluster, node.name):
        key = f"{pod.namespace}/{pod.name}"
        on_gpu = pod.gpu.count > 0 or bool(pod.gpu_indices)
        stays = any(_tolerates(t, DCM_TAINT) for t in pod.tolerations)
        if on_gpu:
            choice.gpu_pods.append(key)
        if not stays:
            choice.evicted.append(key)
        elif on_gpu:
            choice.kept.append(key)
    return choice


def amd_nodes(cluster: Cluster) -> list[Node]:
    nodes = [n for n in cluster.nodes if n.gpus and partitionable(n.gpus[0].model)]
    if not nodes:
        raise UserError(
            f"cluster {cluster.name} has no partitionable AMD GPUs", fix="plan on MI300X, MI325X or MI355X nodes"
        )
    return nodes


def plan_amd(
    cluster: Cluster,
    demand: Mapping[str, int],
    *,
    dcm_only: bool = True,
    current: Mapping[str, PartitionMode] | None = None,
    time_limit_s: float = 20.0,
) -> AmdPlan:
    """One mode per partitionable AMD node covering `demand` at the least cost of changes (see the module doc).

    `dcm_only` keeps to the modes AMD's DCM applies (SPX+NPS1, CPX+NPS1, CPX+NPS4); without it every mode the
    kernel accepts may be chosen (DPX and QPX are then set with amd-smi). `current` overrides the modes read from
    the nodes' labels."""
    nodes = amd_nodes(cluster)
    choices = [_choice(cluster, n, (current or {}).get(n.name) or current_mode(n)) for n in nodes]
    columns: list[tuple[int, PartitionMode, float]] = []  # node, mode, cost
    for i, c in enumerate(choices):
        modes = valid_modes(c.model, dcm_only=dcm_only)
        if all(m.name != c.current.name for m in modes):
            modes.append(c.current)  # keeping what a node runs is always possible
        for m in modes:
            cost = 0.0
            if m.name != c.current.name:
                cost = CHANGE + PER_GPU_POD * len(c.gpu_pods) + NPS_CHANGE * (m.memory != c.current.memory)
                cost += i / (len(choices) + 1)  # a stable preference among equals: earlier nodes change first
            columns.append((i, m, cost))
    keys = sorted(k for k, v in demand.items() if v > 0)
    offered = {m.name for _, m, _ in columns}
    for key in keys:
        if not any(_serves(key, m) for _, m, _ in columns):
            what = "AMD's DCM applies" if dcm_only else "the kernel accepts"
            raise UserError(
                f"no node can serve {key}: the modes {what} here are {', '.join(sorted(offered))}",
                fix="plan with the kernel's modes too (--kernel-modes; amd-smi applies them, DCM does not)"
                if dcm_only
                else "change the demand",
            )
    one = np.array([[1.0 if n == i else 0.0 for n, _, _ in columns] for i in range(len(choices))])
    cover = np.array([[choices[n].gpus * m.partitions if _serves(k, m) else 0.0 for n, m, _ in columns] for k in keys])
    need = np.array([float(demand[k]) for k in keys])
    constraints = [LinearConstraint(one, lb=1, ub=1)]
    if keys:
        constraints.append(LinearConstraint(cover, lb=need, ub=np.inf))
    res = milp(
        np.array([c for _, _, c in columns]),
        integrality=np.ones(len(columns)),
        bounds=Bounds(0, 1),
        constraints=constraints,
        options={"time_limit": time_limit_s},
    )
    if res.x is None:
        most = {k: sum(max((c.gpus * m.partitions for n, m, _ in columns if n == i and _serves(k, m)), default=0)
                       for i, c in enumerate(choices)) for k in keys}  # fmt: skip
        short = [f"{k}={demand[k]} (at most {most[k]})" for k in keys if demand[k] > most[k]]
        detail = ", ".join(short) or "the keys together: each node serves one mode"
        raise UserError(
            f"the demand does not fit {len(choices)} AMD nodes: {detail}", fix="add nodes or reduce the demand"
        )
    picked = np.round(res.x).astype(int)
    for (n, m, _), on in zip(columns, picked, strict=True):
        if on:
            choices[n].target = m
    provided = {k: sum(c.logical_gpus for c in choices if _serves(k, c.target)) for k in keys}
    if any(provided[k] < demand[k] for k in keys):
        raise InternalError(f"the solver's plan provides {provided} for a demand of {dict(demand)}")
    return AmdPlan(dict(demand), choices, provided, dcm_only, res.status == 0)


def nodes_needed(
    model: str | GpuModelSpec, demand: Mapping[str, int], gpus_per_node: int, *, dcm_only: bool = True
) -> int:
    """The fewest nodes of `gpus_per_node` GPUs that serve the demand: each key on nodes of its largest mode."""
    modes = valid_modes(model, dcm_only=dcm_only)
    total = 0
    for key, count in demand.items():
        per_node = max((gpus_per_node * m.partitions for m in modes if _serves(key, m)), default=0)
        if per_node == 0 and count > 0:
            raise UserError(
                f"{key} is not among the modes planned here ({', '.join(m.name for m in modes)})",
                fix="pass --kernel-modes for modes DCM does not apply, or change the demand",
            )
        total += -(-count // per_node) if count else 0
    return max(total, 1)
