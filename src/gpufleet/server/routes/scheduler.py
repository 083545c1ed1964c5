"""The workload manager's view: pending work with its reason, and queues with their use of quota."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gpufleet.control import views
from gpufleet.control.service import ControlPlane
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["scheduler"])

    @api.get("/scheduler", response_model=schemas.SchedulerView)
    def scheduler() -> Response:
        """Per workload manager (reported by `gpufleet agent --workload slurm|kubernetes`, or the twin), pending
        work longest-waiting first with the manager's reason, and each queue's GPUs in use against its quota."""
        return cache.answer("scheduler", lambda: views.scheduler(plane))

    return api
