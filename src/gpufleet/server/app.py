"""HTTP API and dashboard. Reads are open on loopback; every mutating call needs the bearer token."""

from __future__ import annotations

import hmac
from importlib import resources
from typing import Any, Literal

import numpy as np
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from gpufleet import __version__
from gpufleet.control import views
from gpufleet.control.loop import HealthLoop
from gpufleet.control.runner import TwinRunner
from gpufleet.errors import AuthError, GpufleetError, NotFoundError, UserError
from gpufleet.model import IncidentState, JobState
from gpufleet.sim.twin import Twin


class PushedEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq: int
    time: float
    kind: str = Field(max_length=64)
    entity: str = Field(max_length=256)
    node: str = Field(default="", max_length=256)
    message: str = Field(max_length=16384)
    attrs: dict[str, Any] = {}


class CollectiveFinding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(max_length=128)
    severity: Literal["info", "warning", "critical"]
    message: str = Field(max_length=4096)
    node: str | None = None
    host: str | None = None
    nbytes: int | None = None
    ratio: float | None = None


class CollectiveReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=512)
    findings: list[CollectiveFinding] = Field(max_length=1000)


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=256)
    events: list[PushedEvent] = Field(max_length=10000)


def summary(twin: Twin) -> dict[str, Any]:
    """What the dashboard shows: headline figures, the per-GPU grid and the fleet's recent history."""
    g = twin.gpus
    alive = g.alive
    jobs = twin.cluster.jobs
    grid = []
    for ni, node in enumerate(twin.cluster.nodes):
        idx = np.flatnonzero(g.node_of == ni)
        if not idx.size:
            continue
        grid.append(
            {
                "node": node.name,
                "cordoned": node.unschedulable,
                "util": [round(float(g.util[k])) if alive[k] else None for k in idx],
                "temp": [round(float(g.temp_c[k])) if alive[k] else None for k in idx],
                "throttled": [bool(g.clock_events[k] & 0xC8) for k in idx],
                "allocated": [bool(g.allocated[k]) for k in idx],
            }
        )
    minutes = twin.recorder.minutes[-240:]
    idle_allocated = alive & g.allocated & (g.util < 5)
    cost = sum(
        twin.cost_per_gpu_hour.get(twin.cluster.nodes[int(g.node_of[k])].gpu_model or "", 0.0)
        for k in np.flatnonzero(idle_allocated)
    )
    return {
        "cluster": twin.cluster.name,
        "time": twin.time,
        "gpus": int(g.n),
        "gpus_lost": int((~alive).sum()),
        "gpus_throttled": int(((g.clock_events & np.uint32(0xC8)) != 0).sum()),
        "util_mean": round(float(g.util.mean()), 1) if g.n else 0.0,
        "temp_max": round(float(g.temp_c[alive].max()), 1) if alive.any() else None,
        "power_kw": round(float(g.power_w.sum()) / 1000.0, 1),
        "idle_cost_per_hour": round(cost, 2),
        "jobs": {s.value: sum(1 for j in jobs if j.state is s) for s in JobState},
        "links_down": int((~twin.ports.up).sum()) // 2,
        "grid": grid,
        "history": [
            {
                "t": m.time,
                "util": round(m.util_mean, 1),
                "temp": round(m.temp_max, 1),
                "power": round(m.power_kw, 1),
            }
            for m in minutes
        ],
        "job_rows": views.job_rows(twin),
    }


def with_incidents(body: dict[str, Any], health: HealthLoop | None) -> dict[str, Any]:
    if health is None:
        return body
    from gpufleet.control.store import incident_to_json
    from gpufleet.sources.twin import EPOCH

    rows = []
    for inc in sorted(health.open_incidents(), key=lambda i: i.first_seen, reverse=True)[:30]:
        row = incident_to_json(inc)
        row["first_seen"] -= EPOCH
        rows.append(row)
    body["incidents"] = rows
    return body


def create_app(runner: TwinRunner, token: str, health: HealthLoop | None = None) -> FastAPI:
    app = FastAPI(title="gpufleet", version=__version__)

    def require_token(authorization: str | None = Header(default=None)) -> str:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthError("this call changes the cluster and needs a token", fix="send Authorization: Bearer <token>")
        if not hmac.compare_digest(authorization.split(" ", 1)[1].strip(), token):
            raise AuthError("the token is not valid", fix="use the token `gpufleet up` wrote to its data directory")
        return "api"

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

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(
            {"error": f"invalid request: {where}: {first.get('msg')}", "fix": "see the API schema at /docs"},
            status_code=422,
        )

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "sim_time": runner.read(lambda t: t.time)}

    @app.get("/", response_class=HTMLResponse)
    def dashboard() -> str:
        return resources.files("gpufleet.server").joinpath("static", "index.html").read_text(encoding="utf-8")

    @app.get("/api/v1/summary")
    def api_summary() -> dict[str, Any]:
        return runner.read(lambda t: with_incidents(summary(t), health))

    @app.get("/api/v1/nodes")
    def nodes() -> list[dict[str, Any]]:
        return runner.read(views.node_rows)

    @app.get("/api/v1/nodes/{name}")
    def node(name: str) -> dict[str, Any]:
        return runner.read(lambda t: views.describe_node(t, name))

    @app.get("/api/v1/gpus")
    def gpus(node: str | None = None) -> list[dict[str, Any]]:
        return runner.read(lambda t: views.gpu_rows(t, node))

    @app.get("/api/v1/jobs")
    def jobs() -> list[dict[str, Any]]:
        return runner.read(views.job_rows)

    @app.get("/api/v1/events")
    def events(kind: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if not 1 <= limit <= 10000:
            raise UserError("limit must be between 1 and 10000")
        return runner.store.events(kind, limit)

    @app.get("/api/v1/incidents")
    def incidents(state: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        if state is not None and state not in {s.value for s in IncidentState}:
            raise UserError(f"unknown state {state!r}", fix=f"use one of: {', '.join(s.value for s in IncidentState)}")
        return runner.store.incidents(state, limit)

    @app.post("/api/v1/incidents/{incident_id}/{verb}")
    def incident_transition(incident_id: str, verb: str, actor: str = Depends(require_token)) -> dict[str, Any]:
        states = {
            "acknowledge": IncidentState.acknowledged,
            "mitigate": IncidentState.mitigated,
            "resolve": IncidentState.resolved,
        }
        if verb not in states:
            raise UserError(f"unknown verb {verb!r}", fix="use acknowledge, mitigate or resolve")
        if health is None:
            raise UserError("this control plane runs no health engine")
        inc = runner.act(lambda t: health.book.transition(incident_id, states[verb]))
        runner.store.audit(actor, verb, f"incident/{incident_id}", inc.state.value)
        return {"id": inc.id, "state": inc.state.value}

    @app.post("/api/v1/nccl-findings")
    def nccl_findings(body: CollectiveReport, actor: str = Depends(require_token)) -> dict[str, Any]:
        """`gpufleet nccl compare --report`: a run slower than the fabric should give becomes an incident."""
        from gpufleet.nccl.compare import Finding as NcclFinding
        from gpufleet.sources.twin import EPOCH

        if health is None:
            raise UserError("this control plane runs no health engine")
        findings = [NcclFinding(**f.model_dump()) for f in body.findings]
        changed = runner.act(lambda t: health.engine.collective_findings(EPOCH + t.time, findings, body.source))
        runner.store.audit(actor, "nccl-findings", body.source, f"{len(findings)} finding(s)")
        return {"incidents": sorted({inc.id for inc in changed})}

    @app.get("/api/v1/audit")
    def audit(limit: int = 100) -> list[dict[str, Any]]:
        return runner.store.audit_log(limit)

    @app.post("/api/v1/events")
    def push_events(body: EventBatch, actor: str = Depends(require_token)) -> dict[str, Any]:
        accepted = runner.store.add_agent_events(body.agent, [e.model_dump() for e in body.events])
        return {"received": len(body.events), "new": accepted}

    @app.get("/api/v1/agent-events")
    def agent_events(agent: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        return runner.store.agent_events(agent, limit)

    def _action(actor: str, verb: str, name: str, fn: Any) -> dict[str, Any]:
        result = runner.act(fn)
        runner.store.audit(actor, verb, f"node/{name}", str(result))
        return {"node": name, "action": verb, "result": result}

    @app.post("/api/v1/nodes/{name}/cordon")
    def cordon(name: str, actor: str = Depends(require_token)) -> dict[str, Any]:
        return _action(actor, "cordon", name, lambda t: t.cordon(name) or "cordoned")

    @app.post("/api/v1/nodes/{name}/uncordon")
    def uncordon(name: str, actor: str = Depends(require_token)) -> dict[str, Any]:
        return _action(actor, "uncordon", name, lambda t: t.uncordon(name) or "uncordoned")

    @app.post("/api/v1/nodes/{name}/drain")
    def drain(name: str, actor: str = Depends(require_token)) -> dict[str, Any]:
        return _action(actor, "drain", name, lambda t: {"stopped_jobs": t.drain(name)})

    return app
