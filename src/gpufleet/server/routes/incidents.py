"""Incidents: list with filters and a cursor, detail with evidence, effects and the actions taken, and the changes
people make (acknowledge, mitigate, resolve); findings of slow collectives reported by `nccl compare --report`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response

from gpufleet.control.blast_radius import incident_blast_radius
from gpufleet.control.node_actions import action_row
from gpufleet.control.service import ControlPlane
from gpufleet.model import IncidentState
from gpufleet.model.incident import Severity
from gpufleet.nccl.compare import CollectiveReport
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.common import actor, described

VERBS = {
    "acknowledge": IncidentState.acknowledged,
    "mitigate": IncidentState.mitigated,
    "resolve": IncidentState.resolved,
}
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["incidents"])

    @api.get("/incidents", response_model=list[schemas.IncidentRow])
    def incidents(
        state: Literal["open", "acknowledged", "mitigated", "resolved"] | None = None,
        node: str | None = Query(None, max_length=253),
        severity: Severity | None = None,
        cause: str | None = Query(None, max_length=64, description="A root cause, e.g. gpu-lost or ib-link-down."),
        since: float | None = Query(
            None, description="Only incidents seen after this time (epoch s): pass the newest `last_seen` you hold."
        ),
        limit: int = Query(500, ge=1, le=100_000),
    ) -> Response:
        """Newest first."""
        key = f"incidents/{state}/{node}/{severity}/{cause}/{since}/{limit}"
        return cache.answer(key, lambda: _incidents(state, node, severity, cause, since, limit))

    def _incidents(
        state: str | None, node: str | None, severity: str | None, cause: str | None, since: float | None, limit: int
    ) -> list[dict[str, Any]]:
        filtered = severity is not None or cause is not None or since is not None
        rows = plane.incidents(state, node, 100_000 if filtered else limit)
        if filtered:
            rows = [
                r
                for r in rows
                if (severity is None or r["severity"] == severity)
                and (cause is None or r["cause"] == cause)
                and (since is None or float(r["last_seen"]) > since)
            ][:limit]
        return rows

    @api.get(
        "/incidents/{incident_id}",
        response_model=schemas.IncidentDetail,
        responses={404: {"model": schemas.Problem}},
    )
    def incident(incident_id: str) -> dict[str, Any]:
        """The incident with its evidence, what it caused, and every decision and action taken on it."""
        body = plane.incident(incident_id)
        # a leaf or spine at fault: the hosts under it and the jobs on them
        body["blast_radius"] = incident_blast_radius(plane.fabric, plane.fleet.jobs(), body)
        body["actions"] = [e.as_dict() for e in plane.store.audit_log.entries(incident=incident_id, limit=500)]
        body["actions"] += [
            e.as_dict()
            for e in plane.store.audit_log.entries(limit=500)
            if e.target == f"incident/{incident_id}" and e.incident != incident_id
        ]
        body["actions"].sort(key=lambda a: a["seq"])
        rows = plane.node_actions.table.listed(incident=incident_id)
        body["node_actions"] = [action_row(r) for r in reversed(rows)]
        return body

    @api.post(
        "/incidents/{incident_id}/{verb}",
        response_model=schemas.Transition,
        responses={400: {"model": schemas.Problem}, 404: {"model": schemas.Problem}},
    )
    def transition(
        incident_id: str,
        verb: Literal["acknowledge", "mitigate", "resolve"],
        request: Request,
        note: schemas.Note | None = Body(None),
    ) -> dict[str, Any]:
        """Move an incident on: acknowledge (someone is on it), mitigate, or resolve."""
        try:
            inc = plane.transition(
                incident_id, VERBS[verb], actor(request), described(request, note.model_dump() if note else None)
            )
        finally:
            cache.clear()
        return {"id": inc.id, "state": inc.state.value}

    @api.post("/nccl-findings", response_model=schemas.CollectiveResult, tags=["collectives"])
    def nccl_findings(body: CollectiveReport, request: Request) -> dict[str, Any]:
        """`gpufleet nccl compare --report`: a run slower than the fabric should give becomes an incident."""
        try:
            return {"incidents": plane.report_collective(body.findings, body.source, actor(request))}
        finally:
            cache.clear()

    return api
