"""Reads of the fleet: summary, nodes, GPUs, jobs, agents, clocks, and the metric store's query API."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from gpufleet.control import views
from gpufleet.control.service import ControlPlane
from gpufleet.errors import UserError
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.common import BadParameter
from gpufleet.state.tokens import Role
from gpufleet.telemetry.store.query import AGG_OPS

MAX_POINTS = 11_000  # as Prometheus refuses a range query of more points per series
BAD_SELECTOR: dict[int | str, dict[str, Any]] = {400: {"model": schemas.Problem, "description": "Not a selector."}}


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["fleet"])

    @api.get("/summary", response_model=schemas.Summary)
    def summary() -> Response:
        """What the dashboard's overview shows: headline figures, the per-GPU grid, fleet history, jobs, incidents."""
        return cache.answer("summary", lambda: views.summary(plane))

    @api.get("/nodes", response_model=list[schemas.NodeRow])
    def nodes() -> Response:
        return cache.answer("nodes", lambda: views.node_rows(plane))

    @api.get("/nodes/{name}", response_model=schemas.NodeDetail, responses={404: {"model": schemas.Problem}})
    def node(name: str) -> Response:
        """A node's conditions, software, GPUs, NICs, open incidents and latest kernel-log reports."""
        return cache.answer(f"node/{name}", lambda: views.describe_node(plane, name))

    @api.get("/gpus", response_model=list[schemas.GpuRow], responses={404: {"model": schemas.Problem}})
    def gpus(node: str | None = Query(None, max_length=253)) -> Any:
        return cache.answer(f"gpus/{node or ''}", lambda: views.gpu_rows(plane, node))

    @api.get("/jobs", response_model=list[schemas.JobRow])
    def jobs() -> Response:
        return cache.answer("jobs", lambda: views.job_rows(plane))

    @api.get("/services", response_model=list[schemas.ServiceRow])
    def services() -> Response:
        """Inference services: traffic, errors and latency percentiles against their objective."""
        return cache.answer("services", lambda: views.service_rows(plane))

    @api.get("/fabric", response_model=schemas.Fabric)
    def fabric() -> Response:
        """HCA ports and the switches they reach: state, error counters, open incidents."""
        return cache.answer("fabric", lambda: views.fabric(plane))

    @api.get("/clocks", response_model=list[schemas.ClockRow])
    def clocks() -> list[dict[str, Any]]:
        """Each node's clock: its time daemon's report and the bound its pushes' send stamps give (the control plane
        files clock-skew incidents for a job whose nodes disagree by more than 1 ms)."""
        with plane.lock:
            return plane.clocks.view(plane.clock())

    @api.get("/agents", response_model=list[schemas.AgentRow])
    def agents(request: Request) -> list[dict[str, Any]]:
        """Each agent stream: its node, how far it delivered and when. A stream's incarnation is shown to admins
        only: with it and a push token, anyone could speak in that agent's name."""
        token = getattr(request.state, "token", None)
        admin = token is not None and token.role is Role.admin
        streams = plane.store.streams()
        return [
            {"agent": a, "incarnation": i if admin else None, "node": n, "last_seq": seq, "last_time": t}
            for (a, i), (seq, t, n) in sorted(streams.items())
        ]

    @api.get("/metrics/query", response_model=list[schemas.Sample], tags=["metrics"], responses=BAD_SELECTOR)
    def metric_instant(
        series: str = Query(..., max_length=2000, description='A selector: name{label="v", other=~"re.*"}.'),
        op: str | None = Query(None, description=f"Aggregate with one of {', '.join(AGG_OPS)}."),
        by: str = Query("", max_length=500, description="Labels to aggregate by, comma-separated."),
        time: float | None = Query(None, description="Evaluate at this time (epoch s); default the latest."),
    ) -> list[dict[str, Any]]:
        store = _store(plane)
        _check_op(op)
        found = store.aggregate_instant(op, series, _labels(by), time) if op else store.instant(series, time)
        return [{"labels": s.labels, "time": s.timestamp, "value": _finite(s.value)} for s in found]

    @api.get("/metrics/range", response_model=list[schemas.Range], tags=["metrics"], responses=BAD_SELECTOR)
    def metric_range(
        series: str = Query(..., max_length=2000, description='A selector: name{label="v", other=~"re.*"}.'),
        start: float = Query(..., description="Epoch seconds."),
        end: float = Query(..., description="Epoch seconds."),
        step: float = Query(60.0, gt=0, description="Seconds between points."),
        op: str | None = Query(None, description=f"Aggregate with one of {', '.join(AGG_OPS)}."),
        by: str = Query("", max_length=500, description="Labels to aggregate by, comma-separated."),
    ) -> list[dict[str, Any]]:
        store = _store(plane)
        _check_op(op)
        if end < start:
            raise BadParameter("end is before start", fix="give start <= end (epoch seconds)")
        if (end - start) / step > MAX_POINTS:
            raise BadParameter(f"more than {MAX_POINTS} points per series", fix="raise step or shorten the range")
        found = (
            store.aggregate_range(op, series, _labels(by), start, end, step)
            if op
            else store.range(series, start, end, step)
        )
        return [
            {
                "labels": s.labels,
                "points": [[float(t), _finite(float(v))] for t, v in zip(s.timestamps, s.values, strict=True)],
            }
            for s in found
        ]

    return api


def _store(plane: ControlPlane) -> Any:
    if plane.metrics is None:
        raise UserError(
            "this control plane keeps no metric history", fix="start it with the embedded store or --metrics"
        )
    return plane.metrics.store


def _check_op(op: str | None) -> None:
    if op is not None and op not in AGG_OPS:
        raise BadParameter(f"unknown aggregation {op!r}", fix=f"use one of: {', '.join(AGG_OPS)}")


def _labels(by: str) -> list[str]:
    return [b.strip() for b in by.split(",") if b.strip()]


def _finite(value: float) -> float | None:
    return None if value != value or value in (float("inf"), float("-inf")) else value
