"""The application layer through the one door: the twin's jobs and services export their own series, the twin's
agents read them as a real agent reads a scrape, and the control plane turns each application fault of the
scenario into its incident, on the right job or service, with a hardware fault's slowdown joined to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model import Incident, RootCause
from gpufleet.sim.scenario import build_twin
from gpufleet.sim.twin import EPOCH
from tests.conftest import REPO_ROOT
from tests.twins import run_door

SCENARIO = REPO_ROOT / "src/gpufleet/examples/scenarios/app-layer.yaml"

# (cause, entity, the fault's start in minutes) of every application fault the scenario injects
EXPECTED = [
    (RootCause.loss_plateau, "job/llm-1b", 40),
    (RootCause.loss_divergence, "job/llm-sft", 30),
    (RootCause.gradient_norm, "job/vision-train", 50),
    (RootCause.loss_nonfinite, "job/vision-train", 60),
    (RootCause.checkpoint_failure, "job/llm-pretrain", 70),
    (RootCause.input_starved, "job/code-train", 40),
    (RootCause.slo_latency, "service/chat-api", 30),
    (RootCause.slo_errors, "service/rerank-api", 50),
    (RootCause.service_stale, "service/summarize-api", 70),
]


@pytest.fixture(scope="module")
def incidents() -> list[Incident]:
    twin, duration = build_twin(Path(SCENARIO))
    plane, _ = run_door(twin, duration)
    return sorted(plane.book.incidents.values(), key=lambda i: i.first_seen)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("cause", "entity", "minute"), EXPECTED, ids=[f"{c.value}-{e}" for c, e, _ in EXPECTED])
def test_each_application_fault_opens_its_incident(
    incidents: list[Incident], cause: RootCause, entity: str, minute: int
) -> None:
    found = [i for i in incidents if i.cause is cause and str(i.entity) == entity]
    assert found, f"no {cause.value} incident on {entity}"
    first = (found[0].first_seen - EPOCH) / 60
    assert minute <= first <= minute + 25, f"{cause.value} on {entity} seen at {first:.1f} min"


def test_a_throttled_gpu_carries_the_jobs_slowdown(incidents: list[Incident]) -> None:
    """The hot GPU's incident reads 'job rl-train's samples/s fell N %' beside the straggler it makes."""
    (thermal,) = [i for i in incidents if i.cause is RootCause.thermal and str(i.entity) == "gpu/dgx-006/3"]
    assert any("rl-train's samples/s fell" in e for e in thermal.effects)
    assert not [i for i in incidents if i.cause is RootCause.throughput_drop and "rl-train" in str(i.entity)]


def test_healthy_jobs_and_services_stay_quiet(incidents: list[Incident]) -> None:
    faulted = {e for _, e, _ in EXPECTED} | {"job/moe-train", "job/rl-train", "service/embed-api"}
    app_causes = {c for c, _, _ in EXPECTED} | {RootCause.throughput_drop}
    quiet = [i for i in incidents if i.cause in app_causes and str(i.entity) not in faulted]
    assert not quiet, [f"{i.cause.value} {i.entity}: {i.summary}" for i in quiet]
