"""The twin's clocks: chrony-like readings within tens of microseconds, a skewed node through the door is a
clock-skew incident on its job, an unsynchronised one an incident of its own, and a healthy fleet is neither."""

from __future__ import annotations

from typing import Any

from gpufleet.model import RootCause
from gpufleet.sim.clock import TwinClocks
from gpufleet.sim.runner import run_headless
from tests.twins import door, small_twin


def _clock_incidents(seconds: float, change: Any = None) -> list[dict[str, Any]]:
    twin = small_twin(nodes=3, job_nodes=2)
    plane, fleet = door(twin)
    if change is not None:
        change(fleet.clocks)  # type: ignore[attr-defined]
    run_headless(twin, fleet, plane.ingest, plane.tick, seconds)  # type: ignore[attr-defined, arg-type]
    return [i for i in plane.incidents() if i["cause"].startswith("clock-")]  # type: ignore[attr-defined]


def test_readings_are_those_of_a_synchronised_lan_node() -> None:
    clocks = TwinClocks(seed=1)
    facts = [clocks.fact(f"n-{i:03d}", 1000.0, i) for i in range(64)]
    assert all(f.source == "chrony" and f.synchronised and f.leap == "Normal" for f in facts)
    assert all(abs(f.offset_s or 0.0) < 0.0005 for f in facts)
    assert max(f.offset_s or 0.0 for f in facts) > 0.0 > min(f.offset_s or 0.0 for f in facts)
    assert clocks.fact("n-000", 1000.0, 0) == TwinClocks(seed=1).fact("n-000", 1000.0, 0)  # the seed's


def test_a_healthy_fleet_has_no_clock_incident() -> None:
    assert _clock_incidents(120.0) == []


def test_a_node_four_milliseconds_off_is_its_jobs_clock_skew() -> None:
    found = _clock_incidents(120.0, lambda clocks: clocks.skew("n-001", 0.004))
    assert [i["cause"] for i in found] == [RootCause.clock_skew.value]
    assert "job" in found[0]["summary"] and "n-001" in found[0]["summary"]


def test_an_unsynchronised_node_is_its_own_incident() -> None:
    found = _clock_incidents(120.0, lambda clocks: clocks.unsync("n-002"))
    assert [i["cause"] for i in found] == [RootCause.clock_unsynchronised.value]
    assert "n-002" in found[0]["summary"]
