"""Trace replay: the FGD paper's fill-up experiment on the openb trace.

Pods are sorted by name and shuffled with the seed; the workload is then tuned to ``tune`` x the cluster's
GPU capacity the way the reference simulator does it (pods drawn uniformly, with replacement, from the
original list and appended until the next draw's per-GPU share would overshoot the target); pods arrive one
by one, never leave, and a pod that fits nowhere fails. After every pod the allocated GPU share, the
arrived GPU request and the cluster's fragmentation are recorded; the KPI is the allocation at each integer
percentage of arrived workload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.sched.replay.engine import ReplayEngine
from gpufleet.sched.replay.frag import DEFAULT_POPULARITY_THRESHOLD as KPI_THRESHOLD
from gpufleet.sched.replay.frag import FragModel, FragTracker, TypicalPods
from gpufleet.sched.replay.openb import MILLI, NodeList, PodList
from gpufleet.sched.replay.policies import make_policy
from gpufleet.sched.replay.state import PodRequest, ReplayCluster, ReplayPlacement, pod_requests

DEFAULT_POINTS = (100, 130)
FloatArray = npt.NDArray[np.float64]


def arrival_order(
    pods: PodList,
    capacity_milli: int,
    *,
    seed: int,
    tune: float,
    shuffle: bool = True,
    rng: np.random.Generator | None = None,
) -> PodList:
    """The pods in arrival order: sorted by name, shuffled by ``seed``, then tuned to ``tune`` x capacity.

    Tuning up draws pods uniformly from the name-sorted originals and appends them while the total GPU
    request stays within the target; the loop stops at the first draw whose *per-GPU* share would pass the
    target (the reference compares that, not the pod's total). Tuning down drops random pods until the
    total is within the target. ``tune <= 0`` keeps the workload as is. Pass ``rng`` to continue drawing
    from it afterwards (otherwise a generator is seeded from ``seed``).
    """
    rng = np.random.default_rng(seed) if rng is None else rng
    by_name = np.array(sorted(range(len(pods)), key=lambda i: pods.names[i]), dtype=np.int64)
    order = list(by_name[rng.permutation(len(pods))] if shuffle else by_name)
    if tune <= 0 or not len(pods):
        return pods.take(order)
    total = pods.total_gpu_milli
    target = tune * capacity_milli
    per_pod = pods.num_gpu * pods.gpu_milli
    if total > target:
        while total > target and order:
            gone = order.pop(int(rng.integers(len(order))))
            total -= int(per_pod[gone])
    else:
        while True:
            pick = int(by_name[rng.integers(len(by_name))])
            if total + int(pods.gpu_milli[pick]) > target:
                break
            total += int(per_pod[pick])
            order.append(pick)
    return pods.take(order)


def shape(pod: PodRequest) -> str:
    """'cpu-only', 'sharing' or 'N-gpu': how failures are tallied."""
    if pod.num_gpu == 0:
        return "cpu-only"
    return "sharing" if pod.is_sharing else f"{pod.num_gpu}-gpu"


def tie_break_order(names: Sequence[str], rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Each node's rank for score ties: the i-th node by name gets the i-th value of a random permutation."""
    by_name = np.argsort(np.array(names, dtype=object), kind="stable")
    rank = np.empty(len(names), dtype=np.int64)
    rank[by_name] = rng.permutation(len(names))
    return rank


@dataclass
class ReplayResult:
    policy: str
    seed: int
    tune: float
    pods: int
    failed: int
    failed_by_shape: dict[str, int]
    alloc_pct: dict[str, float | None]
    frag_amount_pct: dict[str, float | None]
    seconds: float
    cpu_seconds: float = 0.0
    total_gpus: int = 0
    arrived_milli: FloatArray = field(repr=False, default_factory=lambda: np.zeros(0))
    alloc_curve: FloatArray = field(repr=False, default_factory=lambda: np.zeros(0))
    frag_curve: FloatArray = field(repr=False, default_factory=lambda: np.zeros(0))
    placements: list[ReplayPlacement | None] = field(repr=False, default_factory=list)  # per pod, in arrival order

    def curve(self, points: Sequence[int] = range(131)) -> dict[int, float | None]:
        """Allocation % at each integer arrived % (for plots)."""
        return discrete_curve(self.arrived_milli, self.alloc_curve, self.total_gpus, points)

    def summary(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "tune": self.tune,
            "pods": self.pods,
            "failed": self.failed,
            "failed_by_shape": self.failed_by_shape,
            "alloc_pct": self.alloc_pct,
            "frag_amount_pct": self.frag_amount_pct,
            "seconds": round(self.seconds, 3),
        }


def discrete_curve(
    arrived_milli: FloatArray, value_pct: FloatArray, total_gpus: int, points: Sequence[int]
) -> dict[int, float | None]:
    """Values at integer arrived percentages, as the paper's analysis reads them: the mean over all records
    whose arrived % rounds to the point (else those within +-1), of values rounded to 2 decimals."""
    arrived = np.array([round(x, 0) for x in (arrived_milli / total_gpus / 10).tolist()])
    values = np.array([round(v, 2) for v in value_pct.tolist()])
    out: dict[int, float | None] = {}
    for point in points:
        hit = arrived == point
        if not hit.any():
            hit = (arrived >= point - 1) & (arrived <= point + 1)
        out[point] = round(float(values[hit].mean()), 2) if hit.any() else None
    return out


def replay(
    nodes: NodeList,
    workload: PodList,
    policy_name: str,
    *,
    seed: int = 42,
    tune: float = 1.3,
    shuffle: bool = True,
    points: Sequence[int] = DEFAULT_POINTS,
    progress: Callable[[int], None] | None = None,
    reference: bool = False,
) -> ReplayResult:
    """Replay ``workload`` on a fresh cluster of ``nodes`` with one policy and one seed.

    The placement engine decides (classes of identical nodes, compiled FGD kernels); ``reference=True`` has the
    policy score every node with numpy instead: the same placements, slower, kept to check the engine against.
    """
    started = time.perf_counter()
    started_cpu = time.process_time()
    cluster = ReplayCluster.from_nodes(nodes)
    capacity = cluster.total_gpu_milli
    workload_rng = np.random.default_rng(seed)
    arrivals = arrival_order(workload, capacity, seed=seed, tune=tune, shuffle=shuffle, rng=workload_rng)
    # the reference prefixes node names with a random permutation before scheduling, and breaks score ties
    # by name: ties go to nodes in a random order that is fixed for the run
    cluster.name_rank = tie_break_order(nodes.names, workload_rng)
    requests = pod_requests(arrivals)
    policy = make_policy(policy_name)
    policy.prepare(cluster, workload)
    # the fragmentation KPI always uses the paper's definition
    kpi_model = FragModel(TypicalPods.from_pods(workload, KPI_THRESHOLD), cluster.models)
    # a separate stream for the policy keeps the arrival order identical across policies for one seed
    rng = np.random.default_rng([seed, 1])

    n = len(requests)
    arrived = np.zeros(n + 1)
    free = np.zeros(n + 1)
    frag = np.zeros(n + 1)
    placements: list[ReplayPlacement | None] = []
    failed = 0
    failed_by_shape: dict[str, int] = {}
    arrived_total = 0
    free[0] = free_total = cluster.free_gpu_milli
    if reference:
        tracker = FragTracker(kpi_model, cluster)
        frag[0] = tracker.total
    else:
        engine = ReplayEngine(cluster, policy)
        kpi = engine.track_frag(kpi_model)
        frag[0] = engine.frag_total[kpi]
    for i, pod in enumerate(requests, start=1):
        arrived_total += pod.total_gpu_milli
        placement: ReplayPlacement | None = None
        if reference:
            feasible = cluster.feasible(pod)
            if feasible.any():
                placement = policy.choose(cluster, pod, feasible, rng)
                cluster.place(pod, placement)
            frag[i] = tracker.total
        else:
            placement = engine.schedule(pod, rng)
            frag[i] = engine.frag_total[kpi]
        placements.append(placement)
        if placement is not None:
            free_total -= pod.total_gpu_milli
        else:
            failed += 1
            failed_by_shape[shape(pod)] = failed_by_shape.get(shape(pod), 0) + 1
        arrived[i] = arrived_total
        free[i] = free_total
        if progress is not None and i % 256 == 0:
            progress(256)
    if progress is not None:
        progress(n % 256)

    total_gpus = capacity // MILLI
    alloc = (capacity - free) / capacity * 100.0
    frag_pct = frag / capacity * 100.0
    return ReplayResult(
        policy=policy_name,
        seed=seed,
        tune=tune,
        pods=n,
        failed=failed,
        failed_by_shape=dict(sorted(failed_by_shape.items())),
        alloc_pct={str(k): v for k, v in discrete_curve(arrived, alloc, total_gpus, points).items()},
        frag_amount_pct={str(k): v for k, v in discrete_curve(arrived, frag_pct, total_gpus, points).items()},
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - started_cpu,
        total_gpus=total_gpus,
        arrived_milli=arrived,
        alloc_curve=alloc,
        frag_curve=frag_pct,
        placements=placements,
    )


def place_one(cluster: ReplayCluster, policy_name: str, pod: PodRequest, seed: int = 0) -> ReplayPlacement | None:
    """Place a single pod with a workload-independent policy (for callers outside a replay)."""
    policy = make_policy(policy_name)
    feasible = cluster.feasible(pod)
    if not feasible.any():
        return None
    placement = policy.choose(cluster, pod, feasible, np.random.default_rng(seed))
    cluster.place(pod, placement)
    return placement
