"""What the views name: a stalled job's cause is the incident whose effect is that job, not an earlier one that only
mentions it."""

from __future__ import annotations

from gpufleet.control import views
from gpufleet.sim.faults import InjectedFault
from gpufleet.sim.runner import run_headless
from gpufleet.spec.scenario_spec import FaultType
from tests.twins import door, small_twin


def test_a_stalled_jobs_cause_is_the_incident_that_hung_it() -> None:
    twin = small_twin(
        faults=[
            InjectedFault(0, FaultType.thermal_runaway, 60.0, node="n-000", gpu=2),
            InjectedFault(1, FaultType.gpu_off_bus, 420.0, node="n-001", gpu=5),
        ]
    )
    plane, fleet = door(twin)
    run_headless(twin, fleet, plane.ingest, plane.tick, 900)
    (job,) = views.job_rows(plane)  # type: ignore[arg-type]
    assert job["state"] == "Stalled"
    assert "gpu-lost on gpu/n-001/5" in job["cause"]
