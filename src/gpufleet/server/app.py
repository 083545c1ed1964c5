"""HTTP API and dashboard over the control plane: routers parse, call the service, and answer. Who may call what is
decided in front of them (`security.Guard`): reads are open on loopback, changes need an operator token, agent
pushes an agent token."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from gpufleet import __version__
from gpufleet.control import views
from gpufleet.control.service import ControlPlane
from gpufleet.errors import AuthError, GpufleetError, NotFoundError, UserError
from gpufleet.model import IncidentState
from gpufleet.model.wire import JSON, MAX_BODY, WireError, decode_batch, encode
from gpufleet.nccl.compare import CollectiveReport
from gpufleet.server.security import Guard
from gpufleet.state.tokens import TokenStore

HealthCheck = Callable[[], str | None]  # a problem to report, or None


VERBS = {
    "acknowledge": IncidentState.acknowledged,
    "mitigate": IncidentState.mitigated,
    "resolve": IncidentState.resolved,
}


BODY_LIMIT = 1024 * 1024  # every request but an agent's batch


def actor(request: Request) -> str:
    """The name of the token that made this request (the Guard let it through)."""
    token = getattr(request.state, "token", None)
    if token is None:
        raise AuthError("this call needs a token", fix="send Authorization: Bearer <token>")
    return str(token.name)


def create_app(
    plane: ControlPlane, checks: list[HealthCheck] | None = None, *, tokens: TokenStore | None = None
) -> FastAPI:
    app = FastAPI(title="gpufleet", version=__version__)
    extra_checks = list(checks or [])
    tokens = tokens or TokenStore(plane.db)

    def audit(who: str, action: str, target: str, result: str, request: str) -> None:
        plane.audit(who, action, target, result, request)

    app.add_middleware(Guard, tokens=tokens, audit=audit, body_limit=BODY_LIMIT, ingest_limit=MAX_BODY)

    @app.exception_handler(GpufleetError)
    async def _errors(request: Request, exc: GpufleetError) -> JSONResponse:
        status = 500
        if isinstance(exc, AuthError):
            status = 401
        elif isinstance(exc, NotFoundError):
            status = 404
        elif isinstance(exc, UserError):
            status = 400
        return JSONResponse({"error": exc.message, "fix": exc.fix}, status_code=status)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        # logged with its traceback by the server; the client gets no stack trace
        return JSONResponse(
            {"error": f"internal error: {type(exc).__name__}", "fix": "see the control plane's log; please report it"},
            status_code=500,
        )

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(
            {"error": f"invalid request: {where}: {first.get('msg')}", "fix": "see the API schema at /docs"},
            status_code=422,
        )

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        health = plane.health()
        problems = health.problems + [p for check in extra_checks if (p := check()) is not None]
        body = {
            "status": "ok" if not problems else "unhealthy",
            "problems": problems,
            "time": plane.clock(),
            "nodes": len(plane.fleet.nodes),
            "batches": plane.batches,
            "ticks": plane.ticks,
            "remediation": plane.remediation.mode,
            "backend": plane.backend.name,
        }
        return JSONResponse(body, status_code=200 if not problems else 503)

    @app.get("/", response_class=HTMLResponse)
    def dashboard() -> str:
        return resources.files("gpufleet.server").joinpath("static", "index.html").read_text(encoding="utf-8")

    # --- the door: agents push here ------------------------------------------------------------------------------

    @app.post("/api/v1/ingest")
    async def ingest(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            raise WireError(f"batch of {len(body)} bytes is over {MAX_BODY}", fix="push smaller batches")
        ack = plane.ingest(decode_batch(body, request.headers.get("content-type")))
        return Response(encode(ack), media_type=JSON)

    # --- reads ---------------------------------------------------------------------------------------------------

    @app.get("/api/v1/summary")
    def api_summary() -> dict[str, Any]:
        return views.summary(plane)

    @app.get("/api/v1/nodes")
    def nodes() -> list[dict[str, Any]]:
        return views.node_rows(plane)

    @app.get("/api/v1/nodes/{name}")
    def node(name: str) -> dict[str, Any]:
        return views.describe_node(plane, name)

    @app.get("/api/v1/gpus")
    def gpus(node: str | None = None) -> list[dict[str, Any]]:
        return views.gpu_rows(plane, node)

    @app.get("/api/v1/jobs")
    def jobs() -> list[dict[str, Any]]:
        return views.job_rows(plane)

    @app.get("/api/v1/events")
    def events(
        kind: str | None = None, node: str | None = None, limit: int = Query(100, ge=1, le=10_000)
    ) -> list[dict[str, Any]]:
        return plane.store.events(kind, node, limit)

    @app.get("/api/v1/incidents")
    def incidents(
        state: str | None = None, node: str | None = None, limit: int = Query(500, ge=1, le=100_000)
    ) -> list[dict[str, Any]]:
        return plane.incidents(state, node, limit)

    @app.get("/api/v1/incidents/{incident_id}")
    def incident(incident_id: str) -> dict[str, Any]:
        return plane.incident(incident_id)

    @app.get("/api/v1/audit")
    def audit_log(limit: int = Query(100, ge=1, le=10_000), incident: str | None = None) -> list[dict[str, Any]]:
        return [e.as_dict() for e in plane.store.audit_log.entries(incident=incident, limit=limit)]

    @app.get("/api/v1/agents")
    def agents() -> list[dict[str, Any]]:
        streams = plane.store.streams()
        return [
            {"agent": a, "incarnation": i, "node": n, "last_seq": seq, "last_time": t}
            for (a, i), (seq, t, n) in sorted(streams.items())
        ]

    # --- changes -------------------------------------------------------------------------------------------------

    @app.post("/api/v1/incidents/{incident_id}/{verb}")
    def incident_transition(incident_id: str, verb: str, request: Request) -> dict[str, Any]:
        if verb not in VERBS:
            raise UserError(f"unknown verb {verb!r}", fix="use acknowledge, mitigate or resolve")
        inc = plane.transition(incident_id, VERBS[verb], actor(request))
        return {"id": inc.id, "state": inc.state.value}

    @app.post("/api/v1/nccl-findings")
    def nccl_findings(body: CollectiveReport, request: Request) -> dict[str, Any]:
        """`gpufleet nccl compare --report`: a run slower than the fabric should give becomes an incident."""
        return {"incidents": plane.report_collective(body.findings, body.source, actor(request))}

    def _action(verb: str, name: str, request: Request) -> dict[str, Any]:
        return {"node": name, "action": verb, "result": plane.node_action(actor(request), verb, name)}

    @app.post("/api/v1/nodes/{name}/cordon")
    def cordon(name: str, request: Request) -> dict[str, Any]:
        return _action("cordon", name, request)

    @app.post("/api/v1/nodes/{name}/uncordon")
    def uncordon(name: str, request: Request) -> dict[str, Any]:
        return _action("uncordon", name, request)

    @app.post("/api/v1/nodes/{name}/drain")
    def drain(name: str, request: Request) -> dict[str, Any]:
        return _action("drain", name, request)

    return app
