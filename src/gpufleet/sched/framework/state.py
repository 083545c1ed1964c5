"""What is free where: per-node resource arrays, free GPU indices and a journal to undo tentative placements."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpufleet.errors import InternalError, UserError
from gpufleet.fabric.topology import Topology, topology_from_fabric
from gpufleet.model import GPU_RESOURCE, Fabric, GpuSharing, Taint, TaintEffect
from gpufleet.model.affinity import HostAffinity
from gpufleet.sched.engine.classes import NodeClasses
from gpufleet.sched.framework.devices import node_vendor, requested_vendors, vendor_resources
from gpufleet.sched.framework.nics import FIT_SCORE, NicChoice, choose_aligned, nic_names, nic_request, pair_nics
from gpufleet.sched.framework.resources import accelerators
from gpufleet.sched.framework.snapshot import FabricHealth, NodeInfo, PodInfo
from gpufleet.sched.framework.topology import (
    CLIQUE_LABEL,
    choose_gpus,
    fabric_places,
    leaf_groups,
    max_free_in_domain,
    nvlink_domains,
)

NOT_READY_TAINT = Taint("node.kubernetes.io/not-ready", TaintEffect.no_schedule)
UNREACHABLE_TAINT = Taint("node.kubernetes.io/unreachable", TaintEffect.no_schedule)
# Nodes that share this label value sit under the same IB leaf switches (one rail group / scalable unit).
LEAF_GROUP_LABEL = "gpufleet.io/leaf-group"
# every vendor's whole-device resource has a column, so a pod asking for one is told which nodes lack it
BASE_RESOURCES = ("cpu", "memory", "pods", *vendor_resources())
# how much a gang member likes a node by the health of the leaves its rails go through (unknown counts as ok)
FABRIC_FIT = {"ok": 100.0, "degraded": 25.0, "down": 0.0}
# A label key whose values tell apart more than this share of the nodes (kubernetes.io/hostname) would leave one
# class per node: a pod selecting on it is decided node by node instead of splitting the classes by it.
UNIQUE_LABEL_SHARE = 0.5


@dataclass(slots=True)
class Assignment:
    pod: PodInfo
    node: int
    gpus: tuple[int, ...]
    idx: np.ndarray
    amounts: np.ndarray
    amount_of: dict[int, int]  # column -> amount, for cheap per-pod lookups
    nics: tuple[str, ...] = ()  # RDMA NICs taken for itself (exclusive NIC resources on a node with known affinity)
    alignment: NicChoice | None = None  # how its GPUs sit with their NICs, where the node's affinity is known


def effective_taints(info: NodeInfo) -> tuple[Taint, ...]:
    """The node's taints plus the ones the node lifecycle controller adds for a NotReady/Unknown node."""
    taints = list(info.node.taints)
    ready = info.node.condition("Ready")
    if ready is not None and ready.status != "True":
        extra = NOT_READY_TAINT if ready.status == "False" else UNREACHABLE_TAINT
        if all(t.key != extra.key for t in taints):
            taints.append(extra)
    return tuple(taints)


class ClusterState:
    """Mutable placement state over a fixed node list. Every change is journaled so it can be rolled back."""

    def __init__(
        self,
        nodes: list[NodeInfo],
        fabric: Fabric | None = None,
        fabric_health: FabricHealth | None = None,
        topology: Topology | None = None,
    ) -> None:
        self.nodes = nodes
        self.names = [n.node.name for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        names: list[str] = list(BASE_RESOURCES)
        for n in nodes:
            names.extend(k for k in n.allocatable if k not in names)
        self.resources = names
        self.res_index = {r: i for i, r in enumerate(names)}
        self.alloc = np.zeros((len(nodes), len(names)), dtype=np.int64)
        for i, n in enumerate(nodes):
            for k, v in n.allocatable.items():
                self.alloc[i, self.res_index[k]] = v
            if "pods" not in n.allocatable:
                self.alloc[i, self.res_index["pods"]] = 110
        # Column-major: filters and scores read one resource across all nodes at a time.
        self.alloc = np.asfortranarray(self.alloc)
        self.used = np.zeros_like(self.alloc, order="F")
        self.free_ = self.alloc.copy(order="F")
        with np.errstate(divide="ignore"):
            self.inv_alloc = np.asfortranarray(np.where(self.alloc > 0, 1.0 / np.maximum(self.alloc, 1), 0.0))
        self.unschedulable = np.array([n.node.unschedulable for n in nodes], dtype=bool)
        # whose accelerators each node carries (None: none), and the column of its whole-device resource (a
        # GPU-less node: NVIDIA's, which it has none of: scoring weighs it as an empty device column)
        self.vendors = [node_vendor(n.node, n.allocatable) for n in nodes]
        by_vendor = {v: r for r, v in vendor_resources().items()}
        self.node_gpu_col = np.array(
            [self.res_index[by_vendor.get(v or "", GPU_RESOURCE)] for v in self.vendors], dtype=np.int64
        )
        self.taints = [effective_taints(n) for n in nodes]
        self.taint_groups: dict[tuple[Taint, ...], np.ndarray] = {}
        for i, t in enumerate(self.taints):
            self.taint_groups.setdefault(t, np.zeros(len(nodes), dtype=bool))[i] = True
        self.has_soft_taints = any(t.effect is TaintEffect.prefer_no_schedule for ts in self.taints for t in ts)
        self.domains = [nvlink_domains(n.node) for n in nodes]
        self.gpu_free = [{g.index for g in n.node.gpus if g.schedulable} for n in nodes]
        # GPU<->NIC<->CPU affinity where the node's agent reported it: GPU choice for pods asking for RDMA NICs
        self.affinity = [n.affinity for n in nodes]
        self.has_affinity = any(a is not None for a in self.affinity)
        self.nic_free = [nic_names(a) if a is not None else set() for a in self.affinity]
        self.max_domain = np.array([max((len(d) for d in ds), default=0) for ds in self.domains], dtype=np.int64)
        self.best_free_domain = np.array(
            [max_free_in_domain(ds, free) for ds, free in zip(self.domains, self.gpu_free, strict=True)],
            dtype=np.int64,
        )
        if topology is None and fabric is not None and fabric.links:
            try:
                topology = topology_from_fabric(fabric)
            except UserError:  # a modelled fabric with no host cabled: nothing to place by
                topology = None
        self.topology = topology
        self.places = fabric_places(topology, self.names) if topology is not None else {}
        if self.places:
            self.leaves = {name: place.leaves for name, place in self.places.items()}
        else:  # no fabric map (a kubectl capture): a node label may name the leaf group
            self.leaves = {
                n.node.name: frozenset({n.node.labels[LEAF_GROUP_LABEL]})
                for n in nodes
                if n.node.labels.get(LEAF_GROUP_LABEL)
            }
        if fabric_health is not None:  # the discovered fabric knows best which leaves a node reaches
            for name in self.names:
                rails = fabric_health.rails.get(name)
                if rails:
                    self.leaves[name] = frozenset(rails.values())
        # Coarser groups a gang tries when no leaf group holds it (the nodes under one set of spines), and the
        # multi-node NVLink domains it tries first (an NVL72 rack: all-reduce over NVLink, not the network).
        self.spine_group, self.spine_groups = _group_index(
            self.names, {n: p.spines for n, p in self.places.items() if p.spines}
        )
        domains = {n: p.domain for n, p in self.places.items() if p.domain}
        for n in nodes:
            clique = n.node.labels.get(CLIQUE_LABEL)
            if clique and n.node.name not in domains:
                domains[n.node.name] = clique
        self.nvlink_domain_of = domains
        self.domain_group, self.domain_groups = _group_index(self.names, domains)
        self._fabric(fabric_health)
        groups = leaf_groups(self.leaves)
        self.leaf_group = np.full(len(nodes), -1, dtype=np.int64)
        self.group_names = list(groups)
        for g, members in enumerate(groups.values()):
            for name in members:
                self.leaf_group[self.index[name]] = g
        # Per leaf group: its nodes, what they have free per resource, and how many of them sit in each class, so
        # a gang's candidate groups are found without a pass over every node.
        in_group = self.leaf_group >= 0
        self.group_members = [np.flatnonzero(self.leaf_group == g) for g in range(len(self.group_names))]
        self.group_healthy = [m[~self.fabric_avoid[m]] for m in self.group_members]  # members a gang need not avoid
        self.group_free = np.zeros((len(self.group_names), len(names)), dtype=np.int64)
        np.add.at(self.group_free, self.leaf_group[in_group], self.free_[in_group])
        self._group_orders: dict[int, list[tuple[int, int]]] = {}  # column -> sorted (group's free, group)
        self.placed: dict[str, Assignment] = {}
        self.pods_on: list[dict[str, PodInfo]] = [{} for _ in nodes]
        self.gang_members: dict[str, set[str]] = {}
        # How many placed pods hold each per-pod amount of each resource, and each priority: cheap bounds for
        # preemption (the biggest single pod, the lowest priority present).
        self.amount_counts: dict[int, Counter[tuple[int, int]]] = {}  # column -> (amount, priority) -> pods
        self.priority_counts: Counter[int] = Counter()
        self._journal: list[tuple[str, Assignment]] = []
        self._mask_cache: dict[object, np.ndarray] = {}
        self.class_epoch = -1  # bumped whenever the classes are rebuilt: class ids of an older epoch mean nothing
        self._unique_labels: set[str] = set()
        self.base_signature = self._base_signatures()
        self._build_classes(())

    # --- classes of identical state ---------------------------------------------------------------------------

    def _base_signatures(self) -> list[int]:
        """Per node, an id of the static part of its class key: all of it but the labels pods select on."""
        base: dict[tuple[object, ...], int] = {}
        alloc = self.alloc.tolist()
        return [
            base.setdefault(
                (
                    tuple(alloc[i]),
                    bool(self.unschedulable[i]),
                    self.taints[i],
                    self.vendors[i],
                    int(self.node_gpu_col[i]),
                    int(self.max_domain[i]),
                    bool(self.fabric_avoid[i]),
                    _affinity_layout(self.affinity[i]),
                ),
                len(base),
            )
            for i in range(len(self.nodes))
        ]

    def _build_classes(self, label_keys: tuple[str, ...], old: NodeClasses | None = None) -> None:
        """Group nodes by everything the filters and scores of a lone pod read of them: a static signature (what
        the node offers, cordon, taints, vendor, NVLink layout, the values of the label keys pods have selected on
        so far, whether gangs keep off it) and the live state (free resources, largest free NVLink domain). Leaf
        group and fabric fit are not in it: only gang members and leaf-restricted choices read them, and those
        take the class scores and add the leaf and fabric terms node by node over their (restricted) nodes."""
        self.label_keys = label_keys
        static: dict[tuple[object, ...], int] = {}
        signature = []
        self.signature_avoided: list[bool] = []  # per signature: its nodes are ones a gang keeps off
        for i, n in enumerate(self.nodes):
            labels = n.node.labels
            sig = static.setdefault((self.base_signature[i], *(labels.get(k) for k in label_keys)), len(static))
            signature.append(sig)
            if len(self.signature_avoided) < len(static):
                self.signature_avoided.append(bool(self.fabric_avoid[i]))
        self.signature = np.array(signature, dtype=np.int64)
        self.classes = NodeClasses(np.arange(len(self.nodes), dtype=np.int64))  # tie key: node index
        self.class_epoch += 1
        self.group_classes: list[dict[int, int]] = [{} for _ in self.group_names]  # group -> class -> nodes
        if old is None:
            for i in range(len(self.nodes)):
                self._reclass(i)
            return
        # a split keeps each node's live state: only the signature in its key changes
        keys, node_class = old.keys, old.node_class.tolist()
        for i, sig in enumerate(signature):
            old_key = keys[node_class[i]]
            assert isinstance(old_key, tuple)
            self._move(i, (sig, *old_key[1:]))

    def _reclass(self, node: int) -> None:
        # The lowest priority on the node is no filter's or score's, but it lets preemption pass over classes of
        # nodes that hold nothing a pod may evict.
        pods = self.pods_on[node]
        lowest = min((p.pod.priority for p in pods.values()), default=None) if pods else None
        key: tuple[object, ...] = (
            int(self.signature[node]),
            tuple(self.free_[node].tolist()),
            int(self.best_free_domain[node]),
            lowest,
        )
        if self.affinity[node] is not None:  # which GPUs and NICs are free decides how well a NIC pod is aligned
            key = (*key, tuple(sorted(self.gpu_free[node])), tuple(sorted(self.nic_free[node])))
        self._move(node, key)

    def _move(self, node: int, key: tuple[object, ...]) -> None:
        old = int(self.classes.node_class[node])
        cls, _ = self.classes.move(node, key)
        g = int(self.leaf_group[node])
        if g >= 0 and cls != old:
            counts = self.group_classes[g]
            if old >= 0:
                if counts[old] == 1:
                    del counts[old]
                else:
                    counts[old] -= 1
            counts[cls] = counts.get(cls, 0) + 1

    def groups_by_free(self, col: int, at_least: int) -> tuple[list[tuple[int, int]], int]:
        """Every leaf group as (free, group), fewest of resource `col` free first, then group order (kept sorted as
        placements change, once asked for a column); and the position of the first with at least `at_least`."""
        order = self._group_orders.get(col)
        if order is None:
            order = self._group_orders[col] = sorted((int(f), g) for g, f in enumerate(self.group_free[:, col]))
        return order, bisect.bisect_left(order, (at_least, -1))

    def _group_change(self, node: int, idx: np.ndarray, delta: np.ndarray) -> None:
        g = int(self.leaf_group[node])
        if g < 0:
            return
        row = self.group_free[g]
        for col, d in zip(idx.tolist(), delta.tolist(), strict=True):
            order = self._group_orders.get(col)
            if order is not None:
                del order[bisect.bisect_left(order, (int(row[col]), g))]
                bisect.insort(order, (int(row[col]) + d, g))
            row[col] += d

    def class_avoided(self, cls: int) -> bool:
        """Whether the class's nodes are ones a gang keeps off while it can (a degraded or down leaf, a bad cable)."""
        key = self.classes.keys[cls]
        assert isinstance(key, tuple)
        return self.signature_avoided[key[0]]

    def class_lowest_priority(self, cls: int) -> int | None:
        """The lowest priority of a pod on the class's nodes (None: they hold no pods)."""
        key = self.classes.keys[cls]
        assert isinstance(key, tuple)
        lowest = key[3]
        assert lowest is None or isinstance(lowest, int)
        return lowest

    def classes_cover(self, keys: set[str]) -> bool:
        """Make the classes tell nodes apart by every label key in `keys` (splitting them by new keys); False when
        a key sets almost every node apart (a hostname): such a pod must be decided node by node."""
        missing = keys.difference(self.label_keys)
        if not missing:
            return True
        self.split_classes(missing)
        return not missing & self._unique_labels

    def split_classes(self, keys: set[str]) -> None:
        """Split the classes by every key in `keys` that does not set almost every node apart, in one rebuild."""
        missing = keys.difference(self.label_keys, self._unique_labels)
        for key in missing:
            values = {n.node.labels.get(key) for n in self.nodes}
            if len(values) > max(1, int(UNIQUE_LABEL_SHARE * len(self.nodes))):
                self._unique_labels.add(key)
        missing -= self._unique_labels
        if missing:
            self._build_classes(tuple(sorted({*self.label_keys, *missing})), self.classes)

    def _fabric(self, health: FabricHealth | None) -> None:
        """Per node: whether a gang should avoid it (a rail through a degraded or down leaf, or a bad cable of its
        own) and how much it is preferred (FABRIC_FIT times the uplink capacity left)."""
        self.fabric_avoid = np.zeros(len(self.names), dtype=bool)
        self.fabric_fit = np.full(len(self.names), FABRIC_FIT["ok"])
        self.fabric_reasons: dict[str, tuple[str, ...]] = {}
        self.has_fabric_health = False  # some node is less than fully fit: scoring then weighs it
        self.has_fabric_avoid = False  # some node is one a gang keeps off while it can
        if health is None:
            return
        for i, name in enumerate(self.names):
            state, capacity, reasons = health.node_state(name)
            self.fabric_avoid[i] = state != "ok"
            self.fabric_fit[i] = FABRIC_FIT[state] * max(0.0, min(capacity, 1.0))
            if reasons:
                self.fabric_reasons[name] = reasons
        self.has_fabric_health = bool((self.fabric_fit < FABRIC_FIT["ok"]).any())
        self.has_fabric_avoid = bool(self.fabric_avoid.any())

    def __len__(self) -> int:
        return len(self.names)

    def request_vector(self, pod: PodInfo) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Column indices and amounts of what the pod asks for, plus resource names no node offers at all."""
        idx, amounts, unknown = [self.res_index["pods"]], [1], []
        for name, value in pod.requests.items():
            col = self.res_index.get(name)
            if col is None:
                unknown.append(name)
            elif value:
                idx.append(col)
                amounts.append(value)
        return np.array(idx, dtype=np.int64), np.array(amounts, dtype=np.int64), unknown

    def gpu_column(self, pod: PodInfo) -> int:
        """The column of the accelerator the pod asks for most of (NVIDIA's whole GPUs when it asks for none)."""
        wanted = sorted(accelerators(pod.requests).items(), key=lambda kv: (-kv[1], kv[0]))
        for name, _ in wanted:
            if name in self.res_index:
                return self.res_index[name]
        return self.res_index[GPU_RESOURCE]

    @staticmethod
    def pod_vendors(pod: PodInfo) -> frozenset[str]:
        return requested_vendors(pod.requests)

    def free(self) -> np.ndarray:
        return self.free_

    @staticmethod
    def exclusive_gpus(pod: PodInfo) -> int:
        g = pod.pod.gpu
        return g.count if g.sharing is GpuSharing.exclusive else 0

    def nic_choice(self, pod: PodInfo, node: int, gpus: tuple[int, ...] | None = None) -> NicChoice | None:
        """The GPUs (or `gpus`, when already given) and RDMA NICs a pod asking for both gets on `node`, chosen by
        the node's affinity; None where the pod asks for no NIC or no whole GPU, or the affinity is not known."""
        affinity = self.affinity[node]
        if affinity is None:
            return None
        k = self.exclusive_gpus(pod)
        asks, exclusive = nic_request(pod.requests)
        if not asks or not k:
            return None
        if gpus is not None:
            return pair_nics(affinity, sorted(gpus), self.nic_free[node], exclusive) if gpus else None
        return choose_aligned(self.domains[node], self.gpu_free[node], k, affinity, self.nic_free[node], exclusive)

    def nic_fit(self, pod: PodInfo, nodes: np.ndarray) -> np.ndarray:
        """Per node, how well the pod's GPUs would sit with its NICs there (100: every GPU behind a PCIe switch with
        a NIC, 50: on a NUMA node with one, 0: crossing sockets, or the node's affinity is not known)."""
        out = np.zeros(len(nodes))
        for j, node in enumerate(nodes.tolist()):
            choice = self.nic_choice(pod, node)
            if choice is not None:
                out[j] = FIT_SCORE[choice.level]
        return out

    def cached_mask(self, key: object) -> np.ndarray | None:
        return self._mask_cache.get(key)

    def cache_mask(self, key: object, mask: np.ndarray) -> np.ndarray:
        self._mask_cache[key] = mask
        return mask

    # --- changes -------------------------------------------------------------------------------------------

    def assign(self, pod: PodInfo, node: int, gpus: tuple[int, ...] | None = None) -> Assignment:
        if pod.key in self.placed:
            raise InternalError(f"pod {pod.key} is already placed on {self.names[self.placed[pod.key].node]}")
        idx, amounts, _ = self.request_vector(pod)
        k = self.exclusive_gpus(pod)
        # the node's affinity, where known, picks GPUs and NICs together for a pod asking for both
        choice = self.nic_choice(pod, node, gpus) if self.affinity[node] is not None else None
        if gpus is None:
            gpus = ()
            if choice is not None:
                gpus = choice.gpus
            elif k and self.nodes[node].node.gpus:
                gpus = choose_gpus(self.domains[node], self.gpu_free[node], k) or ()
        a = Assignment(pod, node, gpus, idx, amounts, {int(c): int(v) for c, v in zip(idx, amounts, strict=True)})
        if choice is not None:
            a.alignment = choice
            a.nics = choice.nics if choice.exclusive else ()
        self._apply(a)
        self._journal.append(("assign", a))
        return a

    def release(self, key: str) -> Assignment:
        a = self.placed[key]
        self._unapply(a)
        self._journal.append(("release", a))
        return a

    def _apply(self, a: Assignment) -> None:
        self.used[a.node, a.idx] += a.amounts
        self.free_[a.node, a.idx] -= a.amounts
        self._group_change(a.node, a.idx, -a.amounts)
        self.placed[a.pod.key] = a
        self.pods_on[a.node][a.pod.key] = a.pod
        if a.pod.pod.gang:
            self.gang_members.setdefault(a.pod.pod.gang, set()).add(a.pod.key)
        for col, amount in a.amount_of.items():
            self.amount_counts.setdefault(col, Counter())[(amount, a.pod.pod.priority)] += 1
        self.priority_counts[a.pod.pod.priority] += 1
        if a.gpus:
            self.gpu_free[a.node] -= set(a.gpus)
            self.best_free_domain[a.node] = max_free_in_domain(self.domains[a.node], self.gpu_free[a.node])
        self.nic_free[a.node] -= set(a.nics)
        self._reclass(a.node)

    def _unapply(self, a: Assignment) -> None:
        self.used[a.node, a.idx] -= a.amounts
        self.free_[a.node, a.idx] += a.amounts
        self._group_change(a.node, a.idx, a.amounts)
        del self.placed[a.pod.key]
        del self.pods_on[a.node][a.pod.key]
        if a.pod.pod.gang:
            self.gang_members[a.pod.pod.gang].discard(a.pod.key)
        for col, amount in a.amount_of.items():
            self.amount_counts[col][(amount, a.pod.pod.priority)] -= 1
        self.priority_counts[a.pod.pod.priority] -= 1
        if a.gpus:
            healthy = {g.index for g in self.nodes[a.node].node.gpus if g.schedulable}
            self.gpu_free[a.node] |= set(a.gpus) & healthy
            self.best_free_domain[a.node] = max_free_in_domain(self.domains[a.node], self.gpu_free[a.node])
        self.nic_free[a.node] |= set(a.nics)
        self._reclass(a.node)

    def largest_amount(self, col: int, below_priority: int | None = None) -> int:
        """The most of resource `col` any one placed pod holds (only pods below `below_priority`, if given)."""
        return max(
            (
                amount
                for (amount, prio), n in self.amount_counts.get(col, Counter()).items()
                if n > 0 and (below_priority is None or prio < below_priority)
            ),
            default=0,
        )

    def lowest_priority(self) -> int | None:
        return min((p for p, n in self.priority_counts.items() if n > 0), default=None)

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Undo every assign/release after `mark`, newest first."""
        while len(self._journal) > mark:
            op, a = self._journal.pop()
            if op == "assign":
                self._unapply(a)
            else:
                self._apply(a)

    def commit(self) -> None:
        """Forget the journal: what is placed now stays."""
        self._journal.clear()


def _affinity_layout(affinity: HostAffinity | None) -> tuple[object, ...] | None:
    """What of a node's affinity GPU and NIC choice reads: each GPU's NUMA node and PCIe link to each NIC, each
    NIC's NUMA node (not where it was read, nor the CPU lists)."""
    if affinity is None:
        return None
    gpus = tuple((g.index, g.numa_node, tuple(sorted(g.nic_links.items()))) for g in affinity.gpus)
    return gpus, tuple((n.name, n.numa_node) for n in affinity.nics)


def _group_index(names: list[str], key: Mapping[str, object]) -> tuple[np.ndarray, int]:
    """Per node, the number of its group by `key` (-1: in none), groups numbered in order of first node; and how
    many groups there are."""
    numbers: dict[object, int] = {}
    out = np.full(len(names), -1, dtype=np.int64)
    for i, name in enumerate(names):
        k = key.get(name)
        if k is not None:
            out[i] = numbers.setdefault(k, len(numbers))
    return out, len(numbers)
