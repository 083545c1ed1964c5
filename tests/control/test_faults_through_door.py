"""Faults on the twin, through the one door (simulated agents detect at the edge, the control plane correlates):
each fault class becomes one incident with its root cause, its effects attached."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.model import EntityKind, Incident, RootCause
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.twin import EPOCH
from gpufleet.spec.scenario_spec import FaultType
from tests.twins import run_door, small_twin


def run(faults: list[InjectedFault], seconds: int, **kw: object) -> tuple[list[Incident], Any]:
    twin = small_twin(faults=faults, **kw)  # type: ignore[arg-type]
    plane, _ = run_door(twin, seconds)
    return list(plane.book.incidents.values()), plane  # type: ignore[attr-defined]


def fault(kind: FaultType, at: float = 30.0, **kw: object) -> InjectedFault:
    return InjectedFault(0, kind, at, **kw)  # type: ignore[arg-type]


def only(incidents: list[Incident]) -> Incident:
    assert len(incidents) == 1, [(i.cause, str(i.entity), i.summary) for i in incidents]
    return incidents[0]


def test_no_fault_no_incident() -> None:
    incidents, _ = run([], 900)
    assert incidents == []


def test_gpu_off_the_bus_its_hang_and_the_stall_are_one_incident() -> None:
    incidents, _ = run([fault(FaultType.gpu_off_bus, node="n-001", gpu=2)], 300)
    inc = only(incidents)
    assert inc.cause is RootCause.gpu_lost
    assert (inc.entity.node, inc.entity.index) == ("n-001", 2)
    assert inc.first_seen - EPOCH == pytest.approx(31, abs=1.5)  # the kernel line, within a tick
    assert any("job job hung" in e for e in inc.effects)
    assert any("fallen off the bus" in ev.text for ev in inc.evidence)


def test_dbe_xid_48_and_63_and_the_counter_are_one_incident() -> None:
    inc = only(run([fault(FaultType.ecc_dbe, node="n-000", gpu=5)], 400)[0])
    assert inc.cause is RootCause.ecc_dbe and inc.xid == 48 and inc.action == "WORKFLOW_XID_48"
    sources = {ev.source for ev in inc.evidence}
    assert {"kmsg", "telemetry"} <= sources  # the Xid lines and the ECC counter; the hang adds its own
    assert any("job job" in e for e in inc.effects)


def test_thermal_runaway_is_thermal_and_its_straggler_joins_it() -> None:
    inc = only(run([fault(FaultType.thermal_runaway, node="n-000", gpu=3)], 900)[0])
    assert inc.cause is RootCause.thermal
    assert any("straggler" in e for e in inc.effects)


def test_power_cap_is_not_an_incident() -> None:
    twin = small_twin()
    twin.set_power_limit("n-000", 0, 350)
    plane, _ = run_door(twin, 600)
    # The capped GPU slows its job: a straggler with no hardware fault behind it, never a thermal incident.
    assert all(i.cause is not RootCause.thermal for i in plane.book.incidents.values())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kind", "kw", "cause", "latest"),
    [
        (FaultType.pcie_degrade, {"node": "n-002", "gpu": 1}, RootCause.pcie, 2),
        (FaultType.nvlink_errors, {"node": "n-002", "gpu": 4}, RootCause.nvlink, 2),
        (FaultType.power_brake, {"node": "n-002", "gpu": 6, "duration": 300.0}, RootCause.power_brake, 5),
        (FaultType.ib_symbol_errors, {"node": "n-002", "rail": 2}, RootCause.ib_symbol_errors, 300),
        (FaultType.link_down, {"node": "n-002", "rail": 5}, RootCause.ib_link_down, 2),
        (FaultType.driver_mismatch, {"node": "n-002"}, RootCause.driver_mismatch, 2),
        (FaultType.xid, {"node": "n-002", "gpu": 0, "code": 31}, RootCause.gpu_xid, 2),
    ],
)
def test_each_fault_class_is_found(kind: FaultType, kw: dict[str, object], cause: RootCause, latest: float) -> None:
    incidents, _ = run([fault(kind, **kw)], 400)
    inc = only(incidents)
    assert inc.cause is cause
    assert inc.first_seen - EPOCH - 30 <= latest


def test_nvlink_fault_names_its_failing_link() -> None:
    """The twin's NVLink fault drives the per-link series as NVML fills them: the finding names the link."""
    injected = fault(FaultType.nvlink_errors, node="n-002", gpu=4)
    injected.id = 7
    incidents, _ = run([injected], 400)
    inc = only(incidents)
    assert inc.cause is RootCause.nvlink
    assert any("errors climb" in e and "link 7" in e for e in injected.effects)  # 7 % 18: the link it hit
    texts = [inc.summary, *(ev.text for ev in inc.evidence)]
    assert any(" link 7" in t and "CRC" in t for t in texts), texts
    assert not any(" link 6 " in t or "link 8 " in t for t in texts)


def test_flap_supersedes_link_down() -> None:
    inc = only(run([fault(FaultType.link_flap, node="n-000", rail=1, duration=400.0)], 400)[0])
    assert inc.cause is RootCause.ib_link_flap and inc.entity.kind is EntityKind.port


def test_nccl_hang_names_the_rank_that_never_arrived() -> None:
    incidents, _ = run([fault(FaultType.nccl_hang, job="job", rank=13)], 300)
    inc = only(incidents)
    assert inc.cause is RootCause.nccl_hang
    assert (inc.entity.node, inc.entity.index) == ("n-001", 5)  # rank 13 = second node, GPU 5
    assert inc.first_seen - EPOCH - 30 <= 120


def test_straggler_rank() -> None:
    inc = only(run([fault(FaultType.straggler, job="job", rank=3, factor=1.6, duration=900.0)], 400)[0])
    assert inc.cause is RootCause.straggler and (inc.entity.node, inc.entity.index) == ("n-000", 3)


def test_idle_gpu_held_by_a_workload() -> None:
    inc = only(run([fault(FaultType.idle_gpu, node="n-002", gpu=7)], 700)[0])
    assert inc.cause is RootCause.idle_gpu and "idle" in inc.summary


def test_repeats_dedupe_and_lifecycle() -> None:
    from gpufleet.errors import UserError
    from gpufleet.model import IncidentState

    twin = small_twin(faults=[fault(FaultType.pcie_degrade, node="n-000", gpu=0)])
    plane, _ = run_door(twin, 400)
    book = plane.book  # type: ignore[attr-defined]
    inc = only(list(book.incidents.values()))
    # the agent confirms the degraded link every 30 s; each confirmation lands on the same incident
    assert inc.count >= 10 and len(inc.evidence) <= 20
    book.transition(inc.id, IncidentState.acknowledged)
    book.transition(inc.id, IncidentState.resolved)
    with pytest.raises(UserError):
        book.transition(inc.id, IncidentState.open)


def test_slow_collectives_from_nccl_compare_become_an_incident() -> None:
    from pathlib import Path

    from gpufleet.nccl.compare import CollectiveFinding

    plane, _ = run_door(small_twin(), 5)
    finding = CollectiveFinding(
        kind="nccl_rail_missing",
        severity="critical",
        message="bus bandwidth about half the expected on 2 nodes",
        host=None,
        nbytes=2**30,
        ratio=0.51,
    )
    (inc_id,) = plane.report_collective([finding], str(Path("run.txt")), "tester")  # type: ignore[attr-defined]
    inc = plane.book.incidents[inc_id]  # type: ignore[attr-defined]
    assert inc.cause is RootCause.collective_slow and inc.entity.name == "run.txt"
    assert "0.51" in inc.evidence[0].text


def test_a_dead_fan_on_an_idle_gpu_is_found_from_its_idle_temperature() -> None:
    inc = only(run([fault(FaultType.thermal_runaway, node="n-002", gpu=4)], 600)[0])  # n-002 runs no job
    assert inc.cause is RootCause.thermal and "cooling fault suspected" in inc.summary
    assert inc.first_seen - EPOCH - 30 <= 420
