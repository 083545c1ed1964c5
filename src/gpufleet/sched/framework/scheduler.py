"""The scheduling framework: filter, score, pick, assign; gangs, queues and preemption layered on top.

`Scheduler.plan` takes pending pods in queue order (priority first, then arrival), places gangs atomically, consults
queue quotas when given, and preempts lower-priority or borrowed work when a pod fits nowhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.model import Cluster, Fabric, Gang, PodPhase
from gpufleet.sched.framework.filters import (
    affinity_mask,
    failed_scheduling_message,
    feasible,
    node_reasons,
    preemption_message,
    reason_counts,
    taint_mask,
    unschedulable_mask,
)
from gpufleet.sched.framework.scoring import ScoreWeights, Strategy, score
from gpufleet.sched.framework.snapshot import NodeInfo, PodInfo, Snapshot, node_info, pod_info
from gpufleet.sched.framework.state import ClusterState


@dataclass(slots=True)
class Placement:
    pod: str
    node: str
    gpus: tuple[int, ...] = ()
    score: float = 0.0


@dataclass(slots=True)
class Failure:
    pod: str
    message: str
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Eviction:
    pod: str
    node: str
    reason: str  # "preempted by ns/pod" or "reclaimed by queue q"


@dataclass(slots=True)
class PlanResult:
    placements: list[Placement] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)

    def node_of(self, pod: str) -> str | None:
        return next((p.node for p in self.placements if p.pod == pod), None)


@dataclass(slots=True)
class Explanation:
    pod: str
    feasible: list[tuple[str, float]]  # (node, score), best first
    reasons: dict[str, int]
    message: str | None


class Scheduler:
    def __init__(
        self,
        nodes: list[NodeInfo],
        *,
        fabric: Fabric | None = None,
        bound: Iterable[PodInfo] = (),
        strategy: Strategy = Strategy.binpack,
        weights: ScoreWeights | None = None,
    ) -> None:
        self.state = ClusterState(nodes, fabric)
        self.strategy = strategy
        self.weights = weights or ScoreWeights()
        self.pods: dict[str, PodInfo] = {}
        for p in bound:
            self.pods[p.key] = p
            if p.pod.node in self.state.index and p.bound:
                self.state.assign(p, self.state.index[p.pod.node], p.pod.gpu_indices or None)
        self.state.commit()

    @classmethod
    def from_snapshot(cls, snap: Snapshot, **kwargs: object) -> Scheduler:
        sched = cls(snap.nodes, bound=[p for p in snap.pods if p.bound], **kwargs)  # type: ignore[arg-type]
        sched.pods.update({p.key: p for p in snap.pods})
        return sched

    @classmethod
    def from_cluster(cls, cluster: Cluster, **kwargs: object) -> Scheduler:
        running = [pod_info(p) for p in cluster.pods if p.node and p.phase in (PodPhase.pending, PodPhase.running)]
        return cls([node_info(n) for n in cluster.nodes], fabric=cluster.fabric, bound=running, **kwargs)  # type: ignore[arg-type]

    # --- one pod ---------------------------------------------------------------------------------------------

    def candidates(self, pod: PodInfo, restrict: np.ndarray | None = None) -> np.ndarray:
        mask = feasible(self.state, pod)
        if restrict is not None:
            mask = mask & restrict
        return np.flatnonzero(mask)

    def select_node(
        self, pod: PodInfo, restrict: np.ndarray | None = None, gang_groups: set[int] | None = None
    ) -> tuple[int, float] | None:
        nodes = self.candidates(pod, restrict)
        if len(nodes) == 0:
            return None
        if len(nodes) == 1:
            return int(nodes[0]), 0.0
        scores = score(self.state, pod, nodes, self.strategy, self.weights, gang_groups)
        best = int(np.argmax(scores))  # first maximum: deterministic tie-break by node order
        return int(nodes[best]), float(scores[best])

    def place(self, pod: PodInfo, node: int, score_: float = 0.0) -> Placement:
        a = self.state.assign(pod, node)
        self.pods[pod.key] = pod
        return Placement(pod.key, self.state.names[node], a.gpus, round(score_, 2))

    def schedule_one(self, pod: PodInfo) -> Placement | Failure:
        picked = self.select_node(pod)
        if picked is None:
            return self.failure(pod)
        return self.place(pod, *picked)

    def failure(self, pod: PodInfo, preemption: str | None = None) -> Failure:
        counts = reason_counts(node_reasons(self.state, pod))
        return Failure(pod.key, failed_scheduling_message(len(self.state), counts, preemption), dict(counts))

    def preemption_note(self, pod: PodInfo) -> str:
        """The `preemption: ...` half of a FailedScheduling message after a failed preemption attempt."""
        if not pod.preemptible:
            return "not eligible due to preemptionPolicy=Never."
        state = self.state
        helpful = int((unschedulable_mask(state, pod) & taint_mask(state, pod) & affinity_mask(state, pod)).sum())
        return preemption_message(len(state), helpful)

    def explain(self, pod: PodInfo) -> Explanation:
        nodes = self.candidates(pod)
        ranked: list[tuple[str, float]] = []
        if len(nodes):
            scores = score(self.state, pod, nodes, self.strategy, self.weights)
            order = np.argsort(-scores, kind="stable")
            ranked = [(self.state.names[int(nodes[i])], round(float(scores[i]), 2)) for i in order]
        counts: Counter[str] = reason_counts(node_reasons(self.state, pod))
        message = None if ranked else failed_scheduling_message(len(self.state), counts)
        return Explanation(pod.key, ranked, dict(counts), message)

    # --- many pods -------------------------------------------------------------------------------------------

    def plan(
        self,
        pending: Sequence[PodInfo],
        gangs: dict[str, Gang] | None = None,
        *,
        queues: object | None = None,
        preemption: bool = True,
    ) -> PlanResult:
        """Place pending pods in priority order; gangs as units; optional queue quotas and preemption."""
        from gpufleet.sched.framework.gang import plan_units

        return plan_units(self, pending, gangs or {}, queues=queues, preemption=preemption)
