"""GPU fragmentation as the FGD paper defines it (Weng et al., USENIX ATC '23).

A node's fragmentation is the expected amount of its free GPU share that a *typical pod*, drawn from the
workload's pod-type distribution, could not use:

- a typical pod the node can host (enough CPU, a GPU model and vendor the pod accepts, enough GPUs with the pod's
  per-GPU share free) wastes only the GPUs whose free share is below the pod's per-GPU request;
- a typical pod the node cannot host (lacks CPU, lacks GPU share, wrong model) or that needs no GPU at all
  sees every free GPU share on the node as fragment.

So ``frag(node) = sum_t p_t * f_t(node)``, and because the ``p_t`` sum to 1 this is
``free_total - sum_t p_t * [node hosts t] * (free share on GPUs with at least m_t free)``.
The typical pods are the most frequent pod types, added in order of popularity until they cover the
popularity threshold (95%) of all pods, with their frequencies renormalised to sum to 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.openb import PodList
from gpufleet.sched.replay.state import ReplayCluster, spec_allows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_POPULARITY_THRESHOLD = 95.0


@dataclass(frozen=True)
class TypicalPods:
    """Pod types (CPU milli, per-GPU milli, GPU count, GPU spec, vendor resource) with their normalised frequency."""

    cpu_milli: IntArray
    gpu_milli: IntArray
    num_gpu: IntArray
    gpu_spec: tuple[str, ...]
    weight: FloatArray
    memory_mib: IntArray | None = None  # set when pod types are told apart by memory too
    gpu_resource: tuple[str, ...] = ()  # per type; empty: no type names a vendor resource

    def resource(self, i: int) -> str:
        return self.gpu_resource[i] if self.gpu_resource else ""

    def __len__(self) -> int:
        return len(self.weight)

    @classmethod
    def from_pods(
        cls, pods: PodList, threshold_pct: float = DEFAULT_POPULARITY_THRESHOLD, *, with_memory: bool = False
    ) -> TypicalPods:
        """The most popular pod types covering ``threshold_pct`` % of pods. ``with_memory`` also tells
        types apart by memory request (the reference ignores memory)."""
        counts = Counter(
            (
                int(pods.cpu_milli[i]),
                int(pods.gpu_milli[i]),
                int(pods.num_gpu[i]),
                pods.gpu_spec[i],
                int(pods.memory_mib[i]) if with_memory else 0,
                pods.resource(i),
            )
            for i in range(len(pods))
        )
        total = float(len(pods))
        # most frequent first; equal counts in descending (cpu, milli, count, spec) order, like the reference
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        target = threshold_pct * total / 100.0
        chosen: list[tuple[tuple[int, int, int, str, int, str], int]] = []
        cum = 0.0
        for key, count in ranked:
            if cum >= target:
                break
            chosen.append((key, count))
            cum += count
        return cls(
            cpu_milli=np.array([k[0] for k, _ in chosen], dtype=np.int64),
            gpu_milli=np.array([k[1] for k, _ in chosen], dtype=np.int64),
            num_gpu=np.array([k[2] for k, _ in chosen], dtype=np.int64),
            gpu_spec=tuple(k[3] for k, _ in chosen),
            weight=np.array([c / cum for _, c in chosen], dtype=np.float64),
            memory_mib=np.array([k[4] for k, _ in chosen], dtype=np.int64) if with_memory else None,
            gpu_resource=tuple(k[5] for k, _ in chosen) if pods.gpu_resource else (),
        )


def _allows(key: str, model: str) -> bool:
    spec, _, resource = key.partition("\0")
    return spec_allows(spec, model, resource)


class FragModel:
    """Vectorised fragmentation of many node states against one typical-pod distribution.

    GPU typical pods are grouped by (per-GPU share, GPU count, spec). Within a group, the weight of the
    pods a node can host depends on its free CPU and memory only through "at least c_t" tests, so it is
    read from a 2-D cumulative table indexed by how many CPU and memory thresholds the node clears. That
    turns a (states x typical pods) comparison into a (states x groups) lookup.
    """

    def __init__(self, typical: TypicalPods, models: tuple[str, ...]) -> None:
        self.typical = typical
        # 1 for a normalised distribution; kept general so hand-built weights work too
        self._weight_sum = float(typical.weight.sum())
        gpu = typical.num_gpu > 0
        cpu = typical.cpu_milli[gpu]
        mem = typical.memory_mib[gpu] if typical.memory_mib is not None else np.zeros(len(cpu), dtype=np.int64)
        self._uses_memory = typical.memory_mib is not None
        weight = typical.weight[gpu]
        milli = typical.gpu_milli[gpu]
        self._mvals, midx = np.unique(milli, return_inverse=True)
        # a type's access key: its model spec and vendor resource ("\0" never appears in either)
        specs = [f"{s}\0{typical.resource(i)}" for i, (s, g) in enumerate(zip(typical.gpu_spec, gpu, strict=True)) if g]
        spec_names, spec_idx = np.unique(np.array(specs, dtype=object), return_inverse=True)
        keys = np.stack([midx, typical.num_gpu[gpu], spec_idx], axis=1) if len(cpu) else np.zeros((0, 3), int)
        groups, group_of = np.unique(keys, axis=0, return_inverse=True)
        group_of = np.asarray(group_of).reshape(-1)
        self._group_m = groups[:, 0]
        self._group_n = groups[:, 1]
        # access[model, group]: a GPU-less node ("" model) hosts no GPU pod
        self._access = np.array(
            [[bool(m) and _allows(str(spec_names[g[2]]), m) for g in groups] for m in models],
            dtype=np.float64,
        ).reshape(len(models), len(groups))
        self._cpu_steps = np.unique(cpu)
        self._mem_steps = np.unique(mem)
        table = np.zeros((len(groups), len(self._cpu_steps) + 1, len(self._mem_steps) + 1))
        ci = np.searchsorted(self._cpu_steps, cpu)
        mi = np.searchsorted(self._mem_steps, mem)
        np.add.at(table, (group_of, ci + 1, mi + 1), weight)
        # table[g, i, j]: weight of group g's pods needing at most the i-th CPU and j-th memory step
        self._table = table.cumsum(axis=1).cumsum(axis=2)

    @property
    def uses_memory(self) -> bool:
        return self._uses_memory

    def frag(
        self, cpu_free: IntArray, gpu_free: IntArray, model_idx: IntArray, mem_free: IntArray | None = None
    ) -> FloatArray:
        """Fragmented GPU milli of each state; ``gpu_free`` is (states, GPUs) with 0 in padding columns.
        ``mem_free`` is needed (and used) only when the typical pods carry memory requests."""
        total = gpu_free.sum(axis=1).astype(np.float64)
        if len(self._group_m) == 0 or len(total) == 0:
            return total * self._weight_sum
        ge = gpu_free[:, None, :] >= self._mvals[None, :, None]  # (K, M, G)
        count = ge.sum(axis=2)  # GPUs with at least m free
        usable = (gpu_free[:, None, :] * ge).sum(axis=2)  # their free share
        i = np.searchsorted(self._cpu_steps, cpu_free, side="right")
        if self._uses_memory:
            if mem_free is None:
                raise ValueError("these typical pods carry memory: pass mem_free")
            j = np.searchsorted(self._mem_steps, mem_free, side="right")
        else:
            j = np.full(len(total), len(self._mem_steps))
        hosted = self._table[:, i, j].T  # (K, groups): weight of the pods the node's CPU and memory allow
        gpus_ok = count[:, self._group_m] >= self._group_n
        usable_weight = hosted * gpus_ok * usable[:, self._group_m] * self._access[model_idx]
        # summed group by group in order (cumsum, not sum's pairwise order), so the compiled kernel
        # (gpufleet.sched.replay.kernels) gets the same bits and the same integer scores
        return total * self._weight_sum - usable_weight.cumsum(axis=1)[:, -1]

    def kernel_args(self) -> tuple[object, ...]:
        """The model's tables in the order the compiled kernels take them."""
        return (
            self._mvals.astype(np.int64),
            self._group_m.astype(np.int64),
            self._group_n.astype(np.int64),
            np.ascontiguousarray(self._access, dtype=np.float64),
            self._cpu_steps.astype(np.int64),
            self._mem_steps.astype(np.int64),
            np.ascontiguousarray(self._table, dtype=np.float64),
            self._weight_sum,
            self._uses_memory,
        )

    def node_frag(self, cluster: ReplayCluster, nodes: IntArray | None = None) -> FloatArray:
        idx = np.arange(len(cluster)) if nodes is None else nodes
        return self.frag(cluster.cpu_free[idx], cluster.gpu_free[idx], cluster.model_idx[idx], cluster.mem_free[idx])


class FragTracker:
    """Keeps every node's fragmentation current: after a placement only the changed node is recomputed."""

    def __init__(self, model: FragModel, cluster: ReplayCluster) -> None:
        self.model = model
        self.cluster = cluster
        self.values = model.node_frag(cluster)
        cluster.listeners.append(self._update)

    def _update(self, node: int) -> None:
        self.values[node] = self.model.node_frag(self.cluster, np.array([node]))[0]

    @property
    def total(self) -> float:
        return float(self.values.sum())
