"""The Kubernetes scheduler view on objects as the API returns them (data/SOURCE.txt): unschedulable pods with
kube-scheduler's latest words, GPUs and MIG instances counted by the API server's rules, Kueue's ClusterQueues
through LocalQueues and its pending Workloads, one queue per namespace without Kueue, and objects that cannot be
read skipped with the reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.queue import KubeObjects, KubernetesQueueReader, scheduler_report
from gpufleet.sched.framework.snapshot import parse_time
from tests.conftest import require_tool

DATA = Path(__file__).parent / "data"
NOW = parse_time("2026-11-20T08:10:00Z", "now") or 0.0
LATEST = (
    "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
    "are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."
)


def items(name: str) -> list[Any]:
    return list(json.loads((DATA / name).read_text())["items"])


def kueue() -> KubeObjects:
    return KubeObjects(
        pods=items("pods.json"),
        events=items("events.json"),
        cluster_queues=items("clusterqueues.json"),
        local_queues=items("localqueues.json"),
        workloads=items("workloads.json"),
    )


def test_with_kueue_pods_and_workloads_wait_in_cluster_queues() -> None:
    report, skipped = scheduler_report(kueue(), NOW)
    assert report.manager == "kubernetes" and report.time == NOW
    pending = {p.name: p for p in report.pending}
    assert sorted(pending) == ["infer-mig-0", "job-pretrain-7b-3c1f2", "train-0"]  # gated-0: its Workload stands
    train = pending["train-0"]
    assert (train.queue, train.namespace, train.gpus, train.priority) == ("team-a", "ml", 8, 1000)
    assert train.reason == "Unschedulable" and train.message == LATEST  # the latest event about this pod's uid
    assert train.since == parse_time("2026-11-20T08:00:00Z", "t")
    mig = pending["infer-mig-0"]
    assert mig.gpus == 2 and mig.queue == ""  # two containers' MIG instances; the init container's runs first
    assert mig.message.startswith("0/4 nodes are available: 4 Insufficient nvidia.com/mig-1g.10gb.")  # no event
    wl = pending["job-pretrain-7b-3c1f2"]
    assert (wl.queue, wl.namespace, wl.gpus, wl.reason, wl.priority) == ("research", "research", 16, "Pending", 100)
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed" in wl.message
    queues = {q.name: q for q in report.queues}
    assert sorted(queues) == ["research", "team-a"]  # cpu-batch covers no GPU
    a = queues["team-a"]
    assert (a.quota, a.borrowing_limit, a.gpus_used, a.gpus_pending, a.pending, a.running) == (24, 8, 20, 8, 2, 3)
    r = queues["research"]  # whole GPUs only: its MIG quota is not added in; no borrowing limit in a cohort
    assert (r.quota, r.borrowing_limit, r.gpus_used, r.gpus_pending, r.pending, r.running) == (8, None, 8, 16, 1, 1)
    assert skipped == [
        'pod ml/bad-0.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": must be an integer'
    ]


def test_without_kueue_one_queue_per_namespace_and_no_quota() -> None:
    report, _ = scheduler_report(KubeObjects(pods=items("pods.json"), events=items("events.json")), NOW)
    assert [(p.name, p.queue, p.gpus, p.reason) for p in report.pending] == [
        ("train-0", "ml", 8, "Unschedulable"),
        ("infer-mig-0", "ml", 2, "Unschedulable"),
        ("gated-0", "research", 2, "SchedulingGated"),
    ]  # cpu-0 asks for no GPU and waits in no queue; new-0 has not been looked at yet
    ml, research = report.queues
    assert (ml.name, ml.quota, ml.gpus_used, ml.running, ml.gpus_pending, ml.pending) == ("ml", None, 4, 1, 10, 2)
    assert (research.name, research.gpus_pending, research.pending) == ("research", 2, 1)


def test_an_events_k8s_io_event_is_read_too() -> None:
    (pod,) = [p for p in items("pods.json") if p["metadata"]["name"] == "train-0"]
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "reason": "FailedScheduling",
        "note": "0/4 nodes: new words",
        "regarding": {"kind": "Pod", "name": "train-0", "namespace": "ml", "uid": pod["metadata"]["uid"]},
        "eventTime": "2026-11-20T08:09:30.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-11-20T08:09:50Z"},
    }
    report, _ = scheduler_report(KubeObjects(pods=[pod], events=[*items("events.json"), event]), NOW)
    assert report.pending[0].message == "0/4 nodes: new words"


def test_bad_and_partial_objects_are_skipped_with_a_reason() -> None:
    (good,) = [p for p in items("pods.json") if p["metadata"]["name"] == "train-0"]
    no_spec = {"metadata": {"name": "x", "namespace": "ml"}, "status": {"phase": "Pending"}}
    objs = KubeObjects(
        pods=[
            None,
            "pod",
            {"metadata": {}},
            {"metadata": {"name": "y"}, "spec": {"containers": "main"}},
            no_spec,
            good,
        ],
        events=[None, {"reason": "FailedScheduling"}, {"reason": "FailedScheduling", "involvedObject": "x"}],
        cluster_queues=[
            {
                "metadata": {"name": "q"},
                "spec": {
                    "resourceGroups": [
                        {"flavors": [{"resources": [{"name": "nvidia.com/gpu", "nominalQuota": "lots"}]}]}
                    ]
                },
            },
            {"spec": {}},
            {"metadata": {"name": "empty"}},
        ],
        local_queues=[{"metadata": {"name": "lq", "namespace": "ml"}}, 7],
        workloads=[{"metadata": {"name": "w", "namespace": "ml"}, "spec": {"podSets": [{"count": "two"}]}}],
    )
    report, skipped = scheduler_report(objs, NOW)
    assert [p.name for p in report.pending] == ["train-0"]  # and no traceback
    assert report.queues == []  # "empty" covers no GPU
    assert skipped == [
        "LocalQueue ml/lq: no spec.clusterQueue",
        "LocalQueue #1: not an object but int",
        "ClusterQueue q: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: 'lots' is not a Kubernetes "
        "quantity",
        "ClusterQueue #1: no metadata.name",
        "pod #0: not an object but NoneType",
        "pod #1: not an object but str",
        "pod #2: no metadata.name",
        "pod y: malformed (AttributeError: 'str' object has no attribute 'get')",
        "Workload ml/w: malformed (ValueError: invalid literal for int() with base 10: 'two')",
    ]


def test_a_pod_made_by_kubectl_with_a_status_as_kube_scheduler_writes_it(tmp_path: Path) -> None:
    require_tool("kubectl")
    cfg = tmp_path / "kubeconfig"  # kubectl's offline dry run still wants a kubeconfig to exist
    cfg.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {token: unused}}]\n"
    )
    env = {**os.environ, "KUBECONFIG": str(cfg)}

    def kubectl(*args: str, stdin: str | None = None) -> Any:
        out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True, env=env)
        return json.loads(out.stdout)

    job = kubectl(
        "create", "job", "pretrain", "--image=nvcr.io/nvidia/pytorch:24.05-py3", "--dry-run=client", "-o", "json"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pretrain-0", "namespace": "ml"},
        "spec": job["spec"]["template"]["spec"],
    }
    pod = kubectl(
        "set",
        "resources",
        "-f",
        "-",
        "--local",
        "--limits=nvidia.com/gpu=8,cpu=16",
        "-o",
        "json",
        stdin=json.dumps(pod),
    )
    pod = kubectl(
        "label", "-f", "-", "--local", "kueue.x-k8s.io/queue-name=team-a", "-o", "json", stdin=json.dumps(pod)
    )
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": "2026-11-20T08:00:00Z",
            }
        ],
    }
    objs = KubeObjects(pods=[pod], cluster_queues=items("clusterqueues.json"), local_queues=items("localqueues.json"))
    report, skipped = scheduler_report(objs, NOW)
    (work,) = report.pending
    assert (work.name, work.queue, work.gpus, work.message, skipped) == ("pretrain-0", "team-a", 8, message, [])
    assert {q.name: q.gpus_pending for q in report.queues}["team-a"] == 8


# --- the reader, on a stand-in for the official client ------------------------------------------------------------


class Raw:
    """What the client returns with _preload_content=False: the response, its body in `data`."""

    def __init__(self, doc: Any) -> None:
        self.data = json.dumps(doc).encode()


class ApiException(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Core:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.selectors: list[str] = []

    def list_pod_for_all_namespaces(self, **kw: Any) -> Raw:
        if self.fail:
            raise ApiException(403, "Forbidden")
        self.selectors.append(kw["field_selector"])
        return Raw({"items": items("pods.json")})

    def list_event_for_all_namespaces(self, **kw: Any) -> Raw:
        self.selectors.append(kw["field_selector"])
        return Raw({"items": items("events.json")})


class Custom:
    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.asked: list[str] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any:
        self.asked.append(f"{group}/{version}/{plural}")
        if self.status is not None:
            raise ApiException(self.status, "Not Found" if self.status == 404 else "Forbidden")
        return json.loads((DATA / f"{plural}.json").read_text())


def test_the_reader_lists_through_the_client_and_reads_kueue_when_installed() -> None:
    core, custom = Core(), Custom()
    report = KubernetesQueueReader(core, custom, clock=lambda: NOW).read()
    assert core.selectors == ["status.phase!=Succeeded,status.phase!=Failed", "reason=FailedScheduling"]
    assert custom.asked == [f"kueue.x-k8s.io/v1beta1/{p}" for p in ("clusterqueues", "localqueues", "workloads")]
    assert {q.name for q in report.queues} == {"team-a", "research"} and len(report.pending) == 3


def test_without_kueue_or_without_leave_to_read_it_the_reader_goes_per_namespace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    report = KubernetesQueueReader(Core(), Custom(404), clock=lambda: NOW).read()
    assert {q.name for q in report.queues} == {"ml", "research"}
    caplog.clear()
    reader = KubernetesQueueReader(Core(), Custom(403), clock=lambda: NOW)
    with caplog.at_level("WARNING", logger="gpufleet.agent"):
        reader.read()
        reader.read()
    said = [r.message for r in caplog.records]
    assert said.count("kubernetes scheduler view: cannot list Kueue clusterqueues: 403 Forbidden") == 1
    assert sum("skipped pod ml/bad-0" in m for m in said) == 1  # once, not on every read


def test_a_refused_pod_list_is_a_backend_error_that_says_what_to_check() -> None:
    with pytest.raises(BackendError, match="listing pods failed: 403 Forbidden") as err:
        KubernetesQueueReader(Core(fail=True), None).read()
    assert "list pods and events" in (err.value.fix or "")
