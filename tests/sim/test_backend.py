"""The twin's remediation backend end to end: a fault injected on one GPU of a node running four workloads travels
the door (agents -> control plane -> incident -> runbook) and the drain stops exactly the work on that GPU; a fault
that needs a reboot drains the node; cordons are held per incident and an operator's cordon is never undone."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model import InferenceService
from gpufleet.model.incident import RootCause
from gpufleet.remediate.config import EvictionSpec
from gpufleet.sim.backend import TwinBackend
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.spec.scenario_spec import FaultType
from tests.remediate.helpers import incident, policy, remediator
from tests.twins import door

NODE = "n-001"
SERVICES = {"s0": (0, 1), "s1": (2, 3), "s2": (4, 5), "s3": (6, 7)}  # four workloads of two GPUs each on n-001


def _twin(faults: list[InjectedFault] | None = None) -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": 3, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}],
            "fabric": {"leafRadix": 16},
        }
    )
    services = [InferenceService(name, NODE, gpus) for name, gpus in SERVICES.items()]
    return Twin(build_cluster("t", body), seed=1, services=services, faults=faults, restart_backoff_s=None)


def _serving(twin: Twin) -> set[str]:
    return {st.service.name for st in twin.services}


def _through_the_door(twin: Twin, seconds: float) -> object:
    plane, fleet = door(twin, remediation="on")
    run_headless(twin, fleet, plane.ingest, plane.tick, seconds)  # type: ignore[attr-defined]
    return plane


def test_an_ecc_dbe_on_one_gpu_evicts_exactly_the_work_on_it() -> None:
    twin = _twin([InjectedFault(1, FaultType.ecc_dbe, 5.0, node=NODE, gpu=3)])
    plane = _through_the_door(twin, 90)
    assert _serving(twin) == {"s0", "s2", "s3"}  # s1 held GPUs 2 and 3
    entries = plane.store.audit_log.entries()  # type: ignore[attr-defined]
    drain = next(e for e in entries if e.action == "drain" and e.decision == "done")
    assert f"GPU 3 of {NODE}: stopped inference/s1-0 (StatefulSet inference/s1)" in drain.reason


def test_a_gpu_off_the_bus_reboots_so_the_whole_node_is_drained() -> None:
    twin = _twin([InjectedFault(1, FaultType.gpu_off_bus, 5.0, node=NODE, gpu=3)])
    _through_the_door(twin, 90)
    assert _serving(twin) == set()


def test_leave_keeps_the_pod_and_says_so() -> None:
    twin = _twin()
    detail = TwinBackend(twin).drain_gpu(NODE, 5, "Xid 48", EvictionSpec(namespaces={"inference": "leave"}))
    assert _serving(twin) == set(SERVICES) and "left inference/s2-0 running" in detail


def test_an_operators_cordon_survives_a_gpufleet_incident(tmp_path: Path) -> None:
    twin = _twin()
    twin.cordon(NODE)  # the operator's, outside gpufleet
    rem = remediator(twin, tmp_path, policy(rateLimits={}, budget={"cluster": "100%"}))
    report = rem.apply(incident(RootCause.ecc_dbe, NODE, gpu=3, xid=48, ident="inc-1"))
    steps = {s.step: s for s in report.steps}
    assert "already cordoned by someone else" in steps["cordon"].reason
    assert steps["diag"].decision == "passed" and steps["uncordon"].decision == "done"
    assert steps["uncordon"].reason == f"node {NODE} kept cordoned: cordoned by someone else (no gpufleet annotation)"
    assert twin.cluster.node(NODE).unschedulable and _serving(twin) == {"s0", "s2", "s3"}


def test_two_incidents_on_one_node_return_it_only_after_both(tmp_path: Path) -> None:
    twin = _twin()
    rem = remediator(twin, tmp_path, policy(rateLimits={}, budget={"cluster": "100%"}))
    lost = incident(RootCause.gpu_lost, NODE, gpu=6, xid=79, ident="inc-79")
    reboot = incident(RootCause.gpu_xid, NODE, gpu=2, xid=62, action="RESTART_BM", ident="inc-62")
    for inc in (lost, reboot):  # both drain the node and reboot it, then wait for it
        assert [s.decision for s in rem.apply(inc).steps][-1] == "waiting"
    assert twin.cordon_holders(NODE) == ("inc-79", "inc-62")
    twin.run(400)  # the reboot ends
    first = {s.step: s for s in rem.apply(lost).steps}
    assert first["uncordon"].reason == f"node {NODE} kept cordoned: still held by inc-62"
    assert twin.cluster.node(NODE).unschedulable
    second = {s.step: s for s in rem.apply(reboot).steps}
    assert "inc-62's cordon was the last" in second["uncordon"].reason
    assert not twin.cluster.node(NODE).unschedulable and twin.cordon_holders(NODE) == ()


def test_a_person_returns_the_node_whoever_holds_it_and_the_journal_replays_holders() -> None:
    twin = _twin()
    backend = TwinBackend(twin)
    backend.cordon(NODE, "inc-1: Xid 48", "inc-1")
    assert backend.uncordon(NODE, None) == f"node {NODE} uncordoned by a person; cleared gpufleet's cordon for inc-1"
    assert not twin.cluster.node(NODE).unschedulable
