"""Fragmentation Gradient Descent (FGD) and a refinement of it.

FGD places a pod where it increases the cluster's expected fragmentation (see :mod:`gpufleet.sched.replay.frag`)
the least: for every feasible node - and, for a GPU-sharing pod, every GPU on it - it computes
``delta = frag(before) - frag(after)`` and scores ``trunc(100 * sigmoid(delta / 1000))``, as the reference
plugin (fgd_score) does. Whole-GPU pods take the lowest-indexed idle GPUs; sharing pods the GPU with the
best score (lowest index on ties).

Scores only depend on a node's state and the pod's type (CPU, per-GPU share, GPU count, spec), so they are
cached per pod type and recomputed only for nodes whose ``version`` moved since - after one placement that
is one node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.compiled import compiled
from gpufleet.sched.replay.frag import DEFAULT_POPULARITY_THRESHOLD, FragModel, FragTracker, TypicalPods
from gpufleet.sched.replay.openb import MILLI, PodList
from gpufleet.sched.replay.policies.base import MAX_NODE_SCORE, Policy, pick_max
from gpufleet.sched.replay.state import (
    BoolArray,
    ClassStore,
    NodeStates,
    PodRequest,
    ReplayCluster,
    ReplayPlacement,
    models_allowed,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass
class _TypeCache:
    stamp: IntArray  # cluster.version when the node was last scored for this pod type
    delta: FloatArray  # frag(before) - frag(after), GPU milli; -inf where the pod cannot fit the GPUs
    gpu: IntArray  # chosen GPU for sharing pods


def after_placement(cpu: IntArray, gpus: IntArray, pod: PodRequest) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Candidate states after placing ``pod`` on each of the given node states.

    Returns (row of the source state, GPU id or -1, CPU after, GPUs after). Sharing pods get one candidate
    per distinct free share on a node (equal shares give equal states; the lowest index represents them);
    other pods one candidate per node, taking the GPUs with the least free share that fit (whole GPUs: the
    lowest-indexed idle ones).
    """
    rows_all = np.arange(len(cpu))
    if pod.num_gpu == 0:
        return rows_all, np.full(len(cpu), -1), cpu - pod.cpu_milli, gpus
    fits = gpus >= pod.gpu_milli
    if pod.is_sharing:
        width = gpus.shape[1]
        same_earlier = (gpus[:, :, None] == gpus[:, None, :]) & np.tri(width, width, -1, dtype=bool)[None]
        first = fits & ~same_earlier.any(axis=2)
        rows, cols = np.nonzero(first)
        after = gpus[rows].copy()
        after[np.arange(len(rows)), cols] -= pod.gpu_milli
        return rows, cols, cpu[rows] - pod.cpu_milli, after
    ok = fits.sum(axis=1) >= pod.num_gpu
    rows = rows_all[ok]
    sub = gpus[rows]
    sub_fits = fits[rows]
    order = np.argsort(np.where(sub_fits, sub, MILLI + 1), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(gpus.shape[1])[None, :].repeat(len(rows), axis=0), axis=1)
    taken = sub_fits & (rank < pod.num_gpu)
    after = sub - np.where(taken, pod.gpu_milli, 0)
    return rows, np.full(len(rows), -1), cpu[rows] - pod.cpu_milli, after


class FGD(Policy):
    """Fragmentation gradient descent, scored like the reference plugin (integer sigmoid score)."""

    name = "fgd"
    description = "least growth of expected fragmentation (FGD, ATC'23)"

    memory_aware = False  # the reference ignores memory in fragmentation

    def __init__(self, popularity_threshold: float = DEFAULT_POPULARITY_THRESHOLD) -> None:
        self.popularity_threshold = popularity_threshold
        self.model: FragModel | None = None
        self.tracker: FragTracker | None = None  # the reference path's per-node fragmentation, made on first use
        self._kernel_model: tuple[object, ...] = ()
        self._cache: dict[tuple[int | str, ...], _TypeCache] = {}

    def prepare(self, cluster: ReplayCluster, workload: PodList | None) -> None:
        if workload is None:
            raise ValueError("FGD needs the workload's pod list to derive its typical pods")
        typical = TypicalPods.from_pods(workload, self.popularity_threshold, with_memory=self.memory_aware)
        self.use_model(cluster, FragModel(typical, cluster.models))

    def use_model(self, cluster: ReplayCluster, model: FragModel) -> None:
        self.model = model
        self._kernel_model = model.kernel_args()
        self.tracker = None
        self._cache = {}

    # --- scores of node states (the placement engine's path: compiled) --------------------------------------------

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        return self.node_scores(self.row_deltas(rows, pod)[0], rows, pod)

    def row_deltas(self, rows: NodeStates, pod: PodRequest) -> tuple[FloatArray, IntArray]:
        """Per row: the best fragmentation decrease the pod allows there (-inf: its GPUs do not fit) and, for a
        sharing pod, the GPU that gives it (the first in row order with the best integer score)."""
        if self.model is None:
            raise RuntimeError("call prepare() first")
        shape = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.is_sharing)
        return compiled().fgd_deltas(
            self._kernel_model, rows.cpu_free, rows.mem_free, rows.gpu_free, rows.model_idx, shape, SCORE_STEPS
        )

    def class_scores(self, store: ClassStore, ids: IntArray, pod: PodRequest) -> FloatArray:
        # the filter and the deltas in one compiled pass over the classes' own arrays
        if self.model is None:
            raise RuntimeError("call prepare() first")
        shape = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.is_sharing)
        allowed = models_allowed(store.models, pod.gpu_spec, pod.gpu_resource)
        delta = compiled().fgd_feasible_deltas(
            self._kernel_model, ids, store.cpu_free, store.mem_free, store.gpu_free, store.model_idx, shape, allowed,
            SCORE_STEPS,
        )  # fmt: skip
        return np.where(delta == -np.inf, -np.inf, self.node_scores(delta, store.rows(ids), pod))

    def pick_gpus(
        self, cluster: ReplayCluster, node: int, pod: PodRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        if pod.is_sharing:
            _, gpu = self.row_deltas(cluster.node_row(node), pod)
            return (int(gpu[0]),)
        return cluster.exclusive_gpus(node, pod.num_gpu)

    # --- the reference path: numpy over every node, per-node results cached by version -------------------------------

    def deltas(self, cluster: ReplayCluster, pod: PodRequest) -> tuple[FloatArray, IntArray]:
        """Per node: the best fragmentation decrease the pod allows there, and the GPU that gives it."""
        if self.model is None:
            raise RuntimeError("call prepare() with this cluster first")
        if self.tracker is None or self.tracker.cluster is not cluster:
            self.tracker = FragTracker(self.model, cluster)
            self._cache = {}
        n = len(cluster)
        key: tuple[int | str, ...] = pod.type_key
        if self.tracker.model.uses_memory:
            key = (*key, pod.memory_mib)
        entry = self._cache.get(key)
        if entry is None:
            entry = _TypeCache(np.full(n, -1), np.full(n, -np.inf), np.full(n, -1))
            self._cache[key] = entry
        stale = np.flatnonzero(entry.stamp != cluster.version)
        if len(stale):
            self._rescore(cluster, pod, stale, entry)
        return entry.delta, entry.gpu

    def _rescore(self, cluster: ReplayCluster, pod: PodRequest, nodes: IntArray, entry: _TypeCache) -> None:
        assert self.tracker is not None
        rows, gpu, cpu_after, gpus_after = after_placement(cluster.cpu_free[nodes], cluster.gpu_free[nodes], pod)
        entry.stamp[nodes] = cluster.version[nodes]
        entry.delta[nodes] = -np.inf
        entry.gpu[nodes] = -1
        if not len(rows):
            return
        src = nodes[rows]
        mem_after = cluster.mem_free[src] - pod.memory_mib
        after = self.tracker.model.frag(cpu_after, gpus_after, cluster.model_idx[src], mem_after)
        delta = self.tracker.values[src] - after
        if pod.is_sharing:
            # best GPU per node: highest integer score, then lowest GPU index
            key = fgd_score(delta)
            best = np.full(len(nodes), -np.inf)
            np.maximum.at(best, rows, key)
            # candidates come row by row with ascending GPU ids: the first top one per row is the lowest id
            top = np.flatnonzero(key == best[rows])
            chosen_rows, pick = np.unique(rows[top], return_index=True)
            idx = top[pick]
            entry.delta[nodes[chosen_rows]] = delta[idx]
            entry.gpu[nodes[chosen_rows]] = gpu[idx]
        else:
            entry.delta[src] = delta

    def node_scores(self, delta: FloatArray, rows: NodeStates, pod: PodRequest) -> FloatArray:
        """Row scores from the per-row deltas (subclasses add tie-breaks). For a sharing pod a row's delta is its best
        GPU's; a score must read it only through fgd_score (equal-scoring GPUs may differ in delta)."""
        return fgd_score(delta)

    def choose(
        self, cluster: ReplayCluster, pod: PodRequest, feasible: BoolArray, rng: np.random.Generator
    ) -> ReplayPlacement:
        delta, gpu = self.deltas(cluster, pod)
        node = pick_max(self.node_scores(delta, cluster, pod), feasible, cluster)
        if pod.num_gpu == 0:
            return ReplayPlacement(node)
        if pod.is_sharing:
            return ReplayPlacement(node, (int(gpu[node]),))
        return ReplayPlacement(node, cluster.exclusive_gpus(node, pod.num_gpu))


# trunc(100 * sigmoid(delta / 1000)) reaches k (1..99) where delta = 1000 ln(k / (100 - k)): counting the steps at or
# below a delta gives the score without exp, whose last bit differs between numpy and compiled code
SCORE_STEPS = np.array([1000.0 * math.log(k / (MAX_NODE_SCORE - k)) for k in range(1, MAX_NODE_SCORE)])


def fgd_score(delta: FloatArray) -> FloatArray:
    """trunc(100 * sigmoid(delta / 1000)); -inf stays -inf."""
    score = np.searchsorted(SCORE_STEPS, delta, side="right").astype(np.float64)
    return np.where(np.isneginf(delta), -np.inf, score)
