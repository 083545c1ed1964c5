"""The durable records: events (what agents reported and what the control plane did) and the audit log."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from gpufleet.control.service import ControlPlane
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.common import BadParameter

# kmsg: kernel-log GPU reports; link: IB port changes; finding: detector findings; incident: incidents opened;
# agent: agents lost; action: people's actions
EVENT_KINDS = ("kmsg", "link", "finding", "incident", "agent", "action")


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["records"])

    @api.get("/events", response_model=list[schemas.EventRow])
    def events(
        kind: str | None = Query(
            None, max_length=200, description=f"One or more of {', '.join(EVENT_KINDS)}, comma-separated."
        ),
        node: str | None = Query(None, max_length=2000, description="One or more nodes, comma-separated."),
        limit: int = Query(100, ge=1, le=10_000),
    ) -> Response:
        """Newest first."""
        if kind:
            unknown = [k for k in kind.split(",") if k not in EVENT_KINDS]
            if unknown:
                raise BadParameter(f"unknown event kind {unknown[0]!r}", fix=f"use one of: {', '.join(EVENT_KINDS)}")
        return cache.answer(f"events/{kind}/{node}/{limit}", lambda: plane.store.events(kind, node, limit))

    @api.get("/audit", response_model=list[schemas.AuditRow])
    def audit(
        limit: int = Query(100, ge=1, le=10_000),
        incident: str | None = Query(None, max_length=64),
        actor: str | None = Query(None, max_length=64, description="A token's name, or `remediation`."),
    ) -> list[dict[str, Any]]:
        """Oldest first; the newest `limit` entries."""
        return [e.as_dict() for e in plane.store.audit_log.entries(incident=incident, limit=limit, actor=actor)]

    return api
