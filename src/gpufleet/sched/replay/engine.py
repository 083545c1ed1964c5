"""The placement engine: a policy's decision over classes of identical nodes, with scores cached per class.

Nodes in the same state (GPU model, free CPU, memory and GPU shares as a multiset, used or not, and the affinity tags
when the policy reads them) pass the same filters and score the same, so the engine keeps them in
:class:`~gpufleet.sched.engine.classes.NodeClasses` and scores one row per class. A class's state never changes, so its
score for a pod type is computed once and kept; a placement moves one node to another class. Per pod the work is a
few array operations over the classes that have members, not over the nodes: a fleet of identical nodes is a handful
of classes however large it is.

The decision is the reference path's (a policy's ``choose`` over every node): the highest score, ties to the node with
the smallest ``name_rank`` (node index for first-fit); a random policy draws among the feasible nodes in node order.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from gpufleet.sched.engine.classes import NodeClasses
from gpufleet.sched.replay.compiled import compiled
from gpufleet.sched.replay.frag import FragModel
from gpufleet.sched.replay.policies.base import Policy
from gpufleet.sched.replay.state import ClassStates, PodRequest, ReplayCluster, ReplayPlacement

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class ReplayEngine:
    """Places pods on ``cluster`` with ``policy`` (prepared already), keeping the node classes current."""

    def __init__(self, cluster: ReplayCluster, policy: Policy) -> None:
        self.cluster = cluster
        self.models = cluster.models
        self.policy = policy
        tie = np.arange(len(cluster), dtype=np.int64) if policy.tie_by_index else cluster.name_rank
        self.tie = tie
        self.classes = NodeClasses(tie)
        self._with_affinity = "affinity" in policy.class_fields
        width = cluster.gpu_free.shape[1]
        cap = 64
        # per class (indexed by class id): the state every member shares
        self.cpu_free = np.zeros(cap, dtype=np.int64)
        self.mem_free = np.zeros(cap, dtype=np.int64)
        self.gpu_free = np.zeros((cap, width), dtype=np.int64)
        self.model_idx = np.zeros(cap, dtype=np.int64)
        self._num_gpu = np.zeros(cap, dtype=np.int64)
        self._used = np.zeros(cap, dtype=np.int64)
        self._affinity = np.zeros((cap, cluster.affinity.shape[1]), dtype=np.int64)
        # per pod type: each class's score (NaN: not computed yet; -inf: infeasible)
        self._scores: dict[Hashable, FloatArray] = {}
        self._frag_models: list[tuple[tuple[object, ...], list[float]]] = []
        self.frag_total: list[float] = []  # per tracked model: the cluster's fragmentation, kept current
        for node in range(len(cluster)):
            self._refresh(node)

    # --- classes -------------------------------------------------------------------------------------------------

    def _key(self, node: int) -> Hashable:
        c = self.cluster
        gpus = tuple(sorted(c.gpu_free[node].tolist(), reverse=True))
        used = bool(c.pods[node] > 0)
        key: tuple[object, ...] = (int(c.model_idx[node]), int(c.num_gpu[node]), int(c.cpu_free[node]),
                                   int(c.mem_free[node]), gpus, used)  # fmt: skip
        if self._with_affinity:
            key = (*key, tuple(c.affinity[node].tolist()))
        return key

    def _refresh(self, node: int) -> None:
        old = int(self.classes.node_class[node])
        cls, created = self.classes.move(node, self._key(node))
        if created:
            self._store(cls, node)
        if old != cls:
            for k, (_, values) in enumerate(self._frag_models):
                self.frag_total[k] += values[cls] - (values[old] if old >= 0 else 0.0)

    def _store(self, cls: int, node: int) -> None:
        if cls >= len(self.cpu_free):
            grow = len(self.cpu_free)
            self.cpu_free = np.concatenate([self.cpu_free, np.zeros(grow, dtype=np.int64)])
            self.mem_free = np.concatenate([self.mem_free, np.zeros(grow, dtype=np.int64)])
            self.gpu_free = np.concatenate([self.gpu_free, np.zeros_like(self.gpu_free)])
            self.model_idx = np.concatenate([self.model_idx, np.zeros(grow, dtype=np.int64)])
            self._num_gpu = np.concatenate([self._num_gpu, np.zeros(grow, dtype=np.int64)])
            self._used = np.concatenate([self._used, np.zeros(grow, dtype=np.int64)])
            self._affinity = np.concatenate([self._affinity, np.zeros_like(self._affinity)])
            for key, scores in self._scores.items():
                self._scores[key] = np.concatenate([scores, np.full(grow, np.nan)])
        c = self.cluster
        self.cpu_free[cls] = c.cpu_free[node]
        self.mem_free[cls] = c.mem_free[node]
        self.gpu_free[cls] = np.sort(c.gpu_free[node])[::-1]
        self.model_idx[cls] = c.model_idx[node]
        self._num_gpu[cls] = c.num_gpu[node]
        self._used[cls] = 1 if c.pods[node] > 0 else 0
        self._affinity[cls] = c.affinity[node]
        for m, values in self._frag_models:
            values.append(self._frag_of(m, cls))

    def rows(self, ids: IntArray) -> ClassStates:
        """The state of the given classes, one row each."""
        return ClassStates(
            models=self.cluster.models,
            model_idx=self.model_idx[ids],
            num_gpu=self._num_gpu[ids],
            cpu_free=self.cpu_free[ids],
            mem_free=self.mem_free[ids],
            gpu_free=self.gpu_free[ids],
            version=self._used[ids],
            affinity=self._affinity[ids],
        )

    # --- fragmentation kept per class ------------------------------------------------------------------------------

    def _frag_of(self, model: tuple[object, ...], cls: int) -> float:
        one = slice(cls, cls + 1)
        return float(
            compiled().frag_rows(
                model, self.cpu_free[one], self.mem_free[one], self.gpu_free[one], self.model_idx[one]
            )[0]
        )

    def track_frag(self, model: FragModel) -> int:
        """Keep the cluster's total fragmentation under ``model`` current (read ``frag_total[k]``); returns k."""
        args = model.kernel_args()
        values = [self._frag_of(args, cls) for cls in range(len(self.classes))]
        self._frag_models.append((args, values))
        self.frag_total.append(float(sum(values[int(c)] for c in self.classes.node_class)))
        return len(self.frag_total) - 1

    # --- decisions -----------------------------------------------------------------------------------------------

    def _type_key(self, pod: PodRequest) -> Hashable:
        return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec, pod.gpu_resource)

    def scores(self, pod: PodRequest) -> tuple[IntArray, FloatArray]:
        """The active classes and their scores for the pod (-inf: the pod does not fit there)."""
        key = self._type_key(pod)
        table = self._scores.get(key)
        if table is None:
            table = np.full(len(self.cpu_free), np.nan)
            self._scores[key] = table
        ids = self.classes.active()
        scores = table[ids]
        missing = np.isnan(scores)
        if missing.any():
            todo = ids[missing]
            table[todo] = self.policy.class_scores(self, todo, pod)
            scores = table[ids]
        return ids, scores

    def choose(self, pod: PodRequest, rng: np.random.Generator) -> ReplayPlacement | None:
        """Where the pod goes, or None when it fits nowhere. Changes nothing."""
        ids, scores = self.scores(pod)
        if self.policy.picks_at_random:
            fits = np.zeros(len(self.classes), dtype=bool)
            fits[ids] = scores > -np.inf
            nodes = np.flatnonzero(fits[self.classes.node_class])
            if not len(nodes):
                return None
            node = int(nodes[rng.integers(len(nodes))])
        else:
            cls = self.classes.pick(ids, scores)
            if cls is None:
                return None
            node = self.classes.first(cls)
        return ReplayPlacement(node, self.policy.pick_gpus(self.cluster, node, pod, rng))

    def choose_among(
        self, pod: PodRequest, allowed: npt.NDArray[np.bool_], rng: np.random.Generator
    ) -> ReplayPlacement | None:
        """As `choose`, among the nodes `allowed` marks (a gang's member kept under one leaf group): each node scores
        what its class scores; the best, ties to the smallest tie key; a random policy draws among them in node
        order. Changes nothing."""
        ids, scores = self.scores(pod)
        per_class = np.full(len(self.classes), -np.inf)
        per_class[ids] = scores
        nodes = np.flatnonzero(allowed)
        node_scores = per_class[self.classes.node_class[nodes]]
        fits = node_scores > -np.inf
        if not fits.any():
            return None
        if self.policy.picks_at_random:
            candidates = nodes[fits]
            node = int(candidates[rng.integers(len(candidates))])
        else:
            ties = nodes[node_scores == node_scores.max()]
            node = int(ties[np.argmin(self.tie[ties])])
        return ReplayPlacement(node, self.policy.pick_gpus(self.cluster, node, pod, rng))

    def place(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        self.cluster.place(pod, placement)
        self._refresh(placement.node)

    def unplace(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        self.cluster.unplace(pod, placement)
        self._refresh(placement.node)

    def schedule(self, pod: PodRequest, rng: np.random.Generator) -> ReplayPlacement | None:
        """Choose and place; None when the pod fits nowhere."""
        placement = self.choose(pod, rng)
        if placement is not None:
            self.place(pod, placement)
        return placement
