"""What is not the fleet: health for probes, the control plane's own metrics, the dashboard, and the API's docs
from bundled assets (no CDN: the docs work on an air-gapped cluster)."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from gpufleet.control.service import ControlPlane
from gpufleet.server import schemas
from gpufleet.server.telemetry import RequestMetrics

HealthCheck = Callable[[], str | None]  # a problem to report, or None


def router(plane: ControlPlane, checks: list[HealthCheck], requests: RequestMetrics) -> APIRouter:
    api = APIRouter()

    @api.get("/healthz", response_model=schemas.Health, tags=["meta"], responses={503: {"model": schemas.Health}})
    def healthz() -> JSONResponse:
        """200 while the control loop turns and every check passes; 503 with the problems otherwise."""
        health = plane.health()
        problems = health.problems + [p for check in checks if (p := check()) is not None]
        body = {
            "status": "ok" if not problems else "unhealthy",
            "problems": problems,
            "time": plane.clock(),
            "nodes": len(plane.fleet.nodes),
            "batches": plane.batches,
            "ticks": plane.ticks,
            # seconds between the control loop's turns, over its last 600 turns
            "loop_gap_p99_s": _quantile(list(plane.turn_gaps), 0.99),
            "loop_gap_max_s": round(max(plane.turn_gaps), 3) if plane.turn_gaps else None,
            "remediation": plane.remediation.mode,
            "backend": plane.backend.name,
            "leader": plane.leader,
            "replica": plane.replication.name,
        }
        return JSONResponse(body, status_code=200 if not problems else 503)

    @api.get("/api/v1/whoami", response_model=schemas.WhoAmI, tags=["meta"])
    def whoami(request: Request) -> dict[str, Any]:
        """The token this request carried: its name and role (anonymous on loopback without one)."""
        token = getattr(request.state, "token", None)
        if token is None:
            return {"name": "anonymous", "role": "none"}
        return {"name": token.name, "role": token.role.value}

    @api.get("/metrics", response_class=PlainTextResponse, tags=["meta"])
    def metrics() -> PlainTextResponse:
        """The control plane's own metrics, in Prometheus' text format."""
        return PlainTextResponse(
            _plane_metrics(plane) + requests.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    return api


def _plane_metrics(plane: ControlPlane) -> str:
    with plane.lock:
        nodes = len(plane.fleet.nodes)
        lost = sum(1 for n in plane.fleet.nodes.values() if n.lost)
        open_by: dict[str, int] = {"info": 0, "warning": 0, "critical": 0}
        for inc in plane.book.open_incidents():
            open_by[inc.severity.value] += 1
    tick_age = time.monotonic() - plane.last_tick if plane.last_tick is not None else float("nan")
    lines = [
        "# HELP gpufleet_control_batches_total Agent batches taken.",
        "# TYPE gpufleet_control_batches_total counter",
        f"gpufleet_control_batches_total {plane.batches}",
        "# HELP gpufleet_control_loop_turns_total Turns of the control loop.",
        "# TYPE gpufleet_control_loop_turns_total counter",
        f"gpufleet_control_loop_turns_total {plane.ticks}",
        "# HELP gpufleet_control_loop_age_seconds Seconds since the control loop last turned.",
        "# TYPE gpufleet_control_loop_age_seconds gauge",
        f"gpufleet_control_loop_age_seconds {tick_age:.3f}",
        "# HELP gpufleet_control_loop_failing 1 while the last turn of the control loop failed.",
        "# TYPE gpufleet_control_loop_failing gauge",
        f"gpufleet_control_loop_failing {int(plane.loop_error is not None)}",
        "# HELP gpufleet_control_nodes Nodes whose agents have reported.",
        "# TYPE gpufleet_control_nodes gauge",
        f"gpufleet_control_nodes {nodes}",
        "# HELP gpufleet_control_nodes_lost Nodes whose agents went silent.",
        "# TYPE gpufleet_control_nodes_lost gauge",
        f"gpufleet_control_nodes_lost {lost}",
        "# HELP gpufleet_control_incidents_open Incidents not resolved, by severity.",
        "# TYPE gpufleet_control_incidents_open gauge",
        *(f'gpufleet_control_incidents_open{{severity="{sev}"}} {n}' for sev, n in open_by.items()),
    ]
    return "\n".join(lines) + "\n"


def mount_pages(app: FastAPI) -> None:
    """The dashboard's page and assets, and the API docs from the bundled Swagger UI."""
    static = resources.files("gpufleet.server").joinpath("static")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard() -> str:
        return static.joinpath("index.html").read_text(encoding="utf-8")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    viewer = _swagger_ui()
    if viewer is not None:
        app.mount("/docs/assets", StaticFiles(directory=str(viewer)), name="swagger")

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> Any:
        if viewer is None:
            return HTMLResponse(
                f"<p>The API docs need the {SWAGGER_UI_PACKAGE} package (pip install {SWAGGER_UI_PACKAGE}); the "
                'schema is at <a href="/openapi.json">/openapi.json</a>.</p>',
                status_code=503,
            )
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="gpufleet API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
        )


# Swagger UI 5, which reads the OpenAPI 3.1 document FastAPI writes (4.x cannot), as the fastapi-offline package
# ships it: its static folder is all that is used, mounted under /docs/assets.
SWAGGER_UI_PACKAGE = "fastapi-offline"


def _swagger_ui() -> Traversable | None:
    """The folder holding swagger-ui-bundle.js and swagger-ui.css, or None when the package is missing (the docs
    page then says so instead of loading the viewer from a CDN)."""
    try:
        folder = resources.files("fastapi_offline").joinpath("static")
    except ModuleNotFoundError:
        return None
    return folder if folder.joinpath("swagger-ui-bundle.js").is_file() else None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
