"""Remediation: runbooks as data, a policy engine with safety limits, an audit log, and backends to act through.

from gpufleet.remediate import Remediator, RemediationStore
rem = Remediator(backend, RemediationStore(db), tickets=FileTicketSink(dir))
report = rem.apply(incident)          # or rem.plan(incident), rem.apply(incident, dry_run=True)
"""

from __future__ import annotations

from gpufleet.remediate.backends.base import DiagResult, NodeLocation, RemediationBackend, UnsupportedActionError
from gpufleet.remediate.config import RemediationPolicy, load_policy
from gpufleet.remediate.engine import Remediator, RunReport, StepDecision
from gpufleet.remediate.incident_io import incident_from_dict, incident_to_dict, load_incidents
from gpufleet.remediate.runbook import ActionKind, RunbookManifest, RunbookSet, load_runbooks
from gpufleet.remediate.store import RemediationStore
from gpufleet.remediate.tickets import FileTicketSink, Ticket, TicketSink, WebhookTicketSink
from gpufleet.spec.loader import register_kind

register_kind("Runbook", RunbookManifest)
register_kind("RemediationPolicy", RemediationPolicy)

__all__ = [
    "ActionKind",
    "DiagResult",
    "FileTicketSink",
    "NodeLocation",
    "RemediationBackend",
    "RemediationPolicy",
    "RemediationStore",
    "Remediator",
    "RunReport",
    "RunbookManifest",
    "RunbookSet",
    "StepDecision",
    "Ticket",
    "TicketSink",
    "UnsupportedActionError",
    "WebhookTicketSink",
    "incident_from_dict",
    "incident_to_dict",
    "load_incidents",
    "load_policy",
    "load_runbooks",
]
