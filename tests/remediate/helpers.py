"""Shared pieces of the remediation tests: incidents, and a remediator on a small twin with its own state database."""

from __future__ import annotations

from pathlib import Path

from gpufleet.model.incident import Incident, RootCause, Severity
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.remediate import FileTicketSink, RemediationPolicy, RemediationStore, Remediator
from gpufleet.sim.backend import TwinBackend
from gpufleet.sim.twin import Twin
from gpufleet.state import Database


def incident(
    cause: RootCause,
    node: str,
    *,
    gpu: int | None = 0,
    kind: EntityKind = EntityKind.gpu,
    name: str = "",
    action: str = "",
    xid: int | None = None,
    serial: str | None = None,
    severity: Severity = Severity.critical,
    ident: str | None = None,
    when: float = 0.0,
) -> Incident:
    entity = Entity(kind, node=node, index=gpu if kind in (EntityKind.gpu, EntityKind.port) else None, name=name)
    return Incident(
        id=ident or f"{cause.value}:{node}:{gpu}:{name}",
        cause=cause,
        entity=entity,
        severity=severity,
        summary=f"{cause.value} on {entity}",
        first_seen=when,
        last_seen=when,
        action=action,
        xid=xid,
        serial=serial,
    )


def policy(**spec: object) -> RemediationPolicy:
    return RemediationPolicy.model_validate({"spec": spec})


def remediator(twin: Twin, tmp: Path, pol: RemediationPolicy | None = None, db: Database | None = None) -> Remediator:
    """`db` is the state database to keep its books in (default: a SQLite file in `tmp`)."""
    return Remediator(
        TwinBackend(twin),
        RemediationStore(db if db is not None else tmp / "remediate.db"),
        pol or policy(),
        tickets=FileTicketSink(tmp / "tickets"),
    )
