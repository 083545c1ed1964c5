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

from gpufleet.fabric.topology import Topology
from gpufleet.sched.replay.engine import ReplayEngine
from gpufleet.sched.replay.frag import DEFAULT_POPULARITY_THRESHOLD as KPI_THRESHOLD
from gpufleet.sched.replay.frag import FragModel, FragTracker, TypicalPods
from gpufleet.sched.replay.gangs import GangPlacer, GangResult, GangStats, ReplayFabric
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
    """The pods in arrival order (see `arrival_indices`)."""
    return pods.take(arrival_indices(pods, capacity_milli, seed=seed, tune=tune, shuffle=shuffle, rng=rng))


def arrival_indices(
    pods: PodList,
    capacity_milli: int,
    *,
    seed: int,
    tune: float,
    shuffle: bool = True,
    rng: np.random.Generator | None = None,
) -> list[int]:
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
        return [int(i) for i in order]
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
    return [int(i) for i in order]


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
    gangs: GangStats | None = None  # where each gang landed (None: the trace has no gangs)

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
            **({} if self.gangs is None else self.gang_summary()),
        }

    def gang_summary(self) -> dict[str, object]:
        assert self.gangs is not None
        return {
            "gang_counts": self.gangs.counts(),
            "gang_summary": self.gangs.summary(),
            "gangs": [g.to_dict() for g in self.gangs.gangs],
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
    topology: Topology | None = None,
) -> ReplayResult:
    """Replay ``workload`` on a fresh cluster of ``nodes`` with one policy and one seed.

    The placement engine decides (classes of identical nodes, compiled FGD kernels); ``reference=True`` has the
    policy score every node with numpy instead: the same placements, slower, kept to check the engine against.
    A workload with gangs (its ``gang`` column) arrives gang by gang: a gang is one draw of the shuffle and of the
    tuning, and is placed whole or not at all, under the fewest switches of ``topology`` (the fabric the nodes sit
    in, by name) when given.
    """
    if workload.has_gangs:
        return _replay_gangs(
            nodes, workload, policy_name, seed=seed, tune=tune, shuffle=shuffle, points=points,
            progress=progress, reference=reference, topology=topology,
        )  # fmt: skip
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

    return _result(
        policy_name, seed, tune, placements, failed, failed_by_shape, (arrived, free, frag), capacity, points,
        (started, started_cpu),
    )  # fmt: skip


def _result(
    policy: str,
    seed: int,
    tune: float,
    placements: list[ReplayPlacement | None],
    failed: int,
    failed_by_shape: dict[str, int],
    curves: tuple[FloatArray, FloatArray, FloatArray],
    capacity: int,
    points: Sequence[int],
    started: tuple[float, float],
    gangs: GangStats | None = None,
) -> ReplayResult:
    """A replay's result from its per-pod curves (GPU milli arrived, free and fragmented after each pod) and the
    wall and CPU clocks it started at."""
    arrived, free, frag = curves
    total_gpus = capacity // MILLI
    alloc = (capacity - free) / capacity * 100.0
    frag_pct = frag / capacity * 100.0
    return ReplayResult(
        policy=policy,
        seed=seed,
        tune=tune,
        pods=len(placements),
        failed=failed,
        failed_by_shape=dict(sorted(failed_by_shape.items())),
        alloc_pct={str(k): v for k, v in discrete_curve(arrived, alloc, total_gpus, points).items()},
        frag_amount_pct={str(k): v for k, v in discrete_curve(arrived, frag_pct, total_gpus, points).items()},
        seconds=time.perf_counter() - started[0],
        cpu_seconds=time.process_time() - started[1],
        total_gpus=total_gpus,
        arrived_milli=arrived,
        alloc_curve=alloc,
        frag_curve=frag_pct,
        placements=placements,
        gangs=gangs,
    )


def gang_units(pods: PodList) -> tuple[PodList, list[list[int]], list[str]]:
    """The arrival units of a workload with gangs: one row per lone pod and one per gang (named by the gang, its
    pods' CPU, memory and whole GPUs summed), each unit's pods, and each unit's gang ("" for a lone pod)."""
    members: list[list[int]] = []
    gangs: list[str] = []
    unit_of: dict[str, int] = {}
    for i, gang in enumerate(pods.gang):
        if not gang:
            members.append([i])
            gangs.append("")
        elif gang in unit_of:
            members[unit_of[gang]].append(i)
        else:
            unit_of[gang] = len(members)
            members.append([i])
            gangs.append(gang)
    names, cpu, mem, ngpu, milli, specs, qos, resources = [], [], [], [], [], [], [], []
    for unit, gang in zip(members, gangs, strict=True):
        first = unit[0]
        gpus = int(pods.num_gpu[unit].sum())
        names.append(gang or pods.names[first])
        cpu.append(int(pods.cpu_milli[unit].sum()))
        mem.append(int(pods.memory_mib[unit].sum()))
        ngpu.append(gpus)
        milli.append(int(pods.gpu_milli[first]) if not gang else (MILLI if gpus else 0))
        specs.append(pods.gpu_spec[first])
        qos.append(pods.qos[first])
        resources.append(pods.resource(first))
    rows = PodList(
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        num_gpu=np.array(ngpu, dtype=np.int64),
        gpu_milli=np.array(milli, dtype=np.int64),
        gpu_spec=tuple(specs),
        qos=tuple(qos),
        gpu_resource=tuple(resources) if pods.gpu_resource else (),
    )
    return rows, members, gangs


def _replay_gangs(
    nodes: NodeList,
    workload: PodList,
    policy_name: str,
    *,
    seed: int,
    tune: float,
    shuffle: bool,
    points: Sequence[int],
    progress: Callable[[int], None] | None,
    reference: bool,
    topology: Topology | None,
) -> ReplayResult:
    """`replay` for a workload with gangs: units (a lone pod, or a gang's pods) arrive in the shuffled and tuned
    order; a gang's pods are placed whole under the fewest switches, or all fail. Curves are recorded per pod."""
    started = time.perf_counter()
    started_cpu = time.process_time()
    cluster = ReplayCluster.from_nodes(nodes)
    capacity = cluster.total_gpu_milli
    workload_rng = np.random.default_rng(seed)
    rows, members, unit_gangs = gang_units(workload)
    order = arrival_indices(rows, capacity, seed=seed, tune=tune, shuffle=shuffle, rng=workload_rng)
    cluster.name_rank = tie_break_order(nodes.names, workload_rng)
    policy = make_policy(policy_name)
    policy.prepare(cluster, workload)
    kpi_model = FragModel(TypicalPods.from_pods(workload, KPI_THRESHOLD), cluster.models)
    rng = np.random.default_rng([seed, 1])
    fabric = ReplayFabric.from_topology(topology, nodes.names) if topology is not None else None

    if reference:
        engine = None
        tracker = FragTracker(kpi_model, cluster)

        def frag_now() -> float:
            return tracker.total
    else:
        engine = ReplayEngine(cluster, policy)
        kpi = engine.track_frag(kpi_model)

        def frag_now() -> float:
            return engine.frag_total[kpi]

    placer = GangPlacer(cluster, policy, engine, fabric)
    stats = GangStats()
    seen: dict[str, int] = {}
    arrived_list, free_list, frag_list = [0.0], [float(cluster.free_gpu_milli)], [frag_now()]
    placements: list[ReplayPlacement | None] = []
    failed = 0
    failed_by_shape: dict[str, int] = {}
    arrived_total = 0
    free_total = cluster.free_gpu_milli
    done = 0
    for unit in order:
        pods = pod_requests(workload.take(members[unit]))
        gang = unit_gangs[unit]
        if gang:
            copy = seen.get(gang, 0)
            seen[gang] = copy + 1
            where = placer.place(pods, rng)
            name = gang if not copy else f"{gang}#{copy}"
            result = GangResult(name, len(pods), sum(p.num_gpu for p in pods), first=len(placements))
            if where is not None:
                result.landing = placer.landing([p.node for p in where])
            stats.gangs.append(result)
            outcome: list[ReplayPlacement | None] = list(where) if where is not None else [None] * len(pods)
        else:
            (pod,) = pods
            if engine is None:
                feasible = cluster.feasible(pod)
                one = policy.choose(cluster, pod, feasible, rng) if feasible.any() else None
                if one is not None:
                    cluster.place(pod, one)
            else:
                one = engine.schedule(pod, rng)
            outcome = [one]
        for pod, placement in zip(pods, outcome, strict=True):
            arrived_total += pod.total_gpu_milli
            placements.append(placement)
            if placement is not None:
                free_total -= pod.total_gpu_milli
            else:
                failed += 1
                failed_by_shape[shape(pod)] = failed_by_shape.get(shape(pod), 0) + 1
            arrived_list.append(arrived_total)
            free_list.append(free_total)
            frag_list.append(frag_now())
        done += len(pods)
        if progress is not None and done >= 256:
            progress(done)
            done = 0
    if progress is not None and done:
        progress(done)

    curves = (np.array(arrived_list), np.array(free_list), np.array(frag_list))
    return _result(
        policy_name, seed, tune, placements, failed, failed_by_shape, curves, capacity, points,
        (started, started_cpu), stats,
    )  # fmt: skip


def place_one(cluster: ReplayCluster, policy_name: str, pod: PodRequest, seed: int = 0) -> ReplayPlacement | None:
    """Place a single pod with a workload-independent policy (for callers outside a replay)."""
    policy = make_policy(policy_name)
    feasible = cluster.feasible(pod)
    if not feasible.any():
        return None
    placement = policy.choose(cluster, pod, feasible, np.random.default_rng(seed))
    cluster.place(pod, placement)
    return placement
