"""The workload manager's view: pending work with its reason, and queues with their use of quota."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from gpufleet.control import paging, views
from gpufleet.control.service import ControlPlane
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["scheduler"])

    @api.get(
        "/scheduler",
        response_model=schemas.SchedulerView,
        responses={400: {"model": schemas.Problem, "description": "A `continue` token this list did not give."}},
    )
    def scheduler(
        limit: int = Query(
            paging.DEFAULT_LIMIT,
            ge=1,
            le=paging.MAX_LIMIT,
            description=f"Pending rows a page (at most {paging.MAX_LIMIT}), as kubectl's `limit`.",
        ),
        after: str | None = Query(
            None,
            alias="continue",
            max_length=paging.MAX_TOKEN,
            description="The previous page's `metadata.continue`, for the rows after it.",
        ),
    ) -> Response:
        """Per workload manager (reported by `gpufleet agent --workload slurm|kubernetes`, or the twin), pending
        work longest-waiting first with the manager's reason, and each queue's GPUs in use against its quota.
        The pending work is paged: `limit` rows, then `continue` with the token in `metadata.continue` until it is
        null."""
        return cache.answer(f"scheduler/{limit}/{after or ''}", lambda: views.scheduler(plane, limit, after))

    return api
