"""HTTP API and dashboard over the control plane: thin routers (`routes/`) parse, call the service, and answer in
typed shapes (`schemas.py`). Who may call what is decided in front of them (`security.Guard`): reads are open on
loopback, changes need an operator token, agent pushes an agent token."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gpufleet import __version__
from gpufleet.control.service import ControlPlane
from gpufleet.errors import AuthError, ForbiddenError, GpufleetError, NotFoundError, UserError
from gpufleet.model.wire import MAX_BODY
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes import (
    actions,
    cost,
    fabric,
    fleet,
    incidents,
    ingest,
    meta,
    preflight,
    records,
    remediation,
    scheduler,
    stream,
)
from gpufleet.server.routes.common import BadParameter
from gpufleet.server.routes.meta import HealthCheck
from gpufleet.server.security import Guard, refusals
from gpufleet.server.shedding import Shed, loop_lag, sheddable
from gpufleet.server.telemetry import Measured, RequestMetrics
from gpufleet.state.tokens import TokenStore

__all__ = ["HealthCheck", "create_app"]

log = logging.getLogger("gpufleet.server")

BODY_LIMIT = 1024 * 1024  # every request but an agent's batch
PROBLEM = "#/components/schemas/Problem"

DESCRIPTION = """The gpufleet control plane: what agents reported about every node, GPU and link, the incidents
correlated from it, and the actions taken. Reads are open from the control plane's own host; from anywhere else they
need a viewer token. Changes need an operator token, agent pushes an agent token
(`gpufleet token create --role ...`), sent as `Authorization: Bearer <token>`."""


def create_app(
    plane: ControlPlane,
    checks: list[HealthCheck] | None = None,
    *,
    tokens: TokenStore | None = None,
    shed_reads: bool = False,
) -> FastAPI:
    """The API over `plane`. `shed_reads`: the control loop turns in this process (`gpufleet server` and `up`), and
    reads wait (503) while it is behind (server/shedding.py)."""
    app = FastAPI(
        title="gpufleet",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # served from bundled assets by routes/meta.py
        redoc_url=None,
    )
    tokens = tokens or plane.tokens  # the store ingest checks agents against: one cache, cleared by one revoke
    requests = RequestMetrics()

    def audit(who: str, action: str, target: str, result: str, request: str) -> None:
        plane.audit(who, action, target, result, request)

    app.add_middleware(Guard, tokens=tokens, audit=audit, body_limit=BODY_LIMIT, ingest_limit=MAX_BODY)
    if shed_reads:
        app.add_middleware(Shed, lag=loop_lag(lambda: plane.last_tick))  # before the guard: a shed read costs nothing
    app.add_middleware(Measured, metrics=requests)  # outermost: refusals are counted too

    @app.exception_handler(GpufleetError)
    async def _errors(request: Request, exc: GpufleetError) -> JSONResponse:
        status = 500
        if isinstance(exc, AuthError):
            status = 401
        elif isinstance(exc, ForbiddenError):
            status = 403
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

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        """The framework's own answers (a body that is not text, a path or method the API lacks) as a Problem."""
        error, fix = str(exc.detail), "see the API schema at /docs"
        if exc.status_code == 400:
            error, fix = "the request body cannot be read: it is not UTF-8 JSON", "send a JSON body (UTF-8)"
        elif exc.status_code == 404:
            error = f"no {request.url.path} in this API"
        elif exc.status_code == 405:
            error = f"{request.method} is not allowed on {request.url.path}"
        return JSONResponse({"error": error, "fix": fix}, status_code=exc.status_code, headers=exc.headers)

    cache = ReadCache()
    for module in (fleet, incidents, actions, records, scheduler, fabric, cost):
        app.include_router(module.router(plane, cache))
    for plain in (ingest, stream, preflight, remediation):
        app.include_router(plain.router(plane))
    app.include_router(meta.router(plane, list(checks or []), requests))
    meta.mount_pages(app)
    _document_refusals(app)
    return app


def _document_refusals(app: FastAPI) -> None:
    """Add to each operation of `/openapi.json` the answers the guard in front of the routes gives (401, 403, and
    400 and 413 for a body), with the `Problem` body every error has."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()  # kept as app.openapi_schema: what is added here is served from then on
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                answers = operation.setdefault("responses", {})
                if "422" in answers:  # answered by _bad_request as a Problem, not the framework's own shape
                    answers["422"] = {
                        "description": "A parameter or the body is outside the schema.",
                        "content": {"application/json": {"schema": {"$ref": PROBLEM}}},
                    }
                if sheddable(method.upper(), path):
                    answers.setdefault(
                        "503",
                        {
                            "description": "The control loop is behind: reads wait; retry after `Retry-After` s.",
                            "content": {"application/json": {"schema": {"$ref": PROBLEM}}},
                        },
                    )
                for status, description in refusals(method, path).items():
                    answers.setdefault(
                        str(status),
                        {"description": description, "content": {"application/json": {"schema": {"$ref": PROBLEM}}}},
                    )
        shapes = schema.setdefault("components", {}).setdefault("schemas", {})
        shapes.setdefault("Problem", schemas.Problem.model_json_schema())
        for unused in ("HTTPValidationError", "ValidationError"):
            shapes.pop(unused, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
