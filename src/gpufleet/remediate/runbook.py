"""Runbooks as data: which steps answer which root cause, each step with its guards.

A runbook matches incidents on their root cause, and optionally on the NVIDIA action term the incident carries
(WORKFLOW_XID_48, RESET_GPU, ...), on the Xid code and on the incident's severity. The most specific match wins, so
the runbook for a GPU Xid that needs a reset beats the generic `gpu-xid` one, and a non-fatal report (one the Xid
policy rates NONFATAL, filed below critical) can keep a runbook that leaves the GPU in service.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from gpufleet.errors import ManifestError, NotFoundError
from gpufleet.model.actions import Service
from gpufleet.model.incident import Incident, RootCause, Severity
from gpufleet.model.observation import EntityKind
from gpufleet.spec.base import Manifest, Metadata, read_yaml_documents, validate_as


class ActionKind(StrEnum):
    cordon = "cordon"
    uncordon = "uncordon"
    drain = "drain"
    reset_gpu = "reset-gpu"
    reboot_node = "reboot-node"
    diag = "diag"
    power_cap = "power-cap"
    isolate_port = "isolate-port"
    requeue_job = "requeue-job"
    restart_service = "restart-service"
    ticket = "ticket"
    notify = "notify"


# Actions that take a node out of service: they count against the unavailability budget.
TAKES_NODE_OUT = frozenset({ActionKind.cordon, ActionKind.drain, ActionKind.reboot_node})
# Actions that only tell people: allowed while the circuit breaker is tripped, so humans still hear about faults.
INFORMS_ONLY = frozenset({ActionKind.ticket, ActionKind.notify})


class Guard(Manifest):
    """Every condition set here must hold for the step to run; a step whose guard is false is skipped."""

    step_passed: str | None = Field(None, description="run only if this earlier step ran and passed (a diag)")
    step_failed: str | None = Field(None, description="run only if this earlier step ran and failed")
    incident_action: list[str] = Field(default_factory=list, description="run only for these announced actions")
    entity_kind: list[EntityKind] = Field(default_factory=list, description="run only for incidents on these")
    node_ready: bool = Field(False, description="wait (pause the runbook) until the node is back up")


class Step(Manifest):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    action: ActionKind
    when: Guard = Field(default_factory=Guard)
    reason: str = ""
    level: int | None = Field(None, ge=1, le=4, description="diag level")
    power_fraction: float | None = Field(None, gt=0.3, le=1.0, description="power cap as a fraction of TDP")
    service: Service | None = Field(None, description="restart-service: the daemon to restart")
    ticket_kind: Literal["rma", "repair", "notice"] | None = None
    on_failure: Literal["stop", "continue"] = "stop"

    @model_validator(mode="after")
    def _params_fit_action(self) -> Step:
        if self.action is ActionKind.diag and self.level is None:
            raise ValueError(f"step {self.id!r}: a diag step needs `level`")
        if self.action is ActionKind.power_cap and self.power_fraction is None:
            raise ValueError(f"step {self.id!r}: a power-cap step needs `powerFraction`")
        if self.action is ActionKind.restart_service and self.service is None:
            raise ValueError(f"step {self.id!r}: a restart-service step needs `service`")
        if self.action is ActionKind.ticket and self.ticket_kind is None:
            raise ValueError(f"step {self.id!r}: a ticket step needs `ticketKind` (rma, repair or notice)")
        return self


class Match(Manifest):
    causes: list[RootCause] = Field(min_length=1)
    actions: list[str] = Field(default_factory=list, description="incident action terms; empty matches any")
    xids: list[int] = Field(default_factory=list, description="Xid codes; empty matches any")
    severities: list[Severity] = Field(default_factory=list, description="incident severities; empty matches any")

    def matches(self, incident: Incident) -> bool:
        if incident.cause not in self.causes:
            return False
        if self.actions and incident.action.upper() not in {a.upper() for a in self.actions}:
            return False
        if self.severities and incident.severity not in self.severities:
            return False
        return not (self.xids and incident.xid not in self.xids)

    @property
    def specificity(self) -> int:
        return 1 + bool(self.actions) + bool(self.xids) + bool(self.severities)


class RunbookBody(Manifest):
    description: str
    match: Match
    steps: list[Step] = Field(min_length=1)

    @model_validator(mode="after")
    def _guards_point_back(self) -> RunbookBody:
        seen: set[str] = set()
        for step in self.steps:
            if step.id in seen:
                raise ValueError(f"step id {step.id!r} appears twice")
            for ref in (step.when.step_passed, step.when.step_failed):
                if ref is not None and ref not in seen:
                    raise ValueError(f"step {step.id!r} guards on {ref!r}, which is not an earlier step")
            seen.add(step.id)
        return self


class RunbookManifest(Manifest):
    api_version: Literal["gpufleet.io/v1"] = "gpufleet.io/v1"
    kind: Literal["Runbook"] = "Runbook"
    metadata: Metadata
    spec: RunbookBody

    @property
    def name(self) -> str:
        return self.metadata.name


class RunbookSet:
    """The runbooks in force: the built-in ones, plus any loaded from files (same name replaces)."""

    def __init__(self, runbooks: list[RunbookManifest]) -> None:
        self.by_name = {rb.name: rb for rb in runbooks}

    @classmethod
    def builtin(cls) -> RunbookSet:
        ref = resources.files("gpufleet.remediate") / "data" / "runbooks.yaml"
        with resources.as_file(ref) as path:
            return cls(load_runbooks(path))

    def extend(self, runbooks: list[RunbookManifest]) -> None:
        self.by_name.update({rb.name: rb for rb in runbooks})

    def __iter__(self) -> Iterator[RunbookManifest]:
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)

    def select(self, incident: Incident) -> RunbookManifest:
        found = [rb for rb in self.by_name.values() if rb.spec.match.matches(incident)]
        if not found:
            raise NotFoundError(
                f"no runbook matches cause {incident.cause.value!r} with action {incident.action!r}",
                fix="list runbooks with `gpufleet remediate runbooks`, or add one with kind: Runbook",
            )
        return max(found, key=lambda rb: (rb.spec.match.specificity, rb.name))


def load_runbooks(path: Path) -> list[RunbookManifest]:
    docs = read_yaml_documents(Path(path))
    out = []
    for doc in docs:
        if doc.get("kind") != "Runbook":
            raise ManifestError(str(path), f"expected kind: Runbook, got {doc.get('kind')!r}")
        out.append(validate_as(str(path), RunbookManifest, doc))
    return out
