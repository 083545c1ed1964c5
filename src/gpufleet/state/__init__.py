"""Durable control-plane state: one database for incidents, events, agent streams, inventory, audit and
remediation, shared by every part of the control plane."""

from gpufleet.state.audit import AuditEntry, AuditLog
from gpufleet.state.db import DB_NAME, Database, open_state
from gpufleet.state.incidents import IncidentTable

__all__ = ["DB_NAME", "AuditEntry", "AuditLog", "Database", "IncidentTable", "open_state"]
