"""HTTP API and dashboard over the control plane: thin routers (`routes/`) parse, call the service, and answer in
typed shapes (`schemas.py`). Who may call what is decided in front of them (`security.Guard`): reads are open on
loopback, changes need an operator token, agent pushes an agent token."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpufleet import __version__
from gpufleet.control.service import ControlPlane
from gpufleet.errors import AuthError, GpufleetError, NotFoundError, UserError
from gpufleet.model.wire import MAX_BODY
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes import actions, cost, fabric, fleet, incidents, ingest, meta, records, scheduler, stream
from gpufleet.server.routes.common import BadParameter
from gpufleet.server.routes.meta import HealthCheck
from gpufleet.server.security import Guard
from gpufleet.server.telemetry import Measured, RequestMetrics
from gpufleet.state.tokens import TokenStore

__all__ = ["HealthCheck", "create_app"]

log = logging.getLogger("gpufleet.server")

BODY_LIMIT = 1024 * 1024  # every request but an agent's batch

DESCRIPTION = """The gpufleet control plane: what agents reported about every node, GPU and link, the incidents
correlated from it, and the actions taken. Reads are open from the control plane's own host; from anywhere else they
need a viewer token. Changes need an operator token, agent pushes an agent token
(`gpufleet token create --role ...`), sent as `Authorization: Bearer <token>`."""


def create_app(
    plane: ControlPlane, checks: list[HealthCheck] | None = None, *, tokens: TokenStore | None = None
) -> FastAPI:
    app = FastAPI(
        title="gpufleet",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # served from bundled assets by routes/meta.py
        redoc_url=None,
    )
    tokens = tokens or TokenStore(plane.db)
    requests = RequestMetrics()

    def audit(who: str, action: str, target: str, result: str, request: str) -> None:
        plane.audit(who, action, target, result, request)

    app.add_middleware(Guard, tokens=tokens, audit=audit, body_limit=BODY_LIMIT, ingest_limit=MAX_BODY)
    app.add_middleware(Measured, metrics=requests)  # outermost: refusals are counted too

    @app.exception_handler(GpufleetError)
    async def _errors(request: Request, exc: GpufleetError) -> JSONResponse:
        status = 500
        if isinstance(exc, AuthError):
            status = 401
        elif isinstance(exc, NotFoundError):
            status = 404
        elif isinstance(exc, BadParameter):
            status = 422
        elif isinstance(exc, UserError):
            status = 400
        else:
            log.warning("%s %s: %s", request.method, request.url.path, exc.message)
        return JSONResponse({"error": exc.message, "fix": exc.fix}, status_code=status)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"error": f"internal error: {type(exc).__name__}", "fix": "see the control plane's log; please report it"},
            status_code=500,
        )

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(
            {"error": f"invalid request: {where}: {first.get('msg')}", "fix": "see the API schema at /docs"},
            status_code=422,
        )

    cache = ReadCache()
    for module in (fleet, incidents, actions, records, scheduler, fabric, cost):
        app.include_router(module.router(plane, cache))
    for plain in (ingest, stream):
        app.include_router(plain.router(plane))
    app.include_router(meta.router(plane, list(checks or []), requests))
    meta.mount_pages(app)
    return app
