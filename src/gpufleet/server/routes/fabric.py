"""The fabric, shaped after UFM's REST resources: systems, ports, links, alarms, events and telemetry, from the
polls of the agent that watches each subnet; and port isolation (disable the switch port that faces a bad
cable), audited like every action."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response

from gpufleet.control import fabric as views
from gpufleet.control.fabric import parse_end
from gpufleet.control.service import ControlPlane
from gpufleet.errors import NotFoundError
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.actions import ERRORS  # the answers an action may get
from gpufleet.server.routes.common import BadParameter, actor, described


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1/fabric", tags=["fabric"])
    service = plane.fabric

    @api.get("/subnets", response_model=schemas.FabricSubnets)
    def summary() -> Response:
        """Per subnet: when it was last polled, what it holds, its subnet manager, and its findings by severity.
        (`GET /api/v1/fabric` is the HCA ports as the nodes' agents report them.)"""
        return cache.answer("fabric/subnets", lambda: views.summary(service))

    @api.get("/topology", response_model=schemas.FabricTopology, responses={404: {"model": schemas.Problem}})
    def topology() -> Response:
        """The fabric as schedulers take it (tiers, each leaf's hosts, each host's home leaf and NVLink domain), kept
        current from the polls, and where the nodes' topology labels stand; `gpufleet fabric export --server` writes
        every export format from it."""
        return cache.answer("fabric/topology", lambda: views.topology(service))

    @api.get("/systems", response_model=list[schemas.FabricSystem])
    def systems() -> Response:
        """Switches and HCAs as discovered (UFM's `resources/systems`)."""
        return cache.answer("fabric/systems", lambda: views.systems(service))

    @api.get("/links", response_model=list[schemas.FabricLinkRow])
    def links() -> Response:
        """Every cable with its width, speed, state, worst finding and error rate; expected cables that are down
        are listed with their ports' state (UFM's `resources/links`)."""
        return cache.answer("fabric/links", lambda: views.links(service))

    @api.get("/ports", response_model=list[schemas.FabricPortRow])
    def ports(errors: bool = Query(False, description="Only ports whose error counters are not zero.")) -> Response:
        """Every port with its state, peer, counters and rates; `name` is ours, `ufm_name` is UFM's
        `<guid>_<port>` (UFM's `resources/ports`)."""
        return cache.answer(f"fabric/ports?{errors}", lambda: views.ports(service, errors_only=errors))

    @api.get("/alarms", response_model=list[schemas.FabricAlarm])
    def alarms() -> Response:
        """What is wrong now, worst first, each naming the cable or port, with its fix (UFM's `app/alarms`)."""
        return cache.answer("fabric/alarms", lambda: views.alarms(service))

    @api.get("/events", response_model=list[schemas.FabricEventRow])
    def events(limit: int = Query(200, ge=1, le=2000)) -> Response:
        """What happened, newest first: links down and up, subnet-manager sweeps and changes, poll errors."""
        return cache.answer(f"fabric/events?{limit}", lambda: views.events(service, limit))

    @api.get("/telemetry", response_model=schemas.FabricTelemetry)
    def telemetry(port: str = Query(..., description="SWITCH/PORT or HOST/HCA/PORT, e.g. leaf1/35")) -> Response:
        """A port's counters over time, and those of the port at the other end of its cable."""
        end = parse_end(port)
        if end is None:
            raise BadParameter(f"{port!r} is not a port", fix="name it as SWITCH/PORT or HOST/HCA/PORT, e.g. leaf1/35")
        if service.locate(end) is None:
            raise NotFoundError(f"no port {port} in the fabric", fix="list them with GET /api/v1/fabric/ports")
        return cache.answer(f"fabric/telemetry?{end}", lambda: views.telemetry(service, end))

    @api.get("/isolated_ports", response_model=list[schemas.IsolatedPort])
    def isolated_ports() -> list[dict[str, Any]]:
        """Switch ports isolation took out of service, and when."""
        with service.lock:
            return [{"port": str(end), "since": t} for end, t in sorted(service.isolated.items())]

    def port_action(verb: str, name: str, request: Request, body: schemas.ActionRequest | None) -> dict[str, Any]:
        body = body or schemas.ActionRequest()
        try:
            result = plane.port_action(
                actor(request), verb, name, body.reason, dry_run=body.dryRun,
                request=described(request, body.model_dump()),
            )  # fmt: skip
        finally:
            cache.clear()
        return {"target": f"port/{name}", "action": verb, "result": result, "dry_run": body.dryRun}

    @api.post("/ports/{name:path}/isolate", response_model=schemas.ActionResult, responses=ERRORS)
    def isolate(name: str, request: Request, body: schemas.ActionRequest | None = Body(None)) -> dict[str, Any]:
        """Disable the switch port facing this port or cable (`ibportstate LID PORT disable`, UFM's isolation)."""
        return port_action("isolate", name, request, body)

    @api.post("/ports/{name:path}/restore", response_model=schemas.ActionResult, responses=ERRORS)
    def restore(name: str, request: Request, body: schemas.ActionRequest | None = Body(None)) -> dict[str, Any]:
        """Enable an isolated switch port again."""
        return port_action("restore", name, request, body)

    return api
