"""The Kubernetes backend with the official client's models, against a recording API double that stands in only for
the network (tests/integrations/kubernetes/k8s_api.py): it keeps nodes and pods as real V1 models, applies patches to
them, and answers evictions the way the API server does (201, 404 for a gone pod, 429 while a PodDisruptionBudget
forbids it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

kube = pytest.importorskip("kubernetes.client")
from gpufleet.errors import BackendError  # noqa: E402
from gpufleet.integrations.kubernetes.remediation import CONDITION, KubernetesBackend  # noqa: E402
from gpufleet.model.incident import RootCause  # noqa: E402
from gpufleet.model.observation import EntityKind  # noqa: E402
from gpufleet.remediate import FileTicketSink, RemediationStore, Remediator, UnsupportedActionError  # noqa: E402
from gpufleet.remediate.backends.base import (  # noqa: E402
    CapsPower,
    IsolatesPorts,
    RebootsNodes,
    ResetsGpus,
    RunsDiagnostics,
)
from tests.integrations.kubernetes.k8s_api import RecordingCoreV1  # noqa: E402
from tests.remediate.helpers import incident, policy  # noqa: E402


def _node(name: str, leaf: str) -> Any:
    return kube.V1Node(
        metadata=kube.V1ObjectMeta(
            name=name, labels={"gpufleet.io/leaf": leaf, "gpufleet.io/rack": f"rack-{leaf}",
                               "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        spec=kube.V1NodeSpec(unschedulable=False),
        status=kube.V1NodeStatus(
            conditions=[kube.V1NodeCondition(type="Ready", status="True")], capacity={"nvidia.com/gpu": "8"}
        ),
    )  # fmt: skip


def _pod(
    name: str, node: str, *, ns: str = "ml", owner: str = "Job", job: str | None = None, mirror: bool = False
) -> Any:
    return kube.V1Pod(
        metadata=kube.V1ObjectMeta(
            name=name,
            namespace=ns,
            labels={"job-name": job} if job else {},
            annotations={"kubernetes.io/config.mirror": "x"} if mirror else {},
            owner_references=[kube.V1OwnerReference(api_version="v1", kind=owner, name="o", uid="u")],
        ),
        spec=kube.V1PodSpec(node_name=node, containers=[kube.V1Container(name="c")]),
        status=kube.V1PodStatus(phase="Running"),
    )


def _backend(api: RecordingCoreV1, sleeps: list[float] | None = None) -> KubernetesBackend:
    return KubernetesBackend(api, sleep=(sleeps.append if sleeps is not None else lambda s: None), clock=lambda: 1000.0)


def _cluster(pdb: dict[str, int] | None = None) -> RecordingCoreV1:
    nodes = [_node(f"gpu-{i}", "leaf-a" if i < 2 else "leaf-b") for i in range(4)]
    pods = [
        _pod("train-0", "gpu-1", job="train"),
        _pod("train-1", "gpu-2", job="train"),
        _pod("serve-0", "gpu-1", owner="ReplicaSet"),
        _pod("dcgm-exporter-x", "gpu-1", ns="gpu-operator", owner="DaemonSet"),
        _pod("kube-proxy-gpu-1", "gpu-1", ns="kube-system", owner="Node", mirror=True),
    ]
    return RecordingCoreV1(nodes, pods, pdb)


def test_cordon_sets_unschedulable_condition_and_event() -> None:
    api = _cluster()
    backend = _backend(api)
    backend.cordon("gpu-0", "Xid 48 double-bit ECC", "inc-1")
    assert api.nodes["gpu-0"].spec.unschedulable is True
    cond = next(c for c in api.nodes["gpu-0"].status.conditions if c.type == CONDITION)
    assert cond.status == "True" and "Xid 48" in cond.message
    assert api.events[-1].reason == "GpufleetCordon" and api.events[-1].involved_object.name == "gpu-0"
    assert backend.unavailable() == {"gpu-0"}
    backend.uncordon("gpu-0", "inc-1")
    assert not api.nodes["gpu-0"].spec.unschedulable and backend.unavailable() == set()


def test_drain_evicts_through_the_eviction_api_and_skips_daemonsets_and_static_pods() -> None:
    api = _cluster()
    detail = _backend(api).drain("gpu-1", "GPU fell off the bus", "inc-1")
    evictions = [c[1] for c in api.calls if c[0] == "create_namespaced_pod_eviction"]
    assert sorted(evictions) == [("ml", "serve-0"), ("ml", "train-0")]
    assert "gpu-operator/dcgm-exporter-x" in api.pods and "kube-system/kube-proxy-gpu-1" in api.pods
    assert api.nodes["gpu-1"].spec.unschedulable and "ml/train-0" in detail


def test_drain_retries_pdb_429_with_backoff() -> None:
    api = _cluster(pdb={"ml/serve-0": 2})
    sleeps: list[float] = []
    _backend(api, sleeps).drain("gpu-1", "reason", "inc-1")
    assert "ml/serve-0" not in api.pods
    assert sleeps == [5.0, 10.0]
    tries = [c for c in api.calls if c == ("create_namespaced_pod_eviction", ("ml", "serve-0"))]
    assert len(tries) == 3


def test_drain_blocked_by_pdb_is_an_error_and_the_runbook_retries(tmp_path: Path) -> None:
    api = _cluster(pdb={"ml/serve-0": 100})
    pol = policy(rateLimits={}, budget={"cluster": "50%"})
    rem = Remediator(_backend(api), RemediationStore(tmp_path / "r.db"), pol, tickets=FileTicketSink(tmp_path / "t"))
    # on the node, not one GPU: a whole-node drain (GPU-scoped: test_remediation_gpu.py)
    inc = incident(RootCause.row_remap_failure, "gpu-1", gpu=None, kind=EntityKind.node, action="CONTACT_SUPPORT")
    first = rem.apply(inc)
    assert [s.decision for s in first.steps] == ["done", "error"]
    assert "PodDisruptionBudget" in first.steps[1].reason
    assert any(e.reason == "GpufleetDrainBlocked" for e in api.events)
    api.pdb_refusals["ml/serve-0"] = 0  # the budget allows it now
    second = rem.apply(inc)
    assert [s.decision for s in second.steps] == ["done-earlier", "done", "done"]
    assert "ml/serve-0" not in api.pods


def test_requeue_evicts_the_jobs_pods_from_the_bad_node() -> None:
    api = _cluster()
    _backend(api).requeue_job("train", ["gpu-2"])
    assert "ml/train-1" not in api.pods and "ml/train-0" in api.pods


def test_placement_and_gpu_facts_from_labels() -> None:
    backend = _backend(_cluster())
    assert backend.placement()["gpu-3"].leaf == "leaf-b"
    assert backend.gpu_count("gpu-0") == 8 and backend.gpu_model("gpu-0") == "NVIDIA-H100-80GB-HBM3"


def test_node_local_actions_are_unsupported() -> None:
    api = _cluster()
    backend = _backend(api)
    # the API reaches no GPU, BMC or port: the backend lacks those capabilities
    assert not isinstance(backend, ResetsGpus | RebootsNodes | RunsDiagnostics | CapsPower | IsolatesPorts)
    refusal = backend.cannot("reset GPU 1", "gpu-0", "reset it on the node")
    assert isinstance(refusal, UnsupportedActionError) and "cannot reset GPU 1 on gpu-0" in refusal.message
    assert api.events[-1].reason == "GpufleetActionUnsupported"


def test_bad_cable_runbook_stops_at_unsupported_isolation(tmp_path: Path) -> None:
    api = _cluster()
    rem = Remediator(_backend(api), RemediationStore(tmp_path / "r.db"), tickets=FileTicketSink(tmp_path / "t"))
    report = rem.apply(incident(RootCause.ib_symbol_errors, "gpu-0", gpu=3, kind=EntityKind.port))
    assert [s.decision for s in report.steps] == ["unsupported"]


def test_api_errors_become_backend_errors() -> None:
    with pytest.raises(BackendError, match="404"):
        _backend(_cluster()).node_ready("missing")


def test_missing_client_is_a_friendly_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gpufleet.errors import DependencyMissingError

    monkeypatch.setitem(sys.modules, "kubernetes.client", None)
    with pytest.raises(DependencyMissingError, match="official Python client") as err:
        KubernetesBackend(object())
    assert "gpufleet[k8s]" in (err.value.fix or "")
