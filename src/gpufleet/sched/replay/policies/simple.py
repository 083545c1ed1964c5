"""The baseline policies of the FGD paper's simulator, plus plain first-fit.

Each score follows the reference plugin's formula, including its integer truncation: coarse integer scores
tie often, and the random tie-break among them is part of how these policies behave.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.openb import MILLI
from gpufleet.sched.replay.policies.base import MAX_NODE_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, Policy, trunc_score
from gpufleet.sched.replay.state import SHARE_TAG, NodeStates, PodRequest, ReplayCluster

FloatArray = npt.NDArray[np.float64]


class FirstFit(Policy):
    """The first feasible node in node order; the lowest-indexed GPU(s) that fit."""

    name = "first-fit"
    description = "first feasible node, first GPUs that fit"
    tie_by_index = True

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        return np.zeros(len(rows))

    def pick_gpus(
        self, cluster: ReplayCluster, node: int, pod: PodRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        if pod.is_sharing:
            return (int(np.argmax(cluster.gpu_free[node] >= pod.gpu_milli)),)
        return cluster.exclusive_gpus(node, pod.num_gpu)


class RandomFit(Policy):
    """A uniformly random feasible node; a random GPU that fits for sharing pods (reference: random_score)."""

    name = "random"
    description = "uniformly random feasible node"
    picks_at_random = True

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        return np.zeros(len(rows))

    def pick_gpus(
        self, cluster: ReplayCluster, node: int, pod: PodRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        if pod.is_sharing:
            fits = np.flatnonzero(cluster.gpu_free[node] >= pod.gpu_milli)
            return (int(fits[rng.integers(len(fits))]),)
        return cluster.exclusive_gpus(node, pod.num_gpu)


class _TightestGpus(Policy):
    """Policies that give a sharing pod the tightest GPU that fits and a whole-GPU pod the first idle ones."""

    def pick_gpus(
        self, cluster: ReplayCluster, node: int, pod: PodRequest, rng: np.random.Generator
    ) -> tuple[int, ...]:
        return cluster.best_fit_gpus(node, pod)


class BestFit(_TightestGpus):
    """Least leftover CPU and GPU after placement (reference: best_fit_score).

    score = trunc(100 * (1 - 0.5 (cpu_free - cpu_req) / 128000 - 0.5 (gpu_free - gpu_req) / 8000)), with the
    node's GPU share summed over its GPUs; the tightest GPU for sharing pods.
    """

    name = "best-fit"
    description = "least CPU+GPU left after placement"

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        left = (rows.cpu_free - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        left = left + (rows.gpu_left() - pod.total_gpu_milli) / MAX_SPEC_GPU * 0.5
        return trunc_score((1.0 - left) * MAX_NODE_SCORE)


class DotProduct(_TightestGpus):
    """Tetris-style alignment of the free vector and the request (reference: dot_product_score, with the
    paper's settings: CPU and summed GPU share as one vector each, normalised by 128 cores and 8 GPUs).

    score = trunc(100 * (1 - (cpu_free cpu_req / 128000^2 + gpu_free gpu_req / 8000^2) / 2)).
    """

    name = "dot-product"
    description = "smallest dot product of free and requested resources"

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        dot = (rows.cpu_free / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU)
        dot = dot + (rows.gpu_left() / MAX_SPEC_GPU) * (pod.total_gpu_milli / MAX_SPEC_GPU)
        return trunc_score(MAX_NODE_SCORE * (1.0 - dot / 2.0))


class GpuPacking(_TightestGpus):
    """Fill used GPUs first, then used nodes, then the smallest idle nodes (reference: gpu_packing_score).

    Sharing a used GPU scores 100 - free%/10 (at least 50); taking idle GPUs on a used node scores
    50 - (idle GPUs taken) (at least 33); an idle node scores max(33 - GPUs, GPUs). CPU-only pods score 0.
    """

    name = "gpu-packing"
    description = "shared GPUs first, then used nodes, then idle nodes"

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        if pod.num_gpu == 0:
            return np.zeros(len(rows))
        full = rows.fully_free()
        idle_score = np.maximum(MAX_NODE_SCORE // 3 - full, full)
        if pod.is_sharing:
            # the pod takes the GPU with the least free share that fits
            tight = np.where(rows.gpu_free >= pod.gpu_milli, rows.gpu_free, MILLI + 1).min(axis=1)
            opens_idle = tight >= MILLI
            shared = np.maximum(MAX_NODE_SCORE - (np.minimum(tight, MILLI) * 100 // MILLI) // 10, MAX_NODE_SCORE // 2)
            used = np.where(opens_idle, max(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3), shared)
        else:
            # whole-GPU pods take idle GPUs only
            used = np.full(len(rows), max(MAX_NODE_SCORE // 2 - pod.num_gpu, MAX_NODE_SCORE // 3))
        return np.where(full == rows.num_gpu, idle_score, used).astype(np.float64)


class GpuClustering(_TightestGpus):
    """Keep pods of one GPU shape together (reference: gpu_clustering_score).

    Nodes already holding only this pod's shape score 75-100, nodes holding it among others 50-75, idle
    nodes 25-50, nodes holding other shapes 0-25; within a band, fuller nodes score higher. A shape is
    "sharing", or "k whole GPUs". CPU-only pods score 0.
    """

    name = "gpu-clustering"
    description = "co-locate pods that request the same GPU shape"
    class_fields = frozenset({"affinity"})

    def scores(self, rows: NodeStates, pod: PodRequest) -> FloatArray:
        tag = pod.affinity_tag
        if tag < 0:
            return np.zeros(len(rows))
        quarter = MAX_NODE_SCORE // 4
        fill = quarter * (MAX_SPEC_GPU - rows.gpu_left()) // MAX_SPEC_GPU
        shapes = (rows.affinity > 0).sum(axis=1)
        mine = rows.affinity[:, tag] > 0
        band = np.where(mine, np.where(shapes == 1, 3, 2), np.where(shapes == 0, 1, 0))
        return (fill + band * quarter).astype(np.float64)


__all__ = ["SHARE_TAG", "BestFit", "DotProduct", "FirstFit", "GpuClustering", "GpuPacking", "RandomFit"]
