"""Gangs in the trace replay: a gang's pods arrive together and are placed all or none, under as few switches as the
replay cluster's fabric allows.

The fabric is the one topology model (gpufleet.fabric.topology) the scheduling framework and every scheduler export
read. A gang is tried in one leaf group first (the nodes that reach the same set of rail leaves: on every rail its
members are one switch apart), the tightest few that have the GPUs for it; then under one set of spines (a three-tier
fabric's pod, so its traffic stays below the cores); then anywhere. Within a group each member goes where the
replay's policy puts it among the group's nodes, largest member first. A try that leaves a member out is taken back
pod by pod, so a gang that does not fit leaves no trace. Without a fabric a gang is placed all or none anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.fabric.topology import Topology
from gpufleet.sched.engine.fabric import FabricPlace, Landing, fabric_places, landing
from gpufleet.sched.replay.engine import ReplayEngine
from gpufleet.sched.replay.policies.base import Policy
from gpufleet.sched.replay.state import PodRequest, ReplayCluster, ReplayPlacement

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
MAX_GROUP_TRIALS = 4  # groups tried per tier before the next tier (as the framework's gang placement)


def group_index(names: Sequence[str], key: Mapping[str, object]) -> tuple[IntArray, int]:
    """Per node, its group's number by `key` (-1: in none), numbered in order of first node; and how many."""
    numbers: dict[object, int] = {}
    out = np.full(len(names), -1, dtype=np.int64)
    for i, name in enumerate(names):
        k = key.get(name)
        if k:
            out[i] = numbers.setdefault(k, len(numbers))
    return out, len(numbers)


@dataclass(frozen=True)
class ReplayFabric:
    """The replay cluster's nodes in the fabric: their places, and per node its leaf group and spine group."""

    places: dict[str, FabricPlace]
    leaf_group: IntArray
    leaf_groups: int
    spine_group: IntArray
    spine_groups: int

    @classmethod
    def from_topology(cls, topology: Topology, names: Sequence[str]) -> ReplayFabric:
        places = fabric_places(topology, names)
        leaf_group, leaf_groups = group_index(names, {n: p.leaves for n, p in places.items()})
        spine_group, spine_groups = group_index(names, {n: p.spines for n, p in places.items()})
        return cls(places, leaf_group, leaf_groups, spine_group, spine_groups)

    @property
    def leaves(self) -> dict[str, frozenset[str]]:
        return {n: p.leaves for n, p in self.places.items()}

    def landing(self, nodes: Sequence[str]) -> Landing:
        domains = {n: p.domain for n, p in self.places.items() if p.domain}
        return landing(self.places, self.leaves, domains, nodes)


@dataclass
class GangResult:
    """One gang of the replay: its pods, and where it landed (None: it did not fit, none of it placed)."""

    name: str
    pods: int
    gpus: int
    first: int = 0  # where its pods start in the replay's per-pod records (placements, curves): pods in a row
    landing: Landing | None = None

    @property
    def placed(self) -> bool:
        return self.landing is not None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"gang": self.name, "pods": self.pods, "gpus": self.gpus, "placed": self.placed}
        if self.landing is not None:
            out.update(self.landing.to_dict())
        return out


def tier_of(result: GangResult) -> str:
    """'failed', 'one node', 'one leaf' (one leaf group), 'one spine' (leaves joined by a spine above them all),
    'cores' (up to the core tier), or 'unknown' (nodes outside the fabric, or no fabric)."""
    if result.landing is None:
        return "failed"
    hops = result.landing.switch_hops
    if hops is None:
        return "unknown"
    return {0: "one node", 1: "one leaf", 3: "one spine"}.get(hops, "cores")


@dataclass
class GangStats:
    """Per gang of a replay, where it landed; counted by tier for the summary."""

    gangs: list[GangResult] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {"placed": 0, "one node": 0, "one leaf": 0, "one spine": 0, "cores": 0, "unknown": 0, "failed": 0}
        for g in self.gangs:
            out[tier_of(g)] += 1
            if g.placed:
                out["placed"] += 1
        return out

    def summary(self) -> str:
        """'gangs: 40 placed, 34 under one leaf, 6 across leaves under one spine, 0 through the cores, 2 failed'."""
        c = self.counts()
        parts = [f"{c['placed']} placed"]
        if c["one node"]:
            parts.append(f"{c['one node']} on one node")
        parts += [
            f"{c['one leaf']} under one leaf",
            f"{c['one spine']} across leaves under one spine",
            f"{c['cores']} through the cores",
        ]
        if c["unknown"]:
            parts.append(f"{c['unknown']} outside the fabric")
        parts.append(f"{c['failed']} failed")
        return "gangs: " + ", ".join(parts)


class GangPlacer:
    """Places gangs on the replay's cluster with its policy: through the placement engine (as lone pods are) or,
    for the reference path, with the policy scoring every node."""

    def __init__(
        self,
        cluster: ReplayCluster,
        policy: Policy,
        engine: ReplayEngine | None,
        fabric: ReplayFabric | None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.engine = engine
        self.fabric = fabric

    def _choose(self, pod: PodRequest, allowed: BoolArray | None, rng: np.random.Generator) -> ReplayPlacement | None:
        if self.engine is not None:
            if allowed is None:
                return self.engine.choose(pod, rng)
            return self.engine.choose_among(pod, allowed, rng)
        feasible = self.cluster.feasible(pod)
        if allowed is not None:
            feasible &= allowed
        return self.policy.choose(self.cluster, pod, feasible, rng) if feasible.any() else None

    def _place(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        if self.engine is not None:
            self.engine.place(pod, placement)
        else:
            self.cluster.place(pod, placement)

    def _unplace(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        if self.engine is not None:
            self.engine.unplace(pod, placement)
        else:
            self.cluster.unplace(pod, placement)

    def _try(
        self, members: Sequence[PodRequest], allowed: BoolArray | None, rng: np.random.Generator
    ) -> list[ReplayPlacement] | None:
        done: list[tuple[PodRequest, ReplayPlacement]] = []
        for pod in members:
            placement = self._choose(pod, allowed, rng)
            if placement is None:
                for placed_pod, where in reversed(done):
                    self._unplace(placed_pod, where)
                return None
            self._place(pod, placement)
            done.append((pod, placement))
        return [where for _, where in done]

    def _groups(self, members: Sequence[PodRequest], group_of: IntArray, count: int) -> list[int]:
        """Groups with the free GPUs and CPU for every member, fewest free GPUs first (the tightest fit)."""
        c = self.cluster
        member = group_of >= 0
        gpus = np.bincount(group_of[member], weights=c.gpu_free[member].sum(axis=1), minlength=count)
        cpus = np.bincount(group_of[member], weights=c.cpu_free[member], minlength=count)
        need_gpu = sum(p.total_gpu_milli for p in members)
        need_cpu = sum(p.cpu_milli for p in members)
        order = np.lexsort((np.arange(count), gpus))
        return [int(g) for g in order if gpus[g] >= need_gpu and cpus[g] >= need_cpu][:MAX_GROUP_TRIALS]

    def place(self, members: Sequence[PodRequest], rng: np.random.Generator) -> list[ReplayPlacement] | None:
        """Every member placed (in the order given), or None with nothing placed."""
        order = sorted(range(len(members)), key=lambda i: -members[i].total_gpu_milli)  # largest first, stable
        ordered = [members[i] for i in order]
        tiers: list[tuple[IntArray, int]] = []
        if self.fabric is not None and len(members) > 1:
            tiers.append((self.fabric.leaf_group, self.fabric.leaf_groups))
            if self.fabric.spine_groups > 1:  # one set of spines over all: nothing between a leaf group and anywhere
                tiers.append((self.fabric.spine_group, self.fabric.spine_groups))
        for group_of, count in tiers:
            for g in self._groups(ordered, group_of, count):
                got = self._try(ordered, group_of == g, rng)
                if got is not None:
                    return _in_member_order(order, got)
        got = self._try(ordered, None, rng)
        return _in_member_order(order, got) if got is not None else None

    def landing(self, nodes: Sequence[int]) -> Landing:
        names = [self.cluster.names[i] for i in nodes]
        if self.fabric is None:
            return Landing(tuple(sorted(set(names))), switch_hops=0 if len(set(names)) == 1 else None)
        return self.fabric.landing(names)


def _in_member_order(order: Sequence[int], placed: Sequence[ReplayPlacement]) -> list[ReplayPlacement]:
    out: list[ReplayPlacement | None] = [None] * len(order)
    for position, member in enumerate(order):
        out[member] = placed[position]
    return [p for p in out if p is not None]
