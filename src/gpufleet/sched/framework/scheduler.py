"""The scheduling framework: filter, score, pick, assign; gangs, queues and preemption layered on top.

`Scheduler.plan` takes pending pods in queue order (priority first, then arrival), places gangs atomically, consults
queue quotas when given, and preempts lower-priority or borrowed work when a pod fits nowhere.

A lone pod is decided over classes of identical nodes (`by_class`), a gang member or a leaf-restricted choice over
the nodes it may take; `reference=True` filters and scores every node instead, the plain implementation the class
path must agree with decision for decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from gpufleet.fabric.topology import Topology
from gpufleet.model import Cluster, Fabric, Gang, PodPhase
from gpufleet.sched.framework.by_class import ClassChooser, selected_label_keys
from gpufleet.sched.framework.filters import (
    failed_scheduling_message,
    feasible,
    feasible_on,
    node_reasons,
    preemption_message,
    reason_counts,
    static_mask,
)
from gpufleet.sched.framework.gang import GangOutcome, build_units, place_gang
from gpufleet.sched.framework.preemption import preempt_for_unit
from gpufleet.sched.framework.queues import QueueBook
from gpufleet.sched.framework.scoring import ScoreWeights, Strategy, score
from gpufleet.sched.framework.snapshot import FabricHealth, NodeInfo, PodInfo, Snapshot, node_info, pod_info
from gpufleet.sched.framework.state import ClusterState
from gpufleet.sched.framework.topology import Landing, landing
from gpufleet.sched.framework.types import Explanation, Failure, Placement, PlanResult


class Scheduler:
    def __init__(
        self,
        nodes: list[NodeInfo],
        *,
        fabric: Fabric | None = None,
        fabric_health: FabricHealth | None = None,
        topology: Topology | None = None,
        bound: Iterable[PodInfo] = (),
        strategy: Strategy = Strategy.binpack,
        weights: ScoreWeights | None = None,
        reference: bool = False,
    ) -> None:
        self.state = ClusterState(nodes, fabric, fabric_health, topology)
        self.strategy = strategy
        self.weights = weights or ScoreWeights()
        self.reference = reference
        self.chooser = ClassChooser(self.state, self.strategy, self.weights)
        self.pods: dict[str, PodInfo] = {}
        for p in bound:
            self.pods[p.key] = p
            if p.pod.node in self.state.index and p.bound:
                self.state.assign(p, self.state.index[p.pod.node], p.pod.gpu_indices or None)
        self.state.commit()

    @classmethod
    def from_snapshot(cls, snap: Snapshot, **kwargs: object) -> Scheduler:
        if snap.fabric_health is not None:
            kwargs.setdefault("fabric_health", snap.fabric_health)
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

    def expect(self, pods: Iterable[PodInfo]) -> None:
        """Split the node classes once by every label key these pods select on (rather than once per new key as
        pods arrive)."""
        if not self.reference:
            self.state.split_classes(set().union(*(selected_label_keys(p) for p in pods)))

    def by_class(self, pod: PodInfo) -> bool:
        """Whether the pod is decided over classes of nodes (the classes then tell apart every label it reads)."""
        return not self.reference and self.chooser.covers(pod)

    def select_node(
        self, pod: PodInfo, restrict: np.ndarray | None = None, gang_groups: set[int] | None = None
    ) -> tuple[int, float] | None:
        if self.reference:
            if restrict is not None and restrict.dtype != bool:  # node indices
                mask = np.zeros(len(self.state), dtype=bool)
                mask[restrict] = True
                restrict = mask
            return self._select_per_node(pod, self.candidates(pod, restrict), gang_groups)
        # leaf groups and fabric health are not in the classes: only gang scoring and leaf restriction read them
        lone = restrict is None and (gang_groups is None or (not gang_groups and not self.state.has_fabric_health))
        covered = self.chooser.covers(pod)
        if lone and covered:
            return self.chooser.select(pod)
        if restrict is None:
            nodes = np.arange(len(self.state))
        else:
            nodes = np.flatnonzero(restrict) if restrict.dtype == bool else restrict
        if covered:
            return self.chooser.select_among(pod, nodes, gang_groups)
        return self._select_per_node(pod, nodes[feasible_on(self.state, pod, nodes)], gang_groups)

    def _select_per_node(
        self, pod: PodInfo, nodes: np.ndarray, gang_groups: set[int] | None
    ) -> tuple[int, float] | None:
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
        placed = Placement(pod.key, self.state.names[node], a.gpus, round(score_, 2))
        if a.alignment is not None:
            placed.nics, placed.alignment = a.alignment.nics, a.alignment.note()
        return placed

    def schedule_one(self, pod: PodInfo) -> Placement | Failure:
        picked = self.select_node(pod)
        if picked is None:
            return self.failure(pod)
        return self.place(pod, *picked)

    def failure(self, pod: PodInfo, preemption: str | None = None) -> Failure:
        if self.by_class(pod):
            counts = self.chooser.reason_counts(pod)
        else:
            counts = reason_counts(node_reasons(self.state, pod))
        return Failure(pod.key, failed_scheduling_message(len(self.state), counts, preemption), dict(counts))

    def preemption_note(self, pod: PodInfo) -> str:
        """The `preemption: ...` half of a FailedScheduling message after a failed preemption attempt."""
        if not pod.preemptible:
            return "not eligible due to preemptionPolicy=Never."
        state = self.state
        helpful = self.chooser.static_count(pod) if self.by_class(pod) else int(static_mask(state, pod).sum())
        return preemption_message(len(state), helpful)

    def feasible_classes(self, pod: PodInfo) -> tuple[np.ndarray, np.ndarray]:
        return self.chooser.feasible_classes(pod)

    def fits_somewhere(self, pod: PodInfo) -> bool:
        """Whether some node passes every filter for the pod."""
        return self.select_node(pod) is not None if self.by_class(pod) else bool(len(self.candidates(pod)))

    def explain(self, pod: PodInfo) -> Explanation:
        nodes = self.candidates(pod)
        ranked: list[tuple[str, float]] = []
        if len(nodes):
            scores = score(self.state, pod, nodes, self.strategy, self.weights)
            order = np.argsort(-scores, kind="stable")
            ranked = [(self.state.names[int(nodes[i])], round(float(scores[i]), 2)) for i in order]
        counts: Counter[str] = reason_counts(node_reasons(self.state, pod))
        message = None if ranked else failed_scheduling_message(len(self.state), counts)
        alignment: dict[str, str] = {}
        for node in nodes.tolist():
            choice = self.state.nic_choice(pod, node)
            if choice is not None:
                alignment[self.state.names[node]] = choice.note()
        return Explanation(pod.key, ranked, dict(counts), message, alignment)

    def landing(self, gang: str) -> Landing:
        """Where the gang's placed members sit: leaves and spines spanned, NVLink domains, switch hops."""
        state = self.state
        nodes = [state.names[state.placed[key].node] for key in state.gang_members.get(gang, ())]
        return landing(state.places, state.leaves, state.nvlink_domain_of, nodes)

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
        return plan_units(self, pending, gangs or {}, queues=queues, preemption=preemption)


def plan_units(
    sched: Scheduler,
    pending: Sequence[PodInfo],
    gangs: dict[str, Gang],
    *,
    queues: object | None = None,
    preemption: bool = True,
) -> PlanResult:
    book = queues if isinstance(queues, QueueBook) else None
    placed_count: dict[str, int] = {}
    for a in sched.state.placed.values():
        if a.pod.pod.gang:
            placed_count[a.pod.pod.gang] = placed_count.get(a.pod.pod.gang, 0) + 1
    if book is not None:
        book.charge_running(a.pod for a in sched.state.placed.values() if a.pod.key not in book.members)
    result = PlanResult()
    for unit in build_units(pending, gangs, placed_count):
        admission = book.admit(unit) if book is not None else None
        if admission is not None and not admission.ok:
            result.failures.extend(Failure(p.key, admission.message) for p in unit.pods)
            continue
        mark = sched.state.mark()
        out = place_gang(sched, unit)
        fitted = out.fitted
        if not out.placements and preemption:
            can_evict = book.evictable_for(unit, admission) if book is not None else None
            pre = preempt_for_unit(sched, unit, can_evict)
            if pre is not None:
                out = GangOutcome(placements=pre.placements)
                result.evictions.extend(pre.evictions)
                if book is not None:
                    for ev in pre.evictions:
                        book.uncharge(sched.pods[ev.pod])
        if out.placements:
            result.placements.extend(out.placements)
            if unit.gang:
                result.landings[unit.name] = sched.landing(unit.name)
            if book is not None:
                book.charge_unit(unit, [sched.pods[p.pod] for p in out.placements], admission)
            continue
        sched.state.rollback(mark)
        for pod in unit.pods:
            fail = sched.failure(pod, sched.preemption_note(pod) if preemption else None)
            if unit.gang and sched.fits_somewhere(pod):
                fail.message = (
                    f"gang {unit.name}: only {fitted} of minMember {unit.min_member} pods fit together; "
                    "none placed (all-or-nothing)"
                )
            result.failures.append(fail)
    return result
