"""Array-backed cluster state for fast placement and trace replay.

One row per node: free CPU (milli), free memory (MiB), free share of each GPU (milli, ``0`` in the padding
columns of nodes with fewer GPUs than the widest node), and the node's GPU model. Every placement bumps the
node's ``version`` so that scorers can cache per-node results and recompute only the nodes that changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.openb import MILLI, NodeList, PodList, model_resource

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# GPU-affinity tags counted per node (the GPU-clustering policy reads them): column 0 = sharing pods,
# column k = pods that take k whole GPUs.
SHARE_TAG = 0
MAX_TAG = 8


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks for. ``gpu_milli`` is per GPU; ``gpu_spec`` is ``""`` or models joined by ``|``;
    ``gpu_resource`` the vendor resource its GPUs must be (``""``: any vendor)."""

    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: str = ""
    name: str = ""
    gpu_resource: str = ""

    @property
    def is_sharing(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def type_key(self) -> tuple[int, int, int, str, str]:
        """Pods with the same key score alike under every policy (memory only filters)."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpu, self.gpu_spec, self.gpu_resource)

    @property
    def affinity_tag(self) -> int:
        """-1 for CPU-only pods, SHARE_TAG for sharing pods, else the number of whole GPUs."""
        if self.num_gpu == 0:
            return -1
        return SHARE_TAG if self.is_sharing else min(self.num_gpu, MAX_TAG)


def pod_requests(pods: PodList) -> list[PodRequest]:
    resources = pods.gpu_resource if pods.gpu_resource else ("",) * len(pods)
    return [
        PodRequest(cpu, mem, n, milli, spec, name, resource)
        for cpu, mem, n, milli, spec, name, resource in zip(
            pods.cpu_milli.tolist(),
            pods.memory_mib.tolist(),
            pods.num_gpu.tolist(),
            pods.gpu_milli.tolist(),
            pods.gpu_spec,
            pods.names,
            resources,
            strict=True,
        )
    ]


def spec_allows(spec: str, model: str, resource: str = "") -> bool:
    """Whether a pod's ``gpu_spec`` accepts a node's GPU model (an empty spec accepts any) and the model's vendor
    resource is the one the pod names (if it names one)."""
    wanted = [s for s in spec.split("|") if s]
    return (not wanted or model in wanted) and (not resource or model_resource(model) == resource)


@cache
def models_allowed(models: tuple[str, ...], spec: str, resource: str = "") -> BoolArray:
    """Per model: does it satisfy the spec and the vendor resource ("" models are GPU-less nodes)."""
    return np.array([bool(m) and spec_allows(spec, m, resource) for m in models], dtype=bool)


@dataclass
class ReplayPlacement:
    node: int
    gpus: tuple[int, ...] = ()


class NodeStates:
    """Rows of node states, each with free CPU, memory and GPU shares, a GPU model, a use count and affinity
    tags: every node of a cluster (:class:`ReplayCluster`) or one row per class of identical nodes
    (:class:`ClassStates`). Policies score rows, so one formula serves both."""

    models: tuple[str, ...]  # distinct GPU models; model_idx points into it ("" for GPU-less nodes)
    model_idx: IntArray
    num_gpu: IntArray
    cpu_free: IntArray
    mem_free: IntArray
    gpu_free: IntArray  # (rows, max GPUs per node), milli; 0 in the padding columns
    version: IntArray  # bumped by every change of the node (classes: 1 for used nodes, else 0)
    affinity: IntArray  # (rows, MAX_TAG + 1) count of GPU pods per affinity tag
    _access: dict[tuple[str, str], BoolArray]

    def __len__(self) -> int:
        return len(self.cpu_free)

    def used(self) -> BoolArray:
        """Per row: does the node run pods."""
        return self.version > 0

    def used_at(self, row: int) -> bool:
        return bool(self.version[row] > 0)

    def gpu_left(self) -> IntArray:
        return self.gpu_free.sum(axis=1)

    def fully_free(self) -> IntArray:
        return (self.gpu_free == MILLI).sum(axis=1)

    def access(self, spec: str, resource: str = "") -> BoolArray:
        """Per row: does the GPU model satisfy the spec and the vendor resource (cached per pair)."""
        mask = self._access.get((spec, resource))
        if mask is None:
            ok = models_allowed(self.models, spec, resource)
            mask = ok[self.model_idx] if len(ok) else np.zeros(len(self), dtype=bool)
            self._access[(spec, resource)] = mask
        return mask

    def feasible(self, pod: PodRequest) -> BoolArray:
        """Rows passing every filter: CPU, memory, vendor, GPU model, enough GPUs with the per-GPU share free."""
        ok = (self.cpu_free >= pod.cpu_milli) & (self.mem_free >= pod.memory_mib)
        if pod.num_gpu > 0:
            ok &= self.access(pod.gpu_spec, pod.gpu_resource)
            ok &= (self.gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu
        return ok


@dataclass
class ClassStates(NodeStates):
    """One row per class of identical nodes (``version`` is 1 for a class of used nodes, else 0)."""

    models: tuple[str, ...]
    model_idx: IntArray
    num_gpu: IntArray
    cpu_free: IntArray
    mem_free: IntArray
    gpu_free: IntArray
    version: IntArray
    affinity: IntArray
    _access: dict[tuple[str, str], BoolArray] = field(default_factory=dict)


class ClassStore(Protocol):
    """The placement engine's per-class arrays (indexed by class id) and the rows of chosen classes."""

    models: tuple[str, ...]
    cpu_free: IntArray
    mem_free: IntArray
    gpu_free: IntArray
    model_idx: IntArray

    def rows(self, ids: IntArray) -> ClassStates: ...


@dataclass
class ReplayCluster(NodeStates):
    """Mutable free-resource arrays of a cluster."""

    names: tuple[str, ...]
    models: tuple[str, ...]
    model_idx: IntArray
    cpu_cap: IntArray
    mem_cap: IntArray
    num_gpu: IntArray
    cpu_free: IntArray
    mem_free: IntArray
    gpu_free: IntArray
    gpu_exists: BoolArray
    version: IntArray
    affinity: IntArray
    name_rank: IntArray  # tie priority (ties go to the lowest); name order unless a replay sets it
    _access: dict[tuple[str, str], BoolArray] = field(default_factory=dict)
    listeners: list[Callable[[int], None]] = field(default_factory=list)
    # pods on each node (not given: one on every node with a version, as a cluster built mid-replay); a gang that
    # does not fit whole is taken back off, so a node's version alone no longer says whether it runs pods
    pods: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if len(self.pods) != len(self.version):
            self.pods = (self.version > 0).astype(np.int64)

    def used(self) -> BoolArray:
        return self.pods > 0

    def used_at(self, row: int) -> bool:
        return bool(self.pods[row] > 0)

    @classmethod
    def from_nodes(cls, nodes: NodeList) -> ReplayCluster:
        n = len(nodes)
        width = max(1, int(nodes.num_gpu.max()) if n else 1)
        models = tuple(sorted(set(nodes.model)))
        model_idx = np.array([models.index(m) for m in nodes.model], dtype=np.int64)
        exists = np.arange(width)[None, :] < nodes.num_gpu[:, None]
        return cls(
            names=nodes.names,
            models=models,
            model_idx=model_idx,
            cpu_cap=nodes.cpu_milli.copy(),
            mem_cap=nodes.memory_mib.copy(),
            num_gpu=nodes.num_gpu.copy(),
            cpu_free=nodes.cpu_milli.copy(),
            mem_free=nodes.memory_mib.copy(),
            gpu_free=np.where(exists, MILLI, 0).astype(np.int64),
            gpu_exists=exists,
            version=np.zeros(n, dtype=np.int64),
            affinity=np.zeros((n, MAX_TAG + 1), dtype=np.int64),
            name_rank=np.argsort(np.argsort(np.array(nodes.names, dtype=object), kind="stable"), kind="stable"),
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.num_gpu.sum()) * MILLI

    @property
    def free_gpu_milli(self) -> int:
        return int(self.gpu_free.sum())

    def node_row(self, node: int) -> ClassStates:
        """One node's state as a row of its own (for scoring a single node like a class)."""
        one = slice(node, node + 1)
        return ClassStates(
            models=self.models,
            model_idx=self.model_idx[one],
            num_gpu=self.num_gpu[one],
            cpu_free=self.cpu_free[one],
            mem_free=self.mem_free[one],
            gpu_free=self.gpu_free[one],
            version=self.version[one],
            affinity=self.affinity[one],
        )

    def node_resources(self) -> list[str]:
        """Each node's whole-device resource ("" for GPU-less nodes)."""
        per_model = [model_resource(m) if m else "" for m in self.models]
        return [per_model[i] for i in self.model_idx] if per_model else [""] * len(self)

    def rejections(self, pod: PodRequest) -> dict[str, int]:
        """How many nodes each filter rejects (a node counts under the first filter it fails)."""
        out: dict[str, int] = {}
        left = np.ones(len(self), dtype=bool)
        checks: list[tuple[str, BoolArray]] = [
            ("Insufficient cpu", self.cpu_free >= pod.cpu_milli),
            ("Insufficient memory", self.mem_free >= pod.memory_mib),
        ]
        if pod.num_gpu > 0:
            if pod.gpu_resource:
                # one reason per other vendor, naming both: "2 node(s) had nvidia.com/gpu, not amd.com/gpu"
                have = np.array(self.node_resources(), dtype=object)
                for other in sorted({r for r in have if r and r != pod.gpu_resource}):
                    checks.append((f"node(s) had {other}, not {pod.gpu_resource}", have != other))
                checks.append((f"node(s) had no {pod.gpu_resource}", self.access("", pod.gpu_resource)))
            checks.append(("GPU model not in gpu_spec", self.access(pod.gpu_spec)))
            checks.append(
                (
                    f"fewer than {pod.num_gpu} GPU(s) with {pod.gpu_milli}m free",
                    (self.gpu_free >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu,
                )
            )
        for reason, passed in checks:
            failed = left & ~passed
            if failed.any():
                out[reason] = int(failed.sum())
            left &= passed
        return out

    def unschedulable_message(self, pod: PodRequest) -> str:
        """kube-scheduler style: '0/3 nodes are available: 2 Insufficient cpu, 1 Insufficient memory.'"""
        reasons = self.rejections(pod)
        feasible = len(self) - sum(reasons.values())
        ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
        detail = ", ".join(f"{count} {reason}" for reason, count in ranked)
        return f"{feasible}/{len(self)} nodes are available" + (f": {detail}." if detail else ".")

    def place(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        i = placement.node
        if len(placement.gpus) != pod.num_gpu:
            raise ValueError(f"pod {pod.name} needs {pod.num_gpu} GPU ids, got {placement.gpus}")
        self.cpu_free[i] -= pod.cpu_milli
        self.mem_free[i] -= pod.memory_mib
        for g in placement.gpus:
            self.gpu_free[i, g] -= pod.gpu_milli
        if self.cpu_free[i] < 0 or self.mem_free[i] < 0 or (self.gpu_free[i] < 0).any():
            raise ValueError(f"pod {pod.name} over-commits node {self.names[i]}")
        tag = pod.affinity_tag
        if tag >= 0:
            self.affinity[i, tag] += 1
        self.version[i] += 1
        self.pods[i] += 1
        for listener in self.listeners:
            listener(i)

    def unplace(self, pod: PodRequest, placement: ReplayPlacement) -> None:
        """Take a placed pod back off its node (a gang that did not fit whole). The node's version still moves on:
        scorers that cache by version must not take the restored state for a later one."""
        i = placement.node
        self.cpu_free[i] += pod.cpu_milli
        self.mem_free[i] += pod.memory_mib
        for g in placement.gpus:
            self.gpu_free[i, g] += pod.gpu_milli
        tag = pod.affinity_tag
        if tag >= 0:
            self.affinity[i, tag] -= 1
        self.version[i] += 1
        self.pods[i] -= 1
        for listener in self.listeners:
            listener(i)

    # GPU choice inside a node -------------------------------------------------------------------------

    def exclusive_gpus(self, node: int, count: int) -> tuple[int, ...]:
        """The lowest-indexed fully free GPUs (how the reference simulator hands out whole GPUs)."""
        free = np.flatnonzero(self.gpu_free[node] == MILLI)
        return tuple(int(g) for g in free[:count])

    def tightest_gpu(self, node: int, milli: int) -> int:
        """The GPU with the least free share that still fits ``milli`` (lowest index on ties)."""
        row = self.gpu_free[node]
        masked = np.where(row >= milli, row, np.iinfo(np.int64).max)
        return int(np.argmin(masked))

    def best_fit_gpus(self, node: int, pod: PodRequest) -> tuple[int, ...]:
        if pod.num_gpu == 0:
            return ()
        if pod.gpu_milli < MILLI:
            return (self.tightest_gpu(node, pod.gpu_milli),)
        return self.exclusive_gpus(node, pod.num_gpu)
