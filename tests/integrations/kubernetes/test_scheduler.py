"""The secondary scheduler against the official client's models: a recording CoreV1Api stands in for the network."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from gpufleet.integrations.kubernetes.scheduler import KubernetesScheduler
from tests.sched.k8s_objects import GPU_TOL, knode, kpod
from tests.sched.k8s_test_api import RecordingCoreV1Api

GROUP = "scheduling.x-k8s.io/pod-group"


def _items(kind: str, objs: list[dict[str, Any]]) -> Any:
    """Deserialize through the client exactly as a list call does with the API server's JSON."""

    text = json.dumps({"apiVersion": "v1", "kind": kind, "metadata": {}, "items": objs})
    return client.ApiClient().deserialize(text, f"V1{kind}", "application/json")


def _api(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> RecordingCoreV1Api:
    return RecordingCoreV1Api(_items("NodeList", nodes), _items("PodList", pods))


def test_pending_pods_are_bound_with_binding_bodies() -> None:
    api = _api(
        [knode("a", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]), knode("b")],
        [
            kpod("train", gpus=8, namespace="ml", tolerations=[GPU_TOL]),
            kpod("not-mine", gpus=1, schedulerName="default-scheduler"),
            kpod("running", gpus=4, node="b"),
        ],
    )
    result = KubernetesScheduler(api).run_once()
    assert [(p.pod, p.node) for p in result.bound] == [("ml/train", "a")]
    (call,) = api.calls_to("create_namespaced_binding")
    namespace, body = call.args
    assert namespace == "ml" and call.kwargs == {"_preload_content": False}
    assert isinstance(body, client.V1Binding)
    assert body.metadata.name == "train" and body.metadata.namespace == "ml" and body.metadata.uid == "uid-train"
    assert body.target.kind == "Node" and body.target.name == "a" and body.target.api_version == "v1"
    assert client.ApiClient().sanitize_for_serialization(body) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-train"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "a"},
    }
    kubernetes_validate.validate(client.ApiClient().sanitize_for_serialization(body), "1.31", strict=True)
    # the list call asked the API server to leave out finished pods
    (listing,) = api.calls_to("list_pod_for_all_namespaces")
    assert listing.kwargs["field_selector"] == "status.phase!=Succeeded,status.phase!=Failed"


def test_unschedulable_pod_gets_a_failed_scheduling_event() -> None:
    api = _api([knode("a")], [kpod("huge", gpus=16)])
    result = KubernetesScheduler(api).run_once()
    assert result.bound == []
    (call,) = api.calls_to("create_namespaced_event")
    namespace, event = call.args
    assert namespace == "default" and isinstance(event, client.CoreV1Event)
    assert event.reason == "FailedScheduling" and event.type == "Warning"
    assert event.message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    assert event.involved_object.kind == "Pod" and event.involved_object.name == "huge"
    assert event.source.component == "gpufleet"
    kubernetes_validate.validate(client.ApiClient().sanitize_for_serialization(event), "1.31", strict=True)


def test_gang_binds_all_members_or_none() -> None:
    members = [kpod(f"g-{i}", gpus=8, labels={GROUP: "g"}) for i in range(3)]
    api = _api([knode("a"), knode("b")], members)
    result = KubernetesScheduler(api).run_once()
    assert result.bound == [] and api.calls_to("create_namespaced_binding") == []
    assert len(api.calls_to("create_namespaced_event")) == 3

    api2 = _api([knode("a"), knode("b"), knode("c")], members)
    KubernetesScheduler(api2).run_once()
    bound = {c.args[1].metadata.name: c.args[1].target.name for c in api2.calls_to("create_namespaced_binding")}
    assert sorted(bound) == ["g-0", "g-1", "g-2"] and sorted(bound.values()) == ["a", "b", "c"]


def test_preemption_evicts_victims_and_defers_the_binding() -> None:
    api = _api(
        [knode("a")],
        [kpod("low", gpus=8, node="a", priority=1), kpod("urgent", gpus=8, priority=1000)],
    )
    result = KubernetesScheduler(api).run_once()
    (evict,) = api.calls_to("create_namespaced_pod_eviction")
    name, namespace, body = evict.args
    assert (name, namespace) == ("low", "default") and isinstance(body, client.V1Eviction)
    kubernetes_validate.validate(client.ApiClient().sanitize_for_serialization(body), "1.31", strict=True)
    assert api.calls_to("create_namespaced_binding") == [] and result.evicted == ["default/low"]


def test_dry_run_calls_nothing_that_writes() -> None:
    api = _api([knode("a")], [kpod("p", gpus=1), kpod("q", gpus=99)])
    result = KubernetesScheduler(api).run_once(dry_run=True)
    assert len(result.bound) == 1 and len(result.events) == 1
    assert {c.name for c in api.calls} == {"list_node", "list_pod_for_all_namespaces"}


def test_api_errors_become_backend_errors() -> None:
    from gpufleet.errors import BackendError

    api = _api([knode("a")], [kpod("p", gpus=1)])
    api.fail_with["create_namespaced_binding"] = client.ApiException(status=409, reason="Conflict")
    with pytest.raises(BackendError, match="binding default/p to a failed: 409 Conflict"):
        KubernetesScheduler(api).run_once()


def test_connect_with_a_bad_kubeconfig_is_a_backend_error(tmp_path: Any) -> None:
    from gpufleet.errors import BackendError
    from gpufleet.integrations.kubernetes.scheduler import connect

    cfg = tmp_path / "kubeconfig"
    cfg.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(BackendError, match="cannot load Kubernetes credentials"):
        connect(str(cfg))


def test_a_preempting_gang_binds_no_member_until_its_victims_are_gone() -> None:
    members = [kpod(f"g-{i}", gpus=8, priority=100, labels={GROUP: "g"}) for i in range(2)]
    api = _api([knode("a"), knode("b")], [kpod("low", gpus=8, node="b", priority=1), *members])
    result = KubernetesScheduler(api).run_once()
    assert result.evicted == ["default/low"]
    assert api.calls_to("create_namespaced_binding") == []  # g-0 fits on a now, but binds with g-1 later


def test_run_loops_for_the_cycles_asked() -> None:
    api = _api([knode("a")], [kpod("p", gpus=1)])
    seen: list[int] = []
    KubernetesScheduler(api).run(0.0, cycles=2, dry_run=True, on_cycle=lambda c: seen.append(len(c.bound)))
    assert seen == [1, 1] and len(api.calls_to("list_node")) == 2


def test_live_cycle_binds_where_the_offline_plan_of_the_same_capture_places(tmp_path: Any) -> None:
    """`gpufleet sched run` and `gpufleet sched plan -f` on the same objects: the same engine, the same nodes."""
    from tests.clirun import gpufleet

    nodes = [
        knode(
            f"gpu-{i:03d}",
            labels={"gpufleet.io/leaf-group": f"su{i // 8}", "topology.kubernetes.io/zone": f"z{i % 3}"},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] if i % 5 else None,
            unschedulable=i == 7,
            cpu=("224", "112")[i % 2],
        )
        for i in range(48)
    ]
    running = [kpod(f"run-{i}", gpus=(2, 4)[i % 2], node=f"gpu-{i * 3:03d}", priority=1) for i in range(12)]
    sizes = (1, 1, 2, 4, 8, 1, 2, 8, 4, 1)
    pending = [
        kpod(
            f"p-{i:03d}",
            gpus=sizes[i % len(sizes)],
            cpu=str(4 * sizes[i % len(sizes)]),
            tolerations=[GPU_TOL] if i % 3 else [],
            nodeSelector={"topology.kubernetes.io/zone": f"z{i % 3}"} if i % 4 == 0 else {},
            priority=10 if i % 7 == 0 else 0,
        )
        for i in range(90)
    ]
    gang = [kpod(f"g-{k}", gpus=8, labels={GROUP: "ring"}, tolerations=[GPU_TOL]) for k in range(4)]
    objects = nodes + running + pending + gang
    capture = tmp_path / "capture.json"
    capture.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    live = KubernetesScheduler(_api(nodes, running + pending + gang)).run_once(dry_run=True)
    out = gpufleet("sched", "plan", "-f", str(capture), "--scheduler-name", "gpufleet", "-o", "json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    offline = [(p["pod"], p["node"]) for p in plan["placements"]]
    assert len(live.bound) > 40 and [(p.pod, p.node) for p in live.bound] == offline
    assert sorted(f.pod for f in live.events) == sorted(f["pod"] for f in plan["failures"])


def test_a_cycle_plans_over_node_classes_as_the_reference_engine_does() -> None:
    nodes = [
        knode(f"n{i}", labels={"pool": "train" if i % 3 else "infer", "zone": f"z{i % 2}"}, unschedulable=i == 4)
        for i in range(30)
    ]
    running = [kpod(f"run-{i}", gpus=i % 4 + 1, node=f"n{i}") for i in range(0, 9, 2)]
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    prefer = [{"weight": 5, "preference": {"matchExpressions": [zone]}}]
    pending = [
        kpod("a", gpus=8, nodeSelector={"pool": "train"}),
        kpod("b", gpus=2, nodeSelector={"kubernetes.io/hostname": "n7"}),
        kpod("c", gpus=4, affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefer}}),
        kpod("d", gpus=16),
        *(kpod(f"e{i}", gpus=1) for i in range(5)),
    ]
    ks = KubernetesScheduler(_api(nodes, running + pending))
    snap = ks.snapshot()
    sched, todo, plan = ks.plan(snap)
    assert not sched.reference
    # split once for the cycle by the keys its pods select on; the hostname would make one class per node
    assert sched.state.label_keys == ("pool", "zone")
    assert sched.state.classes.n_active < len(nodes) // 2
    from gpufleet.sched.framework.scheduler import Scheduler

    ref = Scheduler.from_snapshot(snap, reference=True).plan(todo, snap.gangs)
    assert [(p.pod, p.node, p.gpus, p.score) for p in plan.placements] == [
        (p.pod, p.node, p.gpus, p.score) for p in ref.placements
    ]
    assert [(f.pod, f.message) for f in plan.failures] == [(f.pod, f.message) for f in ref.failures]
    assert [f.pod for f in plan.failures] == ["default/d"]
