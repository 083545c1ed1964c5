"""The engine on the twin: each runbook does what it says to the twin, guards hold, reruns do nothing new."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.model.incident import RootCause, Severity
from gpufleet.model.observation import EntityKind
from gpufleet.model.workload import JobState
from gpufleet.remediate import FileTicketSink, RunReport
from gpufleet.sim.faults import InjectedFault
from gpufleet.spec.scenario_spec import FaultType
from tests.remediate.helpers import incident, policy, remediator
from tests.twins import small_twin


def off_bus(ident: int, at: float, node: str, gpu: int) -> InjectedFault:
    return InjectedFault(ident, FaultType.gpu_off_bus, at, node=node, gpu=gpu)


def _decisions(report: RunReport) -> dict[str, str]:
    return {s.step: s.decision for s in report.steps}


def test_row_remap_failure_cordons_drains_and_files_rma_with_serial(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=2)
    rem = remediator(twin, tmp_path)
    inc = incident(RootCause.row_remap_failure, "n-001", gpu=5, action="CONTACT_SUPPORT", xid=64)
    report = rem.apply(inc)
    assert _decisions(report) == {"cordon": "done", "drain": "done", "rma": "done"}
    assert twin.cluster.node("n-001").unschedulable
    assert twin.cluster.job("job").state is JobState.failed  # its ranks were evicted
    [ticket] = FileTicketSink(tmp_path / "tickets").tickets()
    assert ticket.kind == "rma" and ticket.xid == 64 and ticket.gpu == 5
    assert ticket.serial == twin.cluster.node("n-001").gpus[5].serial  # from the inventory when the incident has none
    assert any(a.startswith("drain:") for a in ticket.actions_taken)


def test_xid48_resets_the_gpu_so_its_row_remap_takes_effect_and_returns_it(tmp_path: Path) -> None:
    """NVIDIA's remedy for a double-bit error, the same for Xid 48 and the ECC counter: drain, reset (the pending row
    remap takes effect), re-test, back to service."""
    dbe = InjectedFault(1, FaultType.ecc_dbe, 2.0, node="n-001", gpu=5)
    twin = small_twin(nodes=4, job_nodes=0, faults=[dbe])
    rem = remediator(twin, tmp_path)
    twin.run(3)
    k = twin.gpu("n-001", 5)
    assert twin.gpus.ecc_dbe_vol[k] == 1 and twin.gpus.remap_pending[k]
    for inc in (
        incident(RootCause.ecc_dbe, "n-001", gpu=5, action="WORKFLOW_XID_48", xid=48, ident="xid48"),
        incident(RootCause.ecc_dbe, "n-001", gpu=5, action="WORKFLOW_XID_48", ident="counter"),
    ):
        report = rem.apply(inc)
        assert report.runbook == "ecc-dbe"
        twin.run(31)  # past the default spacing between drains
    assert _decisions(report) == {
        "cordon": "done", "drain": "done", "reset": "done", "diag": "passed", "uncordon": "done", "rma": "skipped",
    }  # fmt: skip
    assert not twin.gpus.remap_pending[k] and twin.gpus.ecc_dbe_vol[k] == 0
    assert not twin.cluster.node("n-001").unschedulable
    assert FileTicketSink(tmp_path / "tickets").tickets() == []


def test_xid48_on_a_gpu_whose_remap_failed_goes_back(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    twin.gpus.remap_failure[twin.gpu("n-002", 1)] = True
    report = rem.apply(incident(RootCause.ecc_dbe, "n-002", gpu=1, action="WORKFLOW_XID_48", xid=48, serial="s-2"))
    d = _decisions(report)
    assert d["reset"] == "done" and d["diag"] == "failed" and d["uncordon"] == "skipped" and d["rma"] == "done"
    assert twin.cluster.node("n-002").unschedulable
    [ticket] = FileTicketSink(tmp_path / "tickets").tickets()
    assert ticket.kind == "rma" and ticket.serial == "s-2"


def test_rerun_does_nothing_new(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    inc = incident(RootCause.row_remap_failure, "n-002", action="CONTACT_SUPPORT", xid=64, serial="1650123456789")
    rem.apply(inc)
    audit_before = len(rem.store.audit_entries())
    twin.uncordon("n-002")  # someone fixed it by hand; running the runbook again must not cordon it again
    again = rem.apply(inc)
    assert {s.decision for s in again.steps} == {"done-earlier"}
    assert len(rem.store.audit_entries()) == audit_before
    assert not twin.cluster.node("n-002").unschedulable
    tickets = FileTicketSink(tmp_path / "tickets").tickets()
    assert len(tickets) == 1 and tickets[0].serial == "1650123456789"


def test_gpu_lost_reboots_waits_and_uncordons_only_after_diag_passes(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0, faults=[off_bus(1, 2.0, "n-000", 3)])
    rem = remediator(twin, tmp_path)
    twin.run(3)
    assert not twin.gpus.alive[twin.gpu("n-000", 3)]
    inc = incident(RootCause.gpu_lost, "n-000", gpu=3, xid=79)
    first = rem.apply(inc)
    assert _decisions(first) == {"drain": "done", "reboot": "done", "diag": "waiting"}
    assert not rem.resume()[0].complete  # still rebooting: no diag yet, node stays out
    assert twin.cluster.node("n-000").unschedulable
    twin.run(400)  # the reboot finishes
    [done] = rem.resume()
    assert _decisions(done)["diag"] == "passed" and _decisions(done)["uncordon"] == "done"
    assert _decisions(done)["rma"] == "skipped"
    assert not twin.cluster.node("n-000").unschedulable
    assert rem.resume() == []


def test_failed_diag_keeps_node_out_and_files_rma(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    twin.gpus.remap_failure[twin.gpu("n-001", 2)] = True  # survives a reboot: the board is bad
    inc = incident(RootCause.gpu_lost, "n-001", gpu=2, xid=79)
    rem.apply(inc)
    twin.run(400)
    [report] = rem.resume()
    d = _decisions(report)
    assert d["diag"] == "failed" and d["uncordon"] == "skipped" and d["rma"] == "done"
    assert twin.cluster.node("n-001").unschedulable
    assert "row remap failure" in next(s.reason for s in report.steps if s.step == "diag")


def test_xid154_takes_the_announced_action(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    twin.gpus.wedged[twin.gpu("n-000", 1)] = True
    reset = rem.apply(incident(RootCause.recovery_action, "n-000", gpu=1, action="RESET_GPU", xid=154))
    d = _decisions(reset)
    assert d["reset"] == "done" and d["reboot"] == "skipped" and d["diag"] == "passed" and d["uncordon"] == "done"
    assert not twin.gpus.wedged[twin.gpu("n-000", 1)]
    twin.run(31)  # past the default 30 s spacing between drains
    reboot = rem.apply(incident(RootCause.recovery_action, "n-001", gpu=0, action="NODE_REBOOT", xid=154))
    d = _decisions(reboot)
    assert d["reset"] == "skipped" and d["reboot"] == "done" and d["diag"] == "waiting"
    assert twin.node_state["n-001"].rebooting_until > 0


def test_thermal_caps_power_then_tickets(tmp_path: Path) -> None:
    twin = small_twin(nodes=2, job_nodes=0)
    rem = remediator(twin, tmp_path)
    rem.apply(incident(RootCause.thermal, "n-001", gpu=4, severity=Severity.warning))
    k = twin.gpu("n-001", 4)
    assert twin.gpus.power_limit_w[k] == round(0.8 * twin.gpus.tdp_w[k])
    assert [t.kind for t in FileTicketSink(tmp_path / "tickets").tickets()] == ["repair"]


def test_bad_cable_isolates_the_flapping_port(tmp_path: Path) -> None:
    flap = InjectedFault(1, FaultType.link_flap, 5.0, node="n-000", rail=3)
    twin = small_twin(nodes=2, job_nodes=0, faults=[flap])
    rem = remediator(twin, tmp_path)
    port = twin.port_of("n-000", 3)
    twin.run(200)
    downs = int(twin.ports.counters["link_downed"][port])
    assert downs >= 2  # it flapped
    report = rem.apply(incident(RootCause.ib_link_flap, "n-000", gpu=3, kind=EntityKind.port, name="mlx5_3"))
    assert _decisions(report) == {"isolate": "done", "repair": "done"}
    twin.run(300)
    assert not twin.ports.up[port] and twin.ports.up[twin.port_of("n-000", 2)]
    assert int(twin.ports.counters["link_downed"][port]) <= downs + 1  # isolated: no more flapping


def test_nccl_hang_requeues_the_job_without_the_bad_node(tmp_path: Path) -> None:
    # A GPU falls off the bus under a rank: the job hangs (no restart controller here to rescue it).
    twin = small_twin(nodes=4, job_nodes=2, restart=None, faults=[off_bus(1, 5.0, "n-001", 0)])
    rem = remediator(twin, tmp_path)
    twin.run(60)
    job = twin.cluster.job("job")
    assert job.state is JobState.hung and job.step == 0
    report = rem.apply(incident(RootCause.nccl_hang, "n-001", gpu=None, kind=EntityKind.job, name="job"))
    assert _decisions(report) == {"cordon": "done", "requeue": "done", "repair": "done"}
    assert "n-001" not in job.nodes and len(job.nodes) == 2 and job.state is JobState.running
    assert "n-001" in job.excluded_nodes
    twin.run(120)
    assert job.state is JobState.running and job.step > 0  # training moves again


def test_idle_gpu_notice_carries_cost_and_kills_nothing(tmp_path: Path) -> None:
    twin = small_twin(nodes=2, job_nodes=1)
    twin.cost_per_gpu_hour = {"h100-sxm": 2.5}
    rem = remediator(twin, tmp_path)

    rem.apply(incident(RootCause.idle_gpu, "n-000", gpu=None, kind=EntityKind.node, severity=Severity.info))
    [notice] = FileTicketSink(tmp_path / "tickets").tickets()
    assert notice.kind == "notice" and "$20.00/h" in notice.message  # 8 GPUs x $2.50
    assert twin.cluster.job("job").state is JobState.running
    assert not twin.cluster.node("n-000").unschedulable


def test_plan_writes_nothing(tmp_path: Path) -> None:
    twin = small_twin(nodes=4, job_nodes=0)
    rem = remediator(twin, tmp_path)
    report = rem.plan(incident(RootCause.gpu_lost, "n-000", gpu=0))
    assert [s.decision for s in report.steps] == ["would"] * 5
    assert "only if diag passed" in report.steps[3].reason
    assert rem.store.audit_entries() == [] and not twin.cluster.node("n-000").unschedulable


def test_incident_json_round_trip(tmp_path: Path) -> None:
    from gpufleet.remediate import incident_to_dict, load_incidents

    inc = incident(RootCause.gpu_xid, "n-000", gpu=2, action="WORKFLOW_XID_48", xid=48, serial="s1")
    path = tmp_path / "inc.json"
    path.write_text(json.dumps(incident_to_dict(inc)))
    [back] = load_incidents(path)
    assert back == inc


def test_process_is_one_turn_of_the_main_loop(tmp_path: Path) -> None:
    """Detectors hand over their open incidents every turn; remediation acts once per step and picks up paused runs."""
    twin = small_twin(nodes=6, job_nodes=0, faults=[off_bus(1, 2.0, "n-001", 5)])
    rem = remediator(twin, tmp_path, policy(budget={"cluster": "50%"}))
    twin.run(5)
    lost = incident(RootCause.gpu_lost, "n-001", gpu=5, xid=79)
    remap = incident(RootCause.row_remap_failure, "n-004", gpu=1, action="CONTACT_SUPPORT", xid=64)
    first = rem.process([lost])
    assert [s.decision for s in first[0].steps] == ["done", "done", "waiting"]
    twin.run(31)
    second = {r.incident: r for r in rem.process([remap])}  # the detector no longer lists the lost GPU
    assert [s.decision for s in second[remap.id].steps] == ["done", "done", "done"]
    assert second[lost.id].steps[-1].decision == "waiting"  # still rebooting
    twin.run(300)
    third = {r.incident: r for r in rem.process([remap])}
    assert {s.decision for s in third[remap.id].steps} == {"done-earlier"}
    assert [s.decision for s in third[lost.id].steps][2:4] == ["passed", "done"]
    assert rem.process([]) == []


def test_a_spacing_longer_than_an_hour_holds_for_all_of_it(tmp_path: Path) -> None:
    twin = small_twin(nodes=6, job_nodes=0)
    rem = remediator(twin, tmp_path, policy(rateLimits={"drain": {"minInterval": "2h"}}, budget={"cluster": "100%"}))
    first = incident(RootCause.row_remap_failure, "n-001", gpu=1, action="CONTACT_SUPPORT", xid=64, ident="a")
    assert {s.step: s.decision for s in rem.apply(first).steps}["drain"] == "done"
    twin.time += 90 * 60.0  # past the hour, inside the two hours
    second = incident(RootCause.row_remap_failure, "n-002", gpu=1, action="CONTACT_SUPPORT", xid=64, ident="b")
    held = {s.step: s for s in rem.apply(second).steps}["drain"]
    assert held.decision == "deferred" and "spacing is 2h" in held.reason
    twin.time += 31 * 60.0
    assert {s.step: s.decision for s in rem.apply(second).steps}["drain"] == "done"


def test_a_retried_old_incident_does_not_count_its_node_failing_again(tmp_path: Path) -> None:
    twin = small_twin(nodes=6, job_nodes=0)
    pol = policy(breaker={"threshold": 2, "minFailures": 2, "window": "10m"}, rateLimits={}, budget={"cluster": "100%"})
    rem = remediator(twin, tmp_path, pol)
    old = incident(RootCause.row_remap_failure, "n-001", gpu=1, action="CONTACT_SUPPORT", xid=64, ident="old")
    rem.apply(old)
    twin.time += 3600.0  # its failure is an hour old: outside the window
    new = incident(RootCause.row_remap_failure, "n-002", gpu=1, action="CONTACT_SUPPORT", xid=64, ident="new")
    assert rem.apply(new).breaker == "closed"
    assert rem.apply(old).breaker == "closed"  # a later pass over the old one: still one node failing
    assert rem.breaker_status()["failing_nodes_in_window"] == 1
