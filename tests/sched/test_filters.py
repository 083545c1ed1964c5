"""Filter plugins: taint/toleration matrix, affinity operators, cordon, GPU health, and the FailedScheduling message."""

from __future__ import annotations

import pytest

from gpufleet.model import SelectorRequirement, Taint, TaintEffect, Toleration
from gpufleet.sched.framework.filters import failed_scheduling_message, requirement_matches, tolerates
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.types import Failure, Placement
from tests.sched.k8s_objects import GPU_TOL, knode, pod, snap

NS, PNS, NE = TaintEffect.no_schedule, TaintEffect.prefer_no_schedule, TaintEffect.no_execute


@pytest.mark.parametrize(
    ("tol", "taint", "expected"),
    [
        (Toleration("k", "Equal", "v", NS), Taint("k", NS, "v"), True),
        (Toleration("k", "Equal", "w", NS), Taint("k", NS, "v"), False),
        (Toleration("k", "Exists", "", NS), Taint("k", NS, "v"), True),
        (Toleration("k", "Exists", "", None), Taint("k", NE, "v"), True),
        (Toleration("k", "Equal", "v", NE), Taint("k", NS, "v"), False),
        (Toleration("", "Exists", "", None), Taint("anything", NE, "x"), True),
        (Toleration("", "Exists", "", PNS), Taint("anything", NS, "x"), False),
        (Toleration("other", "Exists", "", None), Taint("k", NS, ""), False),
        (Toleration("k", "Equal", "", None), Taint("k", NS, ""), True),
    ],
)
def test_toleration_matrix(tol: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(tol, taint) is expected


LABELS = {"gpu.memory": "81559", "pool": "a", "zone": "z1"}


@pytest.mark.parametrize(
    ("op", "key", "values", "expected"),
    [
        ("In", "pool", ("a", "b"), True),
        ("In", "pool", ("c",), False),
        ("In", "absent", ("a",), False),
        ("NotIn", "pool", ("c",), True),
        ("NotIn", "pool", ("a",), False),
        ("NotIn", "absent", ("a",), True),
        ("Exists", "zone", (), True),
        ("Exists", "absent", (), False),
        ("DoesNotExist", "absent", (), True),
        ("DoesNotExist", "zone", (), False),
        ("Gt", "gpu.memory", ("80000",), True),
        ("Gt", "gpu.memory", ("81559",), False),
        ("Lt", "gpu.memory", ("90000",), True),
        ("Lt", "gpu.memory", ("81559",), False),
        ("Gt", "pool", ("1",), False),  # not an integer label: no match
        ("Lt", "absent", ("1",), False),
    ],
)
def test_affinity_operators(op: str, key: str, values: tuple[str, ...], expected: bool) -> None:
    assert requirement_matches(SelectorRequirement(key, op, values), LABELS) is expected


def test_taint_effects_on_placement() -> None:
    s = snap(
        knode("hard", taints=[{"key": "gpufleet.io/x", "value": "true", "effect": "NoSchedule"}]),
        knode("evict", taints=[{"key": "gpufleet.io/y", "value": "1", "effect": "NoExecute"}]),
        knode("soft", taints=[{"key": "gpufleet.io/z", "value": "", "effect": "PreferNoSchedule"}]),
    )
    sched = Scheduler.from_snapshot(s)
    result = sched.schedule_one(pod("p", gpus=1))
    assert isinstance(result, Placement) and result.node == "soft"  # PreferNoSchedule only scores lower

    tolerant = pod("q", gpus=1, tolerations=[{"key": "gpufleet.io/x", "operator": "Exists"}])
    exp = Scheduler.from_snapshot(s).explain(tolerant)
    assert exp.feasible[0][0] == "hard"  # the untainted-for-it node beats the PreferNoSchedule one
    assert {n for n, _ in exp.feasible} == {"hard", "soft"}


def test_cordoned_not_ready_and_selector() -> None:
    s = snap(
        knode("cordoned", unschedulable=True),
        knode("down", ready="False"),
        knode("cpu-only", gpus=0, labels={"disk": "ssd"}),
        knode("ok", labels={"disk": "ssd"}),
    )
    sched = Scheduler.from_snapshot(s)
    assert sched.candidates(pod("p")).tolist() == [2, 3]
    picked = sched.schedule_one(pod("p", gpus=2, nodeSelector={"disk": "ssd"}))
    assert isinstance(picked, Placement) and picked.node == "ok"
    # tolerating the cordon taint lets a pod land on a cordoned node (DaemonSet-style)
    cordon_tol = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert 0 in Scheduler.from_snapshot(s).candidates(pod("d", tolerations=cordon_tol)).tolist()


def test_unhealthy_gpus_reduce_what_fits() -> None:
    s = snap(knode("n1", gpus=8, allocatable_gpus=6))
    sched = Scheduler.from_snapshot(s)
    assert isinstance(sched.schedule_one(pod("a", gpus=6)), Placement)
    fail = sched.schedule_one(pod("b", gpus=1))
    assert isinstance(fail, Failure)
    assert fail.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_failed_scheduling_message_in_kube_scheduler_style() -> None:
    nodes = [knode(f"free-{i}", gpus=8) for i in range(3)]
    nodes += [knode(f"busy-{i}", gpus=2) for i in range(24)]
    nodes += [knode("t1", taints=[{"key": "gpufleet.io/x", "value": "true", "effect": "NoSchedule"}])]
    nodes += [knode("t2", taints=[{"key": "gpufleet.io/x", "value": "true", "effect": "NoExecute"}])]
    nodes += [knode("c1", unschedulable=True), knode("c2", unschedulable=True)]
    nodes += [knode("small-cpu", gpus=8, cpu="2")]
    s = snap(*nodes)
    sched = Scheduler.from_snapshot(s)
    for i in range(3):
        assert isinstance(sched.schedule_one(pod(f"fill-{i}", gpus=8, cpu="4")), Placement)
    result = sched.schedule_one(pod("big", gpus=4, cpu="8"))
    assert isinstance(result, Failure)
    assert result.message == (
        "0/32 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {gpufleet.io/x: true}, "
        "2 node(s) were unschedulable, 27 Insufficient nvidia.com/gpu."
    )
    # a node short of both counts under both reasons, as kube-scheduler's NodeResourcesFit reports it
    both = sched.schedule_one(pod("both", gpus=9, cpu="100"))
    assert isinstance(both, Failure)
    assert both.reasons["Insufficient nvidia.com/gpu"] == 28 and both.reasons["Insufficient cpu"] == 1


def test_unknown_resource_and_message_helper() -> None:
    s = snap(knode("n1"))
    result = Scheduler.from_snapshot(s).schedule_one(
        pod("p", resources={"limits": {"example.com/fpga": "1"}}, tolerations=[GPU_TOL])
    )
    assert isinstance(result, Failure)
    assert result.message == "0/1 nodes are available: 1 Insufficient example.com/fpga."
    msg = failed_scheduling_message(5, {"b": 2, "a": 3}, "0/5 nodes are available: 5 Preemption is not helpful.")
    assert msg == "0/5 nodes are available: 2 b, 3 a. preemption: 0/5 nodes are available: 5 Preemption is not helpful."


def test_twin_node_with_an_unhealthy_gpu_offers_seven() -> None:
    from gpufleet.model import GpuHealth
    from tests.sched.k8s_objects import fabric_cluster

    cluster = fabric_cluster(nodes=1, per_su=1)
    cluster.nodes[0].gpus[3].health = GpuHealth.unhealthy
    sched = Scheduler.from_cluster(cluster)
    assert sched.state.alloc[0, sched.state.res_index["nvidia.com/gpu"]] == 7
    placed = sched.schedule_one(pod("p", gpus=7))
    assert isinstance(placed, Placement) and 3 not in placed.gpus
    assert isinstance(sched.schedule_one(pod("q", gpus=1)), Failure)


def test_pod_count_limit() -> None:
    node = knode("tiny")
    node["status"]["allocatable"]["pods"] = "2"
    sched = Scheduler.from_snapshot(snap(node))
    for name in ("a", "b"):
        assert isinstance(sched.schedule_one(pod(name)), Placement)
    full = sched.schedule_one(pod("c"))
    assert isinstance(full, Failure) and full.message == "0/1 nodes are available: 1 Too many pods."
