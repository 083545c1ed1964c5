"""Score plugins over the feasible nodes: each returns 0..100 per node, combined with weights as kube-scheduler does."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from gpufleet.model import TaintEffect
from gpufleet.sched.framework.devices import vendor_resources
from gpufleet.sched.framework.filters import requirement_matches, tolerates
from gpufleet.sched.framework.nics import nic_request
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.state import ClusterState

MAX_SCORE = 100.0


class Strategy(StrEnum):
    binpack = "binpack"  # NodeResourcesFit MostAllocated: fill nodes, keep whole nodes free for big pods
    spread = "spread"  # NodeResourcesFit LeastAllocated (kube-scheduler's default)


@dataclass(slots=True)
class ScoreWeights:
    """Plugin weights. kube-scheduler's defaults are TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1."""

    taint_toleration: float = 3.0
    node_affinity: float = 2.0
    resources_fit: float = 1.0
    topology: float = 2.0
    # every vendor's whole devices weigh the same; a node is weighed by its own vendor's (see resources_fit)
    resource_weights: dict[str, float] = field(
        default_factory=lambda: {"cpu": 1.0, "memory": 1.0, **dict.fromkeys(vendor_resources(), 3.0)}
    )


def resources_fit(
    state: ClusterState, pod: PodInfo, nodes: np.ndarray, strategy: Strategy, weights: dict[str, float]
) -> np.ndarray:
    """Requested-to-allocatable ratio after placing the pod, per resource, weighted (kube's Least/MostAllocated).

    A vendor's whole-device resource weighs only on the nodes whose accelerators it names (each node carries one
    vendor's): an H100 node is scored on nvidia.com/gpu, an MI300X node on amd.com/gpu, with the same weight.
    """
    total = np.zeros(len(nodes))
    wsum = np.zeros(len(nodes))
    devices = vendor_resources()
    own = state.node_gpu_col[nodes]
    for name, w in weights.items():
        col = state.res_index.get(name)
        if col is None:
            continue
        on = own == col if name in devices else np.ones(len(nodes), dtype=bool)
        if not on.any():
            continue
        # fraction of the node's allocatable in use once the pod is placed (0 where the node has none)
        inv = state.inv_alloc[:, col][nodes]
        used = state.used[:, col][nodes] + pod.requests.get(name, 0)
        frac = np.minimum(used * inv, 1.0)
        total += np.where(on, w * (frac if strategy is Strategy.binpack else 1.0 - frac), 0.0)
        wsum += np.where(on, w, 0.0)
    return np.divide(total * MAX_SCORE, wsum, out=total.copy(), where=wsum > 0)


def normalize(raw: np.ndarray, reverse: bool = False) -> np.ndarray:
    """Scale to 0..100 by the maximum over the candidates (reversed: the most scores 0), as kube's NormalizeScore."""
    top = raw.max() if len(raw) else 0.0
    if top <= 0:
        return np.full(len(raw), 0.0 if not reverse else MAX_SCORE)
    scaled = raw * MAX_SCORE / top
    return MAX_SCORE - scaled if reverse else scaled


def taint_toleration(state: ClusterState, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
    """Fewer untolerated PreferNoSchedule taints score higher."""
    tols = pod.pod.tolerations
    per_node = np.zeros(len(state))
    for group, members in state.taint_groups.items():
        n = sum(
            1 for t in group if t.effect is TaintEffect.prefer_no_schedule and not any(tolerates(x, t) for x in tols)
        )
        if n:
            per_node[members] = n
    counts = per_node[nodes]
    return normalize(counts, reverse=True)


def node_affinity(state: ClusterState, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
    """Sum of the weights of matching preferred terms, normalised to 0..100."""
    aff = pod.pod.affinity
    if aff is None or not aff.preferred:
        return np.zeros(len(nodes))
    return normalize(preferred_raw(state, pod, nodes))


def preferred_raw(state: ClusterState, pod: PodInfo, nodes: np.ndarray, *, each: bool = False) -> np.ndarray:
    """Sum of the weights of the pod's preferred affinity terms each node matches. A term's matches over every node
    are kept for the next pod; `each` reads only `nodes`' labels instead (a few class members)."""
    aff = pod.pod.affinity
    raw = np.zeros(len(nodes))
    if aff is None:
        return raw
    for term in aff.preferred:
        if each:
            labels = [state.nodes[int(i)].node.labels for i in nodes]
            mask = np.fromiter(
                (all(requirement_matches(r, ls) for r in term.requirements) for ls in labels),
                dtype=bool,
                count=len(nodes),
            )
            raw += term.weight * mask
            continue
        key = ("preferred", term.requirements)
        full = state.cached_mask(key)
        if full is None:
            full = state.cache_mask(
                key,
                np.fromiter(
                    (all(requirement_matches(r, n.node.labels) for r in term.requirements) for n in state.nodes),
                    dtype=bool,
                    count=len(state),
                ),
            )
        raw += term.weight * full[nodes]
    return raw


def nvlink_fit(state: ClusterState, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
    """Multi-GPU pods prefer the node whose best NVLink domain they fill most tightly."""
    k = state.exclusive_gpus(pod)
    if k < 2:
        return np.zeros(len(nodes))
    free = state.best_free_domain[nodes].astype(np.float64)
    return np.where(free >= k, MAX_SCORE * k / np.maximum(free, 1), 0.0)


def wants_nics(state: ClusterState, pod: PodInfo) -> bool:
    """Whether the pod asks for whole GPUs and RDMA NICs: nodes are then scored by how well those would sit
    together (ClusterState.nic_fit), where some node's affinity is known."""
    return state.exclusive_gpus(pod) > 0 and nic_request(pod.requests)[0]


def leaf_affinity(state: ClusterState, nodes: np.ndarray, gang_groups: set[int]) -> np.ndarray:
    """Gang members prefer nodes under the leaf switches their gang already uses."""
    if not gang_groups:
        return np.zeros(len(nodes))
    groups = state.leaf_group[nodes]
    used = np.zeros(len(nodes), dtype=bool)
    for g in gang_groups:  # a gang spans a few groups: a comparison each beats np.isin's set-up
        used |= groups == g
    return np.where(used & (groups >= 0), MAX_SCORE, 0.0)


def fabric_fit(state: ClusterState, nodes: np.ndarray) -> np.ndarray:
    """Gang members prefer nodes whose rails go through healthy leaves with their uplinks whole: a collective
    runs at the pace of its slowest link."""
    return np.asarray(state.fabric_fit[nodes], dtype=np.float64)


def score(
    state: ClusterState,
    pod: PodInfo,
    nodes: np.ndarray,
    strategy: Strategy,
    weights: ScoreWeights,
    gang_groups: set[int] | None = None,
) -> np.ndarray:
    total = weights.resources_fit * resources_fit(state, pod, nodes, strategy, weights.resource_weights)
    if pod.pod.affinity is not None and pod.pod.affinity.preferred:
        total += weights.node_affinity * node_affinity(state, pod, nodes)
    if state.has_soft_taints:
        total += weights.taint_toleration * taint_toleration(state, pod, nodes)
    if state.exclusive_gpus(pod) >= 2:
        total += weights.topology * nvlink_fit(state, pod, nodes)
    if state.has_affinity and wants_nics(state, pod):
        total += weights.topology * state.nic_fit(pod, nodes)
    if gang_groups:
        total += weights.topology * leaf_affinity(state, nodes, gang_groups)
    if gang_groups is not None and state.has_fabric_health:  # a gang member (a single pod needs no fabric)
        total += weights.topology * fabric_fit(state, nodes)
    return total
