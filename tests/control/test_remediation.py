"""The remediation driver's log: a step refused on every pass over paused runbooks is one line a window, with its
reason and how often it repeated since the last line, instead of a bare line on every pass."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.control.remediation import REPEAT_LOG_WINDOW_S, RESUME_EVERY_S, RemediationDriver, RepeatLog
from gpufleet.model.incident import Incident, RootCause, Severity
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.remediate.engine import RunReport, StepDecision

BUDGET = "would leave 3 of 4 nodes of pool 'a' unavailable (max 25%)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Books:
    runs: list[str]

    def breaker(self) -> Any:
        return SimpleNamespace(tripped=False)

    def open_runs(self) -> list[str]:
        return self.runs


@dataclass
class Refusing:
    """A remediator whose budget refuses to cordon the node on every pass."""

    incident: str
    policy: Any = field(default_factory=lambda: SimpleNamespace(spec=SimpleNamespace(dry_run=False)))
    applied: int = 0

    def apply(self, incident: Incident) -> RunReport:
        self.applied += 1
        steps = [
            StepDecision("notify", "notify", "node/dgx-007", "done-earlier", ""),
            StepDecision("cordon", "cordon", "node/dgx-007", "refused", BUDGET),
        ]
        return RunReport(incident.id, incident.cause.value, "gpu-lost", "on", "twin", "closed", steps)

    def books(self) -> Books:
        return Books([self.incident])


def plane_with(incident: Incident) -> Any:
    book = SimpleNamespace(incidents={incident.id: incident}, open_incidents=lambda: [])
    return SimpleNamespace(
        db=None,
        backend=None,
        book=book,
        lock=threading.RLock(),
        store=SimpleNamespace(incidents={}),
        mitigated=lambda _id: None,
    )


def lost_gpu() -> Incident:
    entity = Entity(EntityKind.gpu, node="dgx-007", index=3)
    return Incident(
        id="INC-000042",
        cause=RootCause.gpu_lost,
        entity=entity,
        severity=Severity.critical,
        summary="GPU 3 fell off the bus",
        first_seen=0.0,
        last_seen=0.0,
    )


def test_a_refused_step_is_logged_once_a_window_with_its_reason_and_count(caplog: pytest.LogCaptureFixture) -> None:
    incident = lost_gpu()
    remediator = Refusing(incident.id)
    wall = Clock()
    driver = RemediationDriver(plane_with(incident), "on", remediator, clock=wall)
    caplog.set_level(logging.INFO, logger="gpufleet.remediate")
    passes = 200
    for k in range(passes):  # 200 passes 0.75 s apart (150 s): a twin at 60x meets the refusal that often
        wall.now = 0.75 * k
        driver.run(RESUME_EVERY_S * k)
    assert remediator.applied == passes
    lines = [r.getMessage() for r in caplog.records if "refused cordon node/dgx-007" in r.getMessage()]
    assert len(lines) == 3  # at 0 s, 60 s and 120 s of wall time
    assert all(BUDGET in line and "INC-000042" in line for line in lines)
    assert "more times" not in lines[0]
    assert lines[1].endswith("(79 more times since the last line)")
    assert lines[2].endswith("(79 more times since the last line)")
    assert not any("notify" in line for line in lines)  # done earlier: not said again


def test_repeats_are_kept_per_node_verb_and_reason() -> None:
    wall = Clock()
    said = RepeatLog(clock=wall)
    assert said.admit(("refused", "cordon", "node/a", "budget")) == 0
    assert said.admit(("refused", "cordon", "node/a", "budget")) is None
    assert said.admit(("refused", "cordon", "node/b", "budget")) == 0  # another node
    assert said.admit(("refused", "cordon", "node/a", "breaker tripped")) == 0  # another reason
    assert said.admit(("refused", "drain", "node/a", "budget")) == 0  # another verb
    wall.now = REPEAT_LOG_WINDOW_S
    assert said.admit(("refused", "cordon", "node/a", "budget")) == 1
    assert said.admit(("refused", "cordon", "node/b", "budget")) == 0
