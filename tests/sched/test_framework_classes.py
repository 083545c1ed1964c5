"""The class engine decides exactly as the reference (every pod filters and scores every node): same placements, GPU
indices, scores, evictions and failure messages, on the benchmark's workloads and on a mixed cluster with taints,
cordons, node selection (hostname too), NVLink pairs, gangs, queues, preemption and backfill."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from gpufleet.sched.framework.backfill import backfill
from gpufleet.sched.framework.queues import QueueBook, QueueSpec
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import PodInfo, Snapshot, parse_pod
from gpufleet.sched.framework.state import ClusterState
from gpufleet.sched.framework.types import Failure, Placement, PlanResult
from tests.sched.k8s_objects import GPU_TOL, H100_NVL, knode, kpod, snap

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}
GROUP = "scheduling.x-k8s.io/pod-group"
QUEUE = "kueue.x-k8s.io/queue-name"


def outcome(result: PlanResult) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    return (
        [(p.pod, p.node, p.gpus, p.score) for p in result.placements],
        [(f.pod, f.message, sorted(f.reasons.items())) for f in result.failures],
        [(e.pod, e.node, e.reason) for e in result.evictions],
    )


def one(result: Placement | Failure) -> tuple[Any, ...]:
    if isinstance(result, Placement):
        return ("placed", result.pod, result.node, result.gpus, result.score)
    return ("failed", result.pod, result.message, sorted(result.reasons.items()))


def twins(s: Snapshot) -> tuple[Scheduler, Scheduler]:
    return Scheduler.from_snapshot(s), Scheduler.from_snapshot(s, reference=True)


def class_keys_are_current(state: ClusterState) -> None:
    """Every node sits in the class of its live state, and a class's members share that state."""
    for node in range(len(state)):
        cls = int(state.classes.node_class[node])
        key = state.classes.keys[cls]
        assert isinstance(key, tuple)
        assert key[1] == tuple(state.free_[node].tolist())
        assert key[2] == int(state.best_free_domain[node])
        assert node in state.classes.members(cls)
    # the leaf-group indexes: free per group, the sorted orders asked for so far, nodes per class per group
    for g, members in enumerate(state.group_members):
        assert np.array_equal(state.group_free[g], state.free_[members].sum(axis=0))
        counts: dict[int, int] = {}
        for node in members.tolist():
            cls = int(state.classes.node_class[node])
            counts[cls] = counts.get(cls, 0) + 1
        assert state.group_classes[g] == counts
    for col, order in state._group_orders.items():
        assert order == sorted((int(f), g) for g, f in enumerate(state.group_free[:, col]))


# --- the benchmark's workloads, at 200 nodes --------------------------------------------------------------------


def bench_node(i: int) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": f"zone-{i % 4}", "gpufleet.io/leaf-group": f"su{i // 32}"}
    return knode(f"gpu-{i:05d}", labels=labels, taints=[GPU_TAINT])


def bench_pod(i: int, gpus: int, affinity: bool = False, group: str | None = None, priority: int = 0) -> PodInfo:
    spec: dict[str, Any] = {"tolerations": [GPU_TOL]}
    if affinity:
        zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [f"zone-{i % 4}"]}
        spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        spec["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [zone]}}
                ]
            }
        }
    labels = {GROUP: group} if group else {}
    return parse_pod(kpod(f"p{i}", gpus=gpus, cpu="4", memory="32Gi", labels=labels, priority=priority, **spec))


SIZES = (1, 1, 1, 1, 2, 2, 4, 8)


@pytest.mark.parametrize("affinity", [False, True])
def test_benchmark_single_pods_match_the_reference(affinity: bool) -> None:
    fast, ref = twins(snap(*(bench_node(i) for i in range(200))))
    pods = [bench_pod(i, SIZES[i % len(SIZES)], affinity=affinity and i % 2 == 0) for i in range(700)]
    got = [one(fast.schedule_one(p)) for p in pods]
    want = [one(ref.schedule_one(p)) for p in pods]
    assert got == want
    assert sum(g[0] == "failed" for g in got) > 0  # the cluster filled up: failure messages were compared too
    # the decisions were read from classes: a few dozen states, not 200 nodes
    assert fast.state.classes.n_active < 40
    class_keys_are_current(fast.state)


def test_benchmark_gangs_match_the_reference() -> None:
    from gpufleet.model import Gang

    fast, ref = twins(snap(*(bench_node(i) for i in range(200))))
    pods = [bench_pod(i, 8, group=f"g{i // 4}") for i in range(240)]  # more gangs than fit: some fail
    gangs = {f"default/g{k}": Gang(f"default/g{k}", 4) for k in range(60)}
    assert outcome(fast.plan(pods, gangs, preemption=False)) == outcome(ref.plan(pods, gangs, preemption=False))
    class_keys_are_current(fast.state)


def test_benchmark_preemption_matches_the_reference() -> None:
    fast, ref = twins(snap(*(bench_node(i) for i in range(200))))
    for i in range(800):
        fill = bench_pod(i, 2, priority=1)
        assert one(fast.schedule_one(fill)) == one(ref.schedule_one(fill))
    urgent = [bench_pod(10**6 + i, 8, priority=1000) for i in range(220)]  # the last 20 find nothing to evict
    got, want = outcome(fast.plan(urgent, {})), outcome(ref.plan(urgent, {}))
    assert got == want
    assert len(got[2]) == 800 and len(got[1]) == 20
    class_keys_are_current(fast.state)


# --- a mixed cluster -----------------------------------------------------------------------------------------------


def mixed_nodes(rng: random.Random, n: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(n):
        kind = rng.random()
        labels = {
            "topology.kubernetes.io/zone": f"zone-{i % 3}",
            "pool": rng.choice(["train", "infer", "batch"]),
            "gpufleet.io/leaf-group": f"su{i // 6}",
        }
        if rng.random() < 0.3:
            labels["rack"] = f"r{rng.randrange(4)}"
        taints = []
        if rng.random() < 0.5:
            taints.append(GPU_TAINT)
        if rng.random() < 0.15:
            taints.append(SOFT_TAINT)
        if kind < 0.25:
            nodes.append(knode(f"nvl-{i}", gpus=4, product=H100_NVL, labels=labels, taints=taints))
        elif kind < 0.3:
            nodes.append(knode(f"cpu-{i}", gpus=0, labels=labels, cpu="64", memory="256Gi"))
        else:
            nodes.append(
                knode(
                    f"sxm-{i}",
                    labels=labels,
                    taints=taints,
                    unschedulable=rng.random() < 0.05,
                    ready="False" if rng.random() < 0.04 else "True",
                )
            )
    return nodes


def mixed_pod(rng: random.Random, name: str, node_names: list[str], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if rng.random() < 0.7:
        spec["tolerations"] = [GPU_TOL]
    if rng.random() < 0.1:
        spec["tolerations"] = [*spec.get("tolerations", []), {"key": "maintenance", "operator": "Exists"}]
    pick = rng.random()
    if pick < 0.1:
        spec["nodeSelector"] = {"pool": rng.choice(["train", "infer"])}
    elif pick < 0.15:
        spec["nodeSelector"] = {"kubernetes.io/hostname": rng.choice(node_names)}
    elif pick < 0.25:
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
        req: dict[str, Any] = {"key": "rack" if op in ("Exists", "DoesNotExist") else "pool", "operator": op}
        if op in ("In", "NotIn"):
            req["values"] = ["train", "batch"]
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [req]}
            ]}}
        }  # fmt: skip
    if rng.random() < 0.25:
        term = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [f"zone-{rng.randrange(3)}"]}
        aff = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        aff["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.choice([1, 5, 50]), "preference": {"matchExpressions": [term]}}
        ]
    if rng.random() < 0.1:
        spec["preemptionPolicy"] = "Never"
    gpus = rng.choice([0, 1, 1, 2, 2, 4, 8])
    cpu = rng.choice(["1", "8", "32"])
    return kpod(name, gpus=gpus, cpu=cpu, memory=rng.choice(["4Gi", "64Gi", "400Gi"]), **spec, **extra)


def mixed_round(rng: random.Random, round_: int, node_names: list[str]) -> list[dict[str, Any]]:
    pods = []
    for j in range(rng.randrange(20, 40)):
        labels = {QUEUE: rng.choice(["research", "prod", "other"])}
        pods.append(mixed_pod(rng, f"r{round_}-{j}", node_names, priority=rng.choice([0, 10, 100]), labels=labels))
    for g in range(rng.randrange(1, 4)):
        size, prio = rng.choice([2, 3, 4]), rng.choice([0, 10, 100])
        labels = {GROUP: f"g{round_}-{g}", QUEUE: "research"}
        for m in range(size):
            pods.append(kpod(f"g{round_}-{g}-{m}", gpus=rng.choice([4, 8]), priority=prio, labels=labels,
                             tolerations=[GPU_TOL]))  # fmt: skip
    return pods


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_mixed_cluster_plans_match_the_reference(seed: int) -> None:
    from gpufleet.sched.framework.snapshot import assemble_gangs

    rng = random.Random(seed)
    nodes = mixed_nodes(rng, 48)
    names = [n["metadata"]["name"] for n in nodes]
    fast, ref = twins(snap(*nodes))
    for round_ in range(6):
        docs = mixed_round(rng, round_, names)
        pending_fast = [parse_pod(d) for d in docs]
        pending_ref = [parse_pod(d) for d in docs]
        gangs = assemble_gangs(pending_fast)
        got = outcome(fast.plan(pending_fast, gangs))
        want = outcome(ref.plan(pending_ref, assemble_gangs(pending_ref)))
        assert got == want, f"round {round_}"
        class_keys_are_current(fast.state)
    assert fast.state.placed.keys() == ref.state.placed.keys()


@pytest.mark.parametrize("seed", [5, 6])
def test_mixed_cluster_with_queues_matches_the_reference(seed: int) -> None:
    from gpufleet.sched.framework.snapshot import assemble_gangs

    def book() -> QueueBook:
        return QueueBook.of(
            [
                QueueSpec(name="research", guaranteed={"nvidia.com/gpu": 96}),
                QueueSpec(name="prod", guaranteed={"nvidia.com/gpu": 96}),
                QueueSpec(name="other", guaranteed={"nvidia.com/gpu": 16}, borrowing=False),
            ]
        )

    rng = random.Random(seed)
    nodes = mixed_nodes(rng, 36)
    names = [n["metadata"]["name"] for n in nodes]
    fast, ref = twins(snap(*nodes))
    book_fast, book_ref = book(), book()
    for round_ in range(5):
        docs = mixed_round(rng, round_, names)
        pf, pr = [parse_pod(d) for d in docs], [parse_pod(d) for d in docs]
        got = outcome(fast.plan(pf, assemble_gangs(pf), queues=book_fast))
        want = outcome(ref.plan(pr, assemble_gangs(pr), queues=book_ref))
        assert got == want, f"round {round_}"
    assert book_fast.usage == book_ref.usage


def test_backfill_matches_the_reference() -> None:
    rng = random.Random(9)
    nodes = mixed_nodes(rng, 24)
    names = [n["metadata"]["name"] for n in nodes]
    fast, ref = twins(snap(*nodes))
    running = [mixed_pod(rng, f"run-{i}", names) for i in range(60)]
    ends: dict[str, float] = {}
    for i, d in enumerate(running):
        a, b = fast.schedule_one(parse_pod(d)), ref.schedule_one(parse_pod(d))
        assert one(a) == one(b)
        ends[f"default/run-{i}"] = float(rng.randrange(10, 500))
    runtime = "gpufleet.io/runtime-estimate"
    pending = [mixed_pod(rng, f"q-{i}", names, annotations={runtime: f"{rng.randrange(5, 300)}s"}) for i in range(30)]
    got = backfill(fast, [parse_pod(d) for d in pending], now=0.0, ends=ends)
    want = backfill(ref, [parse_pod(d) for d in pending], now=0.0, ends=ends)
    assert [(p.pod, p.node, p.gpus) for p in got.started] == [(p.pod, p.node, p.gpus) for p in want.started]
    assert (got.backfilled, got.held, got.reservation) == (want.backfilled, want.held, want.reservation)


# --- label keys ----------------------------------------------------------------------------------------------------


def test_classes_split_by_a_selected_label_but_not_by_hostname() -> None:
    nodes = [knode(f"n{i}", labels={"pool": "a" if i < 3 else "b"}) for i in range(6)]
    fast, ref = twins(snap(*nodes))
    assert fast.state.classes.n_active == 1  # six empty, identical nodes
    on_b = parse_pod(kpod("x", gpus=1, nodeSelector={"pool": "b"}))
    assert fast.by_class(on_b)
    assert fast.state.label_keys == ("pool",) and fast.state.classes.n_active == 2
    assert one(fast.schedule_one(on_b)) == one(ref.schedule_one(on_b)) == ("placed", "default/x", "n3", (0,), 7.6)
    pinned = parse_pod(kpod("y", gpus=1, nodeSelector={"kubernetes.io/hostname": "n5"}))
    assert not fast.by_class(pinned)  # one class per node would be no classes at all: node by node
    assert fast.state.label_keys == ("pool",)
    assert one(fast.schedule_one(pinned)) == one(ref.schedule_one(pinned))
    nowhere = parse_pod(kpod("z", gpus=1, nodeSelector={"kubernetes.io/hostname": "n9"}))
    assert one(fast.schedule_one(nowhere)) == one(ref.schedule_one(nowhere))


def test_rollback_restores_classes() -> None:
    fast, _ = twins(snap(*(bench_node(i) for i in range(12))))
    state = fast.state
    before = {n: state.classes.keys[int(state.classes.node_class[n])] for n in range(len(state))}
    mark = state.mark()
    for i in range(20):
        fast.schedule_one(bench_pod(i, SIZES[i % len(SIZES)]))
    state.release("default/p3")
    class_keys_are_current(state)
    state.rollback(mark)
    after = {n: state.classes.keys[int(state.classes.node_class[n])] for n in range(len(state))}
    assert after == before
    assert np.array_equal(state.free_, state.alloc)


@pytest.mark.parametrize("seed", [7, 8])
def test_gangs_over_a_degraded_fabric_match_the_reference(seed: int) -> None:
    """Gang members score by leaf and by fabric health, and keep off degraded leaves while they can."""
    from gpufleet.model import Gang, GpuRequest, Pod
    from gpufleet.sched.framework.snapshot import FabricHealth, LeafHealth, pod_info
    from tests.sched.k8s_objects import fabric_cluster

    rng = random.Random(seed)
    cluster = fabric_cluster(nodes=24, per_su=4)
    rails = {f"n-{i:03d}": {r: f"su{i // 4 + 1}-r{r}" for r in range(8)} for i in range(24)}
    leaves = {
        f"su{rng.randrange(1, 7)}-r{rng.randrange(8)}": LeafHealth(rng.choice(["degraded", "down"]), 0.5, ("flap",))
        for _ in range(3)
    }
    health = FabricHealth(rails, leaves, {"n-005": ("bad cable",)})
    fast = Scheduler.from_cluster(cluster, fabric_health=health)
    ref = Scheduler.from_cluster(cluster, fabric_health=health, reference=True)
    assert fast.state.has_fabric_health and fast.state.fabric_avoid.any()
    for round_ in range(5):
        pods, gangs = [], {}
        for g in range(rng.randrange(1, 4)):
            name = f"default/g{round_}-{g}"
            size = rng.choice([2, 3, 5, 6])
            gangs[name] = Gang(name, size)
            pods += [
                Pod(f"g{round_}-{g}-{m}", gpu=GpuRequest(count=rng.choice([4, 8])), gang=name) for m in range(size)
            ]
        pods += [Pod(f"s{round_}-{i}", gpu=GpuRequest(count=rng.choice([1, 2, 4]))) for i in range(rng.randrange(8))]
        got = outcome(fast.plan([pod_info(p) for p in pods], gangs))
        want = outcome(ref.plan([pod_info(p) for p in pods], gangs))
        assert got == want, f"round {round_}"
        class_keys_are_current(fast.state)


def test_a_gang_skips_groups_whose_room_is_on_nodes_it_keeps_off() -> None:
    """The four tightest groups hold three 8-GPU members only by counting a node with a bad cable; the gang is tried
    on a group whose healthy nodes hold it, not spent on those four."""
    from gpufleet.model import Gang, GpuRequest, Pod
    from gpufleet.sched.framework.snapshot import FabricHealth, pod_info
    from tests.sched.k8s_objects import fabric_cluster

    cluster = fabric_cluster(nodes=24, per_su=4)
    rails = {f"n-{i:03d}": {r: f"su{i // 4 + 1}-r{r}" for r in range(8)} for i in range(24)}
    health = FabricHealth(rails, {}, {f"n-{4 * g:03d}": ("bad cable",) for g in range(4)})
    results = []
    for reference in (False, True):
        sched = Scheduler.from_cluster(cluster, fabric_health=health, reference=reference)
        for g in range(4):  # one GPU taken on a healthy node of each of the first four groups: they are tightest
            busy = pod_info(Pod(f"busy-{g}", gpu=GpuRequest(count=1)))
            sched.state.assign(busy, sched.state.index[f"n-{4 * g + 1:03d}"])
        gang = [pod_info(Pod(f"m-{i}", gpu=GpuRequest(count=8), gang="default/g")) for i in range(3)]
        results.append(outcome(sched.plan(gang, {"default/g": Gang("default/g", 3)})))
    assert results[0] == results[1]
    nodes = sorted(p[1] for p in results[0][0])
    assert len(nodes) == 3 and len({int(n[2:]) // 4 for n in nodes}) == 1 and int(nodes[0][2:]) >= 16


def test_the_classes_a_decision_reads_do_not_grow_with_the_fleet() -> None:
    """The same pods on 60 and on 600 alike nodes: the same placements, from the same number of classes."""
    seen = []
    for n in (60, 600):
        sched = Scheduler.from_snapshot(snap(*(bench_node(i) for i in range(n))))
        placed = [one(sched.schedule_one(bench_pod(i, SIZES[i % len(SIZES)], affinity=i % 3 == 0))) for i in range(150)]
        seen.append((placed, len(sched.state.classes), sched.state.classes.n_active))
    assert seen[0] == seen[1]
