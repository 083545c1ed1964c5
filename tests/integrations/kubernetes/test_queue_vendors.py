"""The Kubernetes scheduler view counts every vendor's accelerators: AMD GPUs and partitions, Gaudi devices, and
Kueue ClusterQueues whose quota names several vendors' resources."""

from __future__ import annotations

from typing import Any

from gpufleet.integrations.kubernetes.queue import KubeObjects, gpus_of, is_gpu, scheduler_report
from gpufleet.sched.framework.snapshot import parse_time

NOW = parse_time("2026-11-20T08:10:00Z", "now") or 0.0


def waiting(name: str, limits: dict[str, str], queue: str = "") -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}", "labels": labels,
                     "creationTimestamp": "2026-11-20T08:00:00Z"},
        "spec": {"containers": [{"name": "main", "image": "rocm/pytorch", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "Unschedulable", "message": "0/6 nodes are available.",
                   "lastTransitionTime": "2026-11-20T08:01:00Z"}]},
    }  # fmt: skip


def cluster_queue(name: str, resources: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """resources: name -> (nominal quota, in use), in one flavor."""
    return {
        "metadata": {"name": name},
        "spec": {"cohort": "all", "resourceGroups": [{"coveredResources": list(resources), "flavors": [
            {"name": "default", "resources": [{"name": r, "nominalQuota": str(q), "borrowingLimit": "0"}
                                              for r, (q, _) in resources.items()]}]}]},
        "status": {"flavorsUsage": [{"name": "default", "resources": [{"name": r, "total": str(u)}
                                                                      for r, (_, u) in resources.items()]}],
                   "pendingWorkloads": 1, "admittedWorkloads": 2},
    }  # fmt: skip


def test_every_vendors_devices_count_as_gpus() -> None:
    assert all(is_gpu(r) for r in ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi", "amd.com/cpx_nps4",
                                   "nvidia.com/mig-1g.10gb"))  # fmt: skip
    assert not any(is_gpu(r) for r in ("nvidia.com/gpu.shared", "cpu", "amd.com/xilinx_u250", "example.com/gpu"))
    spec = {"containers": [{"name": "a", "resources": {"limits": {"amd.com/gpu": "2", "cpu": "4"}}},
                           {"name": "b", "resources": {"limits": {"habana.ai/gaudi": "1"}}}]}  # fmt: skip
    assert gpus_of(spec, "pod x") == 3


def test_pending_amd_and_gaudi_pods_and_quota_over_vendors() -> None:
    pods = [
        waiting("rocm-0", {"amd.com/gpu": "8"}, "rocm"),
        waiting("infer-0", {"amd.com/cpx_nps4": "1"}, "parts"),
        waiting("gaudi-0", {"habana.ai/gaudi": "4"}, "rocm"),
    ]
    local = [{"metadata": {"name": q, "namespace": "ml"}, "spec": {"clusterQueue": q}} for q in ("rocm", "parts")]
    queues = [
        # whole devices of two vendors are added together: 8 + 16 GPUs of quota
        cluster_queue("rocm", {"nvidia.com/gpu": (8, 8), "amd.com/gpu": (16, 8), "cpu": (64, 10)}),
        # a queue of AMD partitions only is counted in partitions
        cluster_queue("parts", {"amd.com/cpx_nps4": (64, 40)}),
    ]
    objs = KubeObjects(pods=pods, cluster_queues=queues, local_queues=local, workloads=[])
    report, skipped = scheduler_report(objs, NOW)
    assert skipped == []
    assert {(p.name, p.queue, p.gpus) for p in report.pending} == {
        ("rocm-0", "rocm", 8), ("infer-0", "parts", 1), ("gaudi-0", "rocm", 4),
    }  # fmt: skip
    got = {q.name: (q.quota, q.gpus_used, q.gpus_pending) for q in report.queues}
    assert got == {"rocm": (24, 16, 12), "parts": (64, 40, 1)}
