"""What GPU time cost over a period: per workload, namespace, team and GPU model, the idle and unallocated hours,
the waste report and the scale-to-zero recommendations."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from gpufleet.control.paths import data_dir
from gpufleet.control.service import ControlPlane
from gpufleet.cost.service import CONFIG_NAME, CostService, parse_since
from gpufleet.errors import UserError
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.common import BadParameter


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["cost"])
    service = CostService(plane, config_path=data_dir() / CONFIG_NAME)

    @api.get("/cost", response_model=schemas.CostReport, responses={422: {"model": schemas.Problem}})
    def cost(
        since: str = Query("7d", max_length=32, description="The period, back from now: 90m, 24h, 7d."),
        idle_below: float | None = Query(
            None,
            ge=0,
            le=100,
            description="Utilization (%) below which a held GPU is idle (default: the cost config's, 10).",
        ),
    ) -> Response:
        """GPU-hours and money per workload (job or service), namespace, team and GPU model, at the prices of the
        control plane's cost config ($GPUFLEET_HOME/cost.yaml over the catalog's list prices); the idle cost of
        allocated GPUs and the unallocated capacity; nodes left idle, workloads holding many GPUs at low
        utilization, idle MIG slices; and the Karpenter and cluster-autoscaler settings that would scale idle pools
        to zero, with what that saves. `usage` is the measured GPU time, for pricing again elsewhere."""
        try:
            parse_since(since)
        except UserError as exc:
            raise BadParameter(exc.message, fix=exc.fix) from None
        key = f"cost/{since}/{idle_below}"
        return cache.answer(key, lambda: service.report(since, idle_below).model_dump(mode="json"))

    return api
