"""Read and write incidents as JSON/YAML (the `--incident FILE` of the CLI, and the copy the store keeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet import yaml_input
from gpufleet.errors import ManifestError
from gpufleet.model.incident import Evidence, Incident, IncidentState, RootCause, Severity
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.spec.base import explain_validation


class _EntityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: EntityKind
    node: str = ""
    index: int | None = None
    name: str = ""
    text: str | None = None  # what the API adds for people (`gpu/n-001/5`); read back and ignored


class _EvidenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time: float
    source: str
    text: str


class IncidentIn(BaseModel):
    """An incident as a file holds it: the fields of gpufleet.model.Incident, nothing else."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    cause: RootCause
    entity: _EntityIn
    severity: Severity
    summary: str = ""
    first_seen: float = 0.0
    last_seen: float | None = None
    state: IncidentState = IncidentState.open
    count: int = 1
    evidence: list[_EvidenceIn] = []
    effects: list[str] = []
    action: str = ""
    xid: int | None = None
    serial: str | None = None
    # what `gpufleet get incidents -o json` adds for people; read back and ignored
    node: str | None = None
    age_s: float | None = None
    last_seen_ago_s: float | None = None
    action_title: str | None = None
    action_steps: list[str] | None = None
    action_reference: str | None = None

    def to_incident(self) -> Incident:
        e = self.entity
        return Incident(
            id=self.id,
            cause=self.cause,
            entity=Entity(e.kind, node=e.node, index=e.index, name=e.name),
            severity=self.severity,
            summary=self.summary or f"{self.cause.value} on {e.node or e.name}",
            first_seen=self.first_seen,
            last_seen=self.last_seen if self.last_seen is not None else self.first_seen,
            state=self.state,
            count=self.count,
            evidence=[Evidence(v.time, v.source, v.text) for v in self.evidence],
            effects=list(self.effects),
            action=self.action,
            xid=self.xid,
            serial=self.serial,
        )


def incident_to_dict(incident: Incident) -> dict[str, Any]:
    e = incident.entity
    return {
        "id": incident.id,
        "cause": incident.cause.value,
        "entity": {"kind": e.kind.value, "node": e.node, "index": e.index, "name": e.name},
        "severity": incident.severity.value,
        "summary": incident.summary,
        "first_seen": incident.first_seen,
        "last_seen": incident.last_seen,
        "state": incident.state.value,
        "count": incident.count,
        "evidence": [{"time": v.time, "source": v.source, "text": v.text} for v in incident.evidence],
        "effects": list(incident.effects),
        "action": incident.action,
        "xid": incident.xid,
        "serial": incident.serial,
    }


def incident_from_dict(data: dict[str, Any], where: str = "incident") -> Incident:
    try:
        return IncidentIn.model_validate(data).to_incident()
    except ValidationError as exc:
        raise explain_validation(where, IncidentIn, exc) from None


def load_incidents(path: Path) -> list[Incident]:
    """One incident (a mapping) or several (a list, or a JSON object with an `incidents` list) from JSON or YAML."""
    path = Path(path)
    data = yaml_input.load_file(path)
    if isinstance(data, dict) and "incidents" in data:
        data = data["incidents"]
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(i, dict) for i in items):
        raise ManifestError(
            str(path), "expected an incident mapping or a list of them", fix="see `gpufleet remediate plan --help`"
        )
    return [incident_from_dict(item, f"{path}[{k}]" if len(items) > 1 else str(path)) for k, item in enumerate(items)]
