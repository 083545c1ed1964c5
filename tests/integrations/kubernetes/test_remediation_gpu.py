"""The Kubernetes backend's GPU-scoped drain and cordon ownership, on objects as kubectl prints them (data/gpu_drain,
see its SOURCE.txt) loaded into the official client's models, against the recording API of k8s_api.py (409 for a
stale resourceVersion, 429 while a PodDisruptionBudget allows no disruption, 404 for a gone pod)."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from gpufleet.errors import BackendError
from gpufleet.integrations.kubernetes.remediation import CORDONED_BY, KubernetesBackend
from gpufleet.model.incident import RootCause
from gpufleet.remediate import FileTicketSink, RemediationStore, Remediator
from gpufleet.remediate.config import EvictionSpec
from tests.integrations.kubernetes.k8s_api import DATA, RecordingCoreV1, RecordingOwners, load, serialised
from tests.remediate.helpers import incident, policy

FIXTURES = DATA / "gpu_drain"
K8S = "1.31.0"
NODE = "dgx-004"
# what dgx-004's agent reports (MetricSnapshot.held): two GPUs per pod
HELD = {
    0: "ml/train-worker-0",
    1: "ml/train-worker-0",
    2: "serve/serve-7c9d8b6f5-x2kqp",
    3: "serve/serve-7c9d8b6f5-x2kqp",
    4: "inference/embed-0",
    5: "inference/embed-0",
    6: "research/notebook-alice",
    7: "research/notebook-alice",
}
EVERY_POD = {
    "ml/train-worker-0",
    "serve/serve-7c9d8b6f5-x2kqp",
    "inference/embed-0",
    "research/notebook-alice",
    "ml/log-shipper-5d4c3b2a1-abcde",
    "gpu-operator/nvidia-dcgm-exporter-7xk2p",
}


def _cluster(disruptions_allowed: int = 0) -> tuple[RecordingCoreV1, RecordingOwners]:
    pdbs = load(FIXTURES / "pdbs.json", "V1PodDisruptionBudgetList").items
    for pdb in pdbs:
        pdb.status.disruptions_allowed = disruptions_allowed
    api = RecordingCoreV1(
        load(FIXTURES / "nodes.json", "V1NodeList").items, load(FIXTURES / "pods.json", "V1PodList").items, pdbs=pdbs
    )
    owners = RecordingOwners([load(FIXTURES / "replicaset.json", "V1ReplicaSet"), load(FIXTURES / "job.json", "V1Job")])
    return api, owners


def _backend(
    api: RecordingCoreV1,
    owners: RecordingOwners,
    held: dict[int, str] | None = HELD,
    sleeps: list[float] | None = None,
) -> KubernetesBackend:
    backend = KubernetesBackend(
        api, apps=owners, batch=owners, sleep=(sleeps.append if sleeps is not None else lambda s: None),
        clock=lambda: 1_764_500_000.0,
    )  # fmt: skip
    backend.gpu_holders = lambda node: dict(held) if held is not None and node == NODE else None
    return backend


def test_fixtures_are_objects_the_api_server_would_return() -> None:
    for name in ("nodes.json", "pods.json", "pdbs.json"):
        for item in json.loads((FIXTURES / name).read_text())["items"]:
            kubernetes_validate.validate(item, K8S, strict=True)
    for name in ("replicaset.json", "job.json"):
        kubernetes_validate.validate(json.loads((FIXTURES / name).read_text()), K8S, strict=True)


def test_gpu_drain_evicts_only_the_pod_on_that_gpu_and_names_its_top_owner() -> None:
    api, owners = _cluster()
    detail = _backend(api, owners).drain_gpu(NODE, 1, "ecc-dbe:dgx-004:1: uncorrectable ECC error", EvictionSpec())
    assert [c[1] for c in api.calls if c[0] == "create_namespaced_pod_eviction"] == [("ml", "train-worker-0")]
    assert set(api.pods) == EVERY_POD - {"ml/train-worker-0"}
    # Job -> its CronJob, read through the API
    assert (
        "ml/train-worker-0 (CronJob ml/nightly-finetune)" in detail and "4 other pod(s) kept" in detail
    )  # and the DaemonSet's, never moved
    assert ("Job", "ml", "train") in owners.calls
    assert not api.nodes[NODE].spec.unschedulable  # the runbook's own cordon step cordons, not the GPU drain
    assert api.events[-1].reason == "GpufleetGpuDrain" and api.events[-1].involved_object.name == NODE
    # the body the client sends is a valid policy/v1 Eviction
    body = serialised(api.evictions[0])
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    kubernetes_validate.validate(body, K8S, strict=True)


def test_a_pod_gone_before_its_eviction_counts_as_moved() -> None:
    api, owners = _cluster()
    api.vanishing.add("ml/train-worker-0")  # the Job's pod ended on its own between the list and the eviction
    detail = _backend(api, owners).drain_gpu(NODE, 0, "reason", EvictionSpec())
    assert "evicted ml/train-worker-0" in detail and set(api.pods) == EVERY_POD - {"ml/train-worker-0"}


def test_replicaset_owner_is_read_not_guessed_from_its_name() -> None:
    api, owners = _cluster(disruptions_allowed=1)
    detail = _backend(api, owners).drain_gpu(NODE, 3, "reason", EvictionSpec())
    assert "serve/serve-7c9d8b6f5-x2kqp (Deployment serve/llm-frontend)" in detail  # not "Deployment serve/serve"
    assert ("ReplicaSet", "serve", "serve-7c9d8b6f5") in owners.calls
    assert "serve/serve-7c9d8b6f5-x2kqp" not in api.pods


def test_a_pod_a_disruption_budget_holds_is_retried_with_backoff_then_an_error_until_it_allows() -> None:
    api, owners = _cluster(disruptions_allowed=0)
    sleeps: list[float] = []
    backend = _backend(api, owners, sleeps=sleeps)
    with pytest.raises(BackendError, match="PodDisruptionBudget") as err:
        backend.drain_gpu(NODE, 2, "reason", EvictionSpec())
    assert sleeps == [5.0, 10.0, 20.0, 40.0] and "serve/serve-7c9d8b6f5-x2kqp" in api.pods
    assert "relax the budget" in (err.value.fix or "")
    assert api.events[-1].reason == "GpufleetDrainBlocked"
    api.pdbs[0].status.disruptions_allowed = 1  # another replica became ready
    assert "evicted serve/serve-7c9d8b6f5-x2kqp" in backend.drain_gpu(NODE, 2, "reason", EvictionSpec())
    assert set(api.pods) == EVERY_POD - {"serve/serve-7c9d8b6f5-x2kqp"}


def test_namespace_modes_delete_after_grace_or_leave_and_tell_the_owner() -> None:
    api, owners = _cluster()
    spec = EvictionSpec.model_validate(
        {"namespaces": {"research": "delete", "inference": "leave"}, "deleteGracePeriod": 120}
    )
    backend = _backend(api, owners)
    deleted = backend.drain_gpu(NODE, 6, "Xid 48", spec)
    assert ("delete_namespaced_pod", ("research", "notebook-alice", 120)) in api.calls
    assert "deleted research/notebook-alice (grace 120s)" in deleted and "research/notebook-alice" not in api.pods
    left = backend.drain_gpu(NODE, 4, "Xid 48", spec)
    assert "inference/embed-0" in api.pods and "left inference/embed-0 (StatefulSet inference/embed) running" in left
    told = next(e for e in api.events if e.involved_object.kind == "Pod")
    assert (told.metadata.namespace, told.involved_object.name, told.reason) == (
        "inference",
        "embed-0",
        "GpufleetFaultyGpu",
    )
    assert "GPU 4 of dgx-004" in told.message
    assert not [c for c in api.calls if c[0] == "create_namespaced_pod_eviction"]


def test_without_the_agents_attribution_every_gpu_pod_goes_and_the_rest_stay() -> None:
    api, owners = _cluster(disruptions_allowed=1)
    detail = _backend(api, owners, held=None).drain_gpu(NODE, 5, "reason", EvictionSpec())
    assert set(api.pods) == {"ml/log-shipper-5d4c3b2a1-abcde", "gpu-operator/nvidia-dcgm-exporter-7xk2p"}
    assert "has not said which pod holds which GPU" in detail


def test_a_gpu_no_pod_holds_whole_takes_the_gpu_pods_the_agent_placed_nowhere() -> None:
    api, owners = _cluster()
    shared = {**HELD, 6: "", 7: ""}  # the notebook's GPUs shared (time-slicing): the agent names no one holder
    detail = _backend(api, owners, held=shared).drain_gpu(NODE, 7, "reason", EvictionSpec())
    assert set(api.pods) == EVERY_POD - {"research/notebook-alice"}
    assert "no one pod holds GPU 7 whole" in detail
    free = {**HELD, 6: "", 7: ""}
    api2, owners2 = _cluster()
    del api2.pods["research/notebook-alice"]
    assert "no pods to move" in _backend(api2, owners2, held=free).drain_gpu(NODE, 7, "reason", EvictionSpec())


# --- whose cordon it is ---------------------------------------------------------------------------------------


def _annotation(api: RecordingCoreV1) -> str | None:
    return (api.nodes[NODE].metadata.annotations or {}).get(CORDONED_BY)


def test_an_operators_cordon_survives_a_gpufleet_incident() -> None:
    api, owners = _cluster()
    api.patch_node(NODE, {"spec": {"unschedulable": True}})  # kubectl cordon dgx-004
    backend = _backend(api, owners)
    said = backend.cordon(NODE, "inc-1: uncorrectable ECC error", "inc-1")
    assert "already cordoned by someone else" in said and _annotation(api) is None
    kept = backend.uncordon(NODE, "inc-1")
    assert api.nodes[NODE].spec.unschedulable
    assert kept == f"node {NODE} kept cordoned: cordoned by someone else (no gpufleet annotation)"
    assert not [e for e in api.events if e.reason == "GpufleetUncordon"]


def test_two_incidents_on_one_node_return_it_only_after_both() -> None:
    api, owners = _cluster(disruptions_allowed=1)
    backend = _backend(api, owners)
    backend.cordon(NODE, "inc-1: Xid 48", "inc-1")
    backend.drain(NODE, "inc-2: Xid 79", "inc-2")
    assert _annotation(api) == "inc-1,inc-2" and api.nodes[NODE].spec.unschedulable
    assert backend.uncordon(NODE, "inc-1") == f"node {NODE} kept cordoned: still held by inc-2"
    assert api.nodes[NODE].spec.unschedulable and _annotation(api) == "inc-2"
    assert "inc-2's cordon was the last" in backend.uncordon(NODE, "inc-2")
    assert not api.nodes[NODE].spec.unschedulable and _annotation(api) is None
    # every write carried the version it read
    patches = [c[1][1] for c in api.calls if c[0] == "patch_node"]
    assert all(p["metadata"]["resourceVersion"] for p in patches)


def test_a_concurrent_writer_is_not_lost_the_stale_patch_is_refused_and_redone() -> None:
    api, owners = _cluster()
    backend = _backend(api, owners)
    backend.cordon(NODE, "inc-1: Xid 48", "inc-1")
    # another control-plane step adds its incident between our read and our patch
    api.racing.append({"metadata": {"annotations": {CORDONED_BY: "inc-1,inc-7"}}})
    backend.cordon(NODE, "inc-2: Xid 94", "inc-2")
    assert _annotation(api) == "inc-1,inc-7,inc-2"
    assert [c[0] for c in api.calls].count("patch_node") == 3  # one refused with 409, then redone


def test_a_person_may_return_any_node() -> None:
    api, owners = _cluster()
    backend = _backend(api, owners)
    backend.cordon(NODE, "inc-1: Xid 48", "inc-1")
    said = backend.uncordon(NODE, None)
    assert said == f"node {NODE} uncordoned by a person; cleared gpufleet's cordon for inc-1"
    assert not api.nodes[NODE].spec.unschedulable and _annotation(api) is None


def test_the_runbook_drains_one_gpu_and_plan_says_why(tmp_path: Path) -> None:
    api, owners = _cluster()
    backend = _backend(api, owners)
    pol = policy(rateLimits={}, budget={"cluster": "100%"})
    rem = Remediator(backend, RemediationStore(tmp_path / "r.db"), pol, tickets=FileTicketSink(tmp_path / "t"))
    inc = incident(RootCause.ecc_dbe, NODE, gpu=0, xid=48, ident="inc-48")
    plan = {s.step: s.reason for s in rem.plan(inc).steps}
    assert (
        "drain GPU 0 of dgx-004 only: the fault is on GPU 0 and runbook ecc-dbe takes no node-wide step"
        in plan["drain"]
    )
    report = rem.apply(inc)
    steps = {s.step: s for s in report.steps}
    assert steps["cordon"].decision == "done" and _annotation(api) == "inc-48"
    assert (
        steps["drain"].decision == "done" and "ml/train-worker-0 (CronJob ml/nightly-finetune)" in steps["drain"].reason
    )
    assert set(api.pods) == EVERY_POD - {"ml/train-worker-0"}
