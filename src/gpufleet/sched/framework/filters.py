"""Filter plugins, in kube-scheduler's order, vectorised over nodes, and the FailedScheduling message.

Each filter yields a boolean mask over the state's nodes. Masks that depend only on the pod's tolerations or node
selection are cached per distinct value, so a stream of similar pods costs a few numpy operations each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from gpufleet.model import NodeAffinity, SelectorRequirement, Taint, TaintEffect, Toleration
from gpufleet.sched.framework.devices import vendor_label
from gpufleet.sched.framework.resources import accelerators
from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.state import ClusterState

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"


def reason_taint(t: Taint) -> str:
    return f"node(s) had untolerated taint {{{t.key}: {t.value}}}"


def reason_insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


def reason_vendor(node_vendor: str, wanted: frozenset[str], resources: Iterable[str]) -> str:
    """`node(s) had NVIDIA accelerators, not the AMD accelerators the pod requests (amd.com/gpu)`."""
    asked = " and ".join(vendor_label(v) for v in sorted(wanted))
    return f"node(s) had {vendor_label(node_vendor)}, not the {asked} the pod requests ({', '.join(sorted(resources))})"


def reason_nvlink(count: int) -> str:
    return f"node(s) had no NVLink domain with {count} free GPUs"


# --- taints and tolerations ----------------------------------------------------------------------------------


def tolerates(tol: Toleration, taint: Taint) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    if tol.effect is not None and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True
    if not tol.key and tol.operator != "Exists":
        return False
    return tol.value == taint.value


def first_untolerated(
    taints: Iterable[Taint], tolerations: Iterable[Toleration], effects: tuple[TaintEffect, ...]
) -> Taint | None:
    tols = tuple(tolerations)
    for taint in taints:
        if taint.effect in effects and not any(tolerates(t, taint) for t in tols):
            return taint
    return None


HARD_EFFECTS = (TaintEffect.no_schedule, TaintEffect.no_execute)


def taint_reasons(state: ClusterState, pod: PodInfo) -> dict[tuple[Taint, ...], Taint | None]:
    return {group: first_untolerated(group, pod.pod.tolerations, HARD_EFFECTS) for group in state.taint_groups}


def taint_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    key = ("taint", pod.pod.tolerations)
    mask = state.cached_mask(key)
    if mask is None:
        mask = np.ones(len(state), dtype=bool)
        for group, bad in taint_reasons(state, pod).items():
            if bad is not None:
                mask &= ~state.taint_groups[group]
        mask = state.cache_mask(key, mask)
    return mask


def unschedulable_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    cordon = Taint(UNSCHEDULABLE_TAINT_KEY, TaintEffect.no_schedule)
    if any(tolerates(t, cordon) for t in pod.pod.tolerations):
        return np.ones(len(state), dtype=bool)
    return ~state.unschedulable


# --- node selector and affinity ------------------------------------------------------------------------------


def requirement_matches(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    op = req.operator
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    try:
        have, want = int(labels[req.key]), int(req.values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def term_matches(term: tuple[SelectorRequirement, ...], labels: Mapping[str, str]) -> bool:
    # An empty nodeSelectorTerm matches no node (as in Kubernetes).
    return bool(term) and all(requirement_matches(r, labels) for r in term)


def node_selection_matches(
    selector: Mapping[str, str], affinity: NodeAffinity | None, labels: Mapping[str, str]
) -> bool:
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    if affinity is not None and affinity.required:
        return any(term_matches(t, labels) for t in affinity.required)
    return True


def affinity_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    selector = tuple(sorted(pod.pod.node_selector.items()))
    required = pod.pod.affinity.required if pod.pod.affinity else ()
    if not selector and not required:
        return np.ones(len(state), dtype=bool)
    key = ("affinity", selector, required)
    mask = state.cached_mask(key)
    if mask is None:
        sel = dict(selector)
        aff = NodeAffinity(required=required)
        mask = np.fromiter(
            (node_selection_matches(sel, aff, n.node.labels) for n in state.nodes), dtype=bool, count=len(state)
        )
        mask = state.cache_mask(key, mask)
    return mask


# --- accelerator vendor -----------------------------------------------------------------------------------------


def vendor_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    """A pod asking for one vendor's accelerators only goes to nodes of that vendor (or to nodes with none, which the
    resource filter then turns down); one asking for several vendors' fits no accelerator node."""
    wanted = state.pod_vendors(pod)
    if not wanted:
        return np.ones(len(state), dtype=bool)
    key = ("vendor", wanted)
    mask = state.cached_mask(key)
    if mask is None:
        ok = [v is None or wanted == {v} for v in state.vendors]
        mask = state.cache_mask(key, np.array(ok, dtype=bool))
    return mask


def static_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes no eviction could open to the pod: cordoned, untolerated taints, node selection, vendor. Kept per
    distinct (tolerations, node selection, resource names): none of it changes while the state lives."""
    required = pod.pod.affinity.required if pod.pod.affinity else ()
    asked = tuple(sorted(k for k, v in pod.requests.items() if v))
    key = ("static", pod.pod.tolerations, tuple(sorted(pod.pod.node_selector.items())), required, asked)
    mask = state.cached_mask(key)
    if mask is None:
        mask = state.cache_mask(
            key,
            unschedulable_mask(state, pod)
            & taint_mask(state, pod)
            & affinity_mask(state, pod)
            & vendor_mask(state, pod),
        )
    return mask


# --- resources and NVLink ------------------------------------------------------------------------------------


def resource_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    idx, amounts, unknown = state.request_vector(pod)
    if unknown:
        return np.zeros(len(state), dtype=bool)
    free = state.free_
    fits = free[:, idx[0]] >= amounts[0]
    for col, amount in zip(idx[1:], amounts[1:], strict=True):
        fits &= free[:, col] >= amount
    return np.asarray(fits, dtype=bool)


def nvlink_mask(state: ClusterState, pod: PodInfo) -> np.ndarray:
    k = state.exclusive_gpus(pod)
    if k < 2:
        return np.ones(len(state), dtype=bool)
    return (state.max_domain < k) | (state.best_free_domain >= k)


def fits_node(state: ClusterState, pod: PodInfo, node: int) -> bool:
    """Resource and NVLink fit on one node (its static filters already passed)."""
    idx, amounts, unknown = state.request_vector(pod)
    if unknown or bool((state.free_[node, idx] < amounts).any()):
        return False
    k = state.exclusive_gpus(pod)
    return k < 2 or state.max_domain[node] < k or state.best_free_domain[node] >= k


def feasible(state: ClusterState, pod: PodInfo) -> np.ndarray:
    """Nodes that pass every filter."""
    return static_mask(state, pod) & resource_mask(state, pod) & nvlink_mask(state, pod)


def feasible_on(state: ClusterState, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
    """`feasible(state, pod)[nodes]`, reading only those nodes' live state."""
    ok = static_mask(state, pod)[nodes]
    idx, amounts, unknown = state.request_vector(pod)
    if unknown:
        return np.zeros(len(nodes), dtype=bool)
    ok &= (state.free_[np.ix_(nodes, idx)] >= amounts).all(axis=1)
    k = state.exclusive_gpus(pod)
    if k >= 2:
        ok &= (state.max_domain[nodes] < k) | (state.best_free_domain[nodes] >= k)
    return ok


# --- explanation ---------------------------------------------------------------------------------------------


def node_reasons(state: ClusterState, pod: PodInfo, nodes: np.ndarray | None = None) -> list[list[str]]:
    """Why each node (each of `nodes`, when given) rejects the pod: the first failing plugin's reasons, as
    kube-scheduler records them."""
    which = np.arange(len(state)) if nodes is None else np.asarray(nodes, dtype=np.int64)
    reasons: list[list[str]] = [[] for _ in range(len(which))]
    cordon_ok = unschedulable_mask(state, pod)
    bad_taint = taint_reasons(state, pod)
    aff = affinity_mask(state, pod)
    vendor = vendor_mask(state, pod)
    wanted = state.pod_vendors(pod)
    asked = accelerators(pod.requests)
    idx, amounts, unknown = state.request_vector(pod)
    free = state.alloc[np.ix_(which, idx)] - state.used[np.ix_(which, idx)]
    short = free < amounts
    k = state.exclusive_gpus(pod)
    nv = (
        np.ones(len(which), dtype=bool)
        if k < 2
        else (state.max_domain[which] < k) | (state.best_free_domain[which] >= k)
    )
    for j, i in enumerate(which.tolist()):
        out = reasons[j]
        if not cordon_ok[i]:
            out.append(REASON_UNSCHEDULABLE)
            continue
        taint = bad_taint[state.taints[i]]
        if taint is not None:
            out.append(reason_taint(taint))
            continue
        if not aff[i]:
            out.append(REASON_AFFINITY)
            continue
        node_vendor = state.vendors[i]
        if not vendor[i] and node_vendor is not None:
            out.append(reason_vendor(node_vendor, wanted, asked))
            continue
        res = [
            REASON_TOO_MANY_PODS if state.resources[c] == "pods" else reason_insufficient(state.resources[c])
            for c, s in zip(idx, short[j], strict=True)
            if s
        ]
        res += [reason_insufficient(u) for u in unknown]
        if res:
            out.extend(res)
            continue
        if not nv[j]:
            out.append(reason_nvlink(k))
    return reasons


def reason_counts(reasons: Iterable[list[str]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for rs in reasons:
        counts.update(rs)
    return counts


def failed_scheduling_message(total: int, counts: Mapping[str, int], preemption: str | None = None) -> str:
    """`0/32 nodes are available: 3 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {k: v}.`"""
    parts = sorted(f"{n} {reason}" for reason, n in counts.items() if n)
    msg = f"0/{total} nodes are available: {', '.join(parts)}."
    if preemption:
        msg += f" preemption: {preemption}"
    return msg


def preemption_message(total: int, helpful: int) -> str:
    """The second half kube-scheduler appends after a failed preemption attempt."""
    parts = []
    if total - helpful:
        parts.append(f"{total - helpful} Preemption is not helpful for scheduling")
    if helpful:
        parts.append(f"{helpful} No preemption victims found for incoming pod")
    return f"0/{total} nodes are available: {', '.join(sorted(parts))}."
