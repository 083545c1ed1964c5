"""Node choice over classes of identical nodes: the same decision as filtering and scoring every node, at a cost
that follows the number of distinct node states rather than the number of nodes.

Nodes in one class (`ClusterState.classes`) pass the same filters and score the same for any pod whose node
selection reads only label keys the classes tell apart, so a pod is decided on one member per class. What a class
scores for a pod's shape never changes (a node whose state changes moves to another class), so it is computed once per
(shape, class) and kept. Scores normalised over the candidates (preferred affinity, PreferNoSchedule taints) keep
their raw value per class and are divided by the maximum over the candidate classes, which is the maximum over the
candidate nodes. The winner among tied classes is the member with the lowest node index, as `np.argmax` over nodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gpufleet.model import TaintEffect
from gpufleet.sched.framework.filters import feasible_on, node_reasons, static_mask, tolerates
from gpufleet.sched.framework.scoring import (
    ScoreWeights,
    Strategy,
    fabric_fit,
    leaf_affinity,
    normalize,
    nvlink_fit,
    preferred_raw,
    resources_fit,
    wants_nics,
)
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.state import ClusterState


def selected_label_keys(pod: PodInfo) -> set[str]:
    """Every node label key the pod's filters and scores read: nodeSelector, required and preferred affinity."""
    keys = set(pod.pod.node_selector)
    aff = pod.pod.affinity
    if aff is not None:
        keys.update(r.key for term in aff.required for r in term)
        keys.update(r.key for term in aff.preferred for r in term.requirements)
    return keys


def shape_of(pod: PodInfo) -> tuple[object, ...]:
    """What the class filters and scores read of a pod: two pods of one shape score every class alike."""
    g = pod.pod.gpu
    return (
        tuple(pod.requests.items()),
        pod.pod.tolerations,
        tuple(sorted(pod.pod.node_selector.items())),
        pod.pod.affinity,
        g.count,
        g.sharing,
    )


@dataclass(slots=True)
class ShapeScores:
    """Per class id: whether a pod of this shape fits, and its score parts before normalisation."""

    known: np.ndarray
    fits: np.ndarray
    copies: np.ndarray  # how many pods of the shape the class's free resources hold (no other filter)
    resources: np.ndarray
    nvlink: np.ndarray
    preferred: np.ndarray
    soft_taints: np.ndarray
    nic: np.ndarray  # GPU<->NIC alignment (nodes whose affinity is known)

    @classmethod
    def empty(cls, n: int) -> ShapeScores:
        return cls(
            np.zeros(n, dtype=bool),
            np.zeros(n, dtype=bool),
            np.zeros(n, dtype=np.int64),
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
        )

    def grow(self, n: int) -> None:
        size = len(self.known)
        if n <= size:
            return
        extra = max(n, 2 * size) - size
        for name in ("known", "fits", "copies", "resources", "nvlink", "preferred", "soft_taints", "nic"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros(extra, dtype=arr.dtype)]))


def soft_taint_counts(state: ClusterState, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
    """How many PreferNoSchedule taints the pod does not tolerate, per node (TaintToleration's raw score)."""
    tols = pod.pod.tolerations
    per_group: dict[object, float] = {}
    for group in state.taint_groups:
        per_group[group] = float(
            sum(
                1
                for t in group
                if t.effect is TaintEffect.prefer_no_schedule and not any(tolerates(x, t) for x in tols)
            )
        )
    return np.array([per_group[state.taints[int(i)]] for i in nodes], dtype=np.float64)


class ClassChooser:
    """Chooses nodes for lone pods (no leaf restriction, no gang scoring) by class, with scores kept per shape."""

    def __init__(self, state: ClusterState, strategy: Strategy, weights: ScoreWeights) -> None:
        self.state = state
        self.strategy = strategy
        self.weights = weights
        self._epoch = state.class_epoch
        self._shapes: dict[tuple[object, ...], ShapeScores] = {}

    def covers(self, pod: PodInfo) -> bool:
        """Whether the classes tell apart every node label the pod reads (splitting them if needed)."""
        keys = selected_label_keys(pod)
        return not keys or self.state.classes_cover(keys)

    def _scores(self, pod: PodInfo, ids: np.ndarray) -> ShapeScores:
        state = self.state
        if state.class_epoch != self._epoch:  # the classes were rebuilt: ids changed meaning
            self._shapes.clear()
            self._epoch = state.class_epoch
        shape = shape_of(pod)
        table = self._shapes.get(shape)
        if table is None:
            table = self._shapes[shape] = ShapeScores.empty(max(64, len(state.classes)))
        table.grow(len(state.classes))
        todo = ids[~table.known[ids]]
        if len(todo):
            first = state.classes.first
            reps = np.fromiter((first(int(c)) for c in todo), dtype=np.int64, count=len(todo))
            table.fits[todo] = feasible_on(state, pod, reps)
            idx, amounts, unknown = state.request_vector(pod)
            if not unknown:
                table.copies[todo] = (state.free_[np.ix_(reps, idx)] // amounts).min(axis=1)
            table.resources[todo] = resources_fit(state, pod, reps, self.strategy, self.weights.resource_weights)
            table.nvlink[todo] = nvlink_fit(state, pod, reps)
            aff = pod.pod.affinity
            if aff is not None and aff.preferred:
                table.preferred[todo] = preferred_raw(state, pod, reps, each=True)
            if state.has_soft_taints:
                table.soft_taints[todo] = soft_taint_counts(state, pod, reps)
            if state.has_affinity and wants_nics(state, pod):
                table.nic[todo] = state.nic_fit(pod, reps)
            table.known[todo] = True
        return table

    def feasible_classes(self, pod: PodInfo) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the active classes where the pod passes every filter, and how many such pods each node of them
        holds by its free resources."""
        ids = self.state.classes.active().copy()
        table = self._scores(pod, ids)
        ok = ids[table.fits[ids]]
        return ok, table.copies[ok]

    def _total(self, pod: PodInfo, table: ShapeScores, cls: np.ndarray) -> np.ndarray:
        """Score of each candidate, given by its class (the same class may appear more than once), summed in the
        order `scoring.score` sums the plugins; normalised plugins divide by the maximum over the candidates."""
        w = self.weights
        total = w.resources_fit * table.resources[cls]
        aff = pod.pod.affinity
        if aff is not None and aff.preferred:
            total += w.node_affinity * normalize(table.preferred[cls])
        if self.state.has_soft_taints:
            total += w.taint_toleration * normalize(table.soft_taints[cls], reverse=True)
        if self.state.exclusive_gpus(pod) >= 2:
            total += w.topology * table.nvlink[cls]
        if self.state.has_affinity and wants_nics(self.state, pod):
            total += w.topology * table.nic[cls]
        return total

    def select(self, pod: PodInfo) -> tuple[int, float] | None:
        """The node `Scheduler.select_node` picks for a pod without restriction or gang, and its score."""
        classes = self.state.classes
        ids = classes.active().copy()
        table = self._scores(pod, ids)
        cand = ids[table.fits[ids]]
        if len(cand) == 0:
            return None
        if len(cand) == 1 and classes.size(int(cand[0])) == 1:
            return classes.first(int(cand[0])), 0.0  # one feasible node: no scoring, as the node path
        total = self._total(pod, table, cand)
        best = classes.pick(cand, total)
        assert best is not None  # scores are finite
        pos = int(np.flatnonzero(cand == best)[0])
        return classes.first(best), float(total[pos])

    def select_among(self, pod: PodInfo, nodes: np.ndarray, gang_groups: set[int] | None) -> tuple[int, float] | None:
        """The best of `nodes` (sorted node indices), as `Scheduler.select_node` restricted to them: filters and
        per-class scores read from the shape's table, leaf and fabric scores (a gang member's) per node."""
        state = self.state
        cls = state.classes.node_class[nodes]
        table = self._scores(pod, cls)
        ok = table.fits[cls]
        nodes, cls = nodes[ok], cls[ok]
        if len(nodes) == 0:
            return None
        if len(nodes) == 1:
            return int(nodes[0]), 0.0
        total = self._total(pod, table, cls)
        w = self.weights
        if gang_groups:
            total += w.topology * leaf_affinity(state, nodes, gang_groups)
        if gang_groups is not None and state.has_fabric_health:
            total += w.topology * fabric_fit(state, nodes)
        best = int(np.argmax(total))  # first maximum: the lowest node index, as the node path
        return int(nodes[best]), float(total[best])

    def reason_counts(self, pod: PodInfo) -> Counter[str]:
        """Why nodes reject the pod, counted as over every node: one member's reasons times its class's size."""
        state = self.state
        classes = state.classes
        ids = classes.active().copy()
        reps = np.fromiter((classes.first(int(c)) for c in ids), dtype=np.int64, count=len(ids))
        counts: Counter[str] = Counter()
        for cls, rs in zip(ids, node_reasons(state, pod, reps), strict=True):
            n = classes.size(int(cls))
            for r in rs:
                counts[r] += n
        return counts

    def static_count(self, pod: PodInfo) -> int:
        """How many nodes pass the filters no eviction can change (cordon, taints, node selection, vendor)."""
        state = self.state
        classes = state.classes
        ids = classes.active()
        reps = np.fromiter((classes.first(int(c)) for c in ids), dtype=np.int64, count=len(ids))
        ok = static_mask(state, pod)[reps]
        return sum(classes.size(int(c)) for c in ids[ok])
