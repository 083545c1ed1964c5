"""People's actions on nodes, GPUs and jobs, through the control plane's backend: cordon, uncordon, drain, reset a
GPU, requeue a job. `dryRun` checks everything and changes nothing; every call is audited with its result."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request

from gpufleet.control.service import ControlPlane
from gpufleet.server import schemas
from gpufleet.server.cache import ReadCache
from gpufleet.server.routes.common import actor, described

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.Problem},
    404: {"model": schemas.Problem},
    409: {"model": schemas.Problem},
}


def router(plane: ControlPlane, cache: ReadCache) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["actions"])

    def node_action(
        verb: str, name: str, request: Request, body: schemas.ActionRequest | None, gpu: int | None = None
    ) -> dict[str, Any]:
        body = body or schemas.ActionRequest()
        try:
            result = plane.node_action(
                actor(request),
                verb,
                name,
                body.reason,
                gpu=gpu,
                dry_run=body.dryRun,
                request=described(request, body.model_dump()),
            )
        finally:
            cache.clear()  # whatever happened, the next read shows it
        target = f"node/{name}" if gpu is None else f"gpu/{name}/{gpu}"
        return {"target": target, "action": verb, "result": result, "dry_run": body.dryRun}

    @api.post("/nodes/{name}/cordon", response_model=schemas.ActionResult, responses=ERRORS)
    def cordon(name: str, request: Request, body: schemas.ActionRequest | None = Body(None)) -> dict[str, Any]:
        """Mark the node unschedulable (Slurm DRAIN with no jobs stopped; Kubernetes cordon)."""
        return node_action("cordon", name, request, body)

    @api.post("/nodes/{name}/uncordon", response_model=schemas.ActionResult, responses=ERRORS)
    def uncordon(name: str, request: Request, body: schemas.ActionRequest | None = Body(None)) -> dict[str, Any]:
        return node_action("uncordon", name, request, body)

    @api.post("/nodes/{name}/drain", response_model=schemas.ActionResult, responses=ERRORS)
    def drain(name: str, request: Request, body: schemas.ActionRequest | None = Body(None)) -> dict[str, Any]:
        """Cordon the node and move its work away."""
        return node_action("drain", name, request, body)

    @api.post("/nodes/{name}/gpus/{index}/reset", response_model=schemas.ActionResult, responses=ERRORS)
    def reset(
        name: str, index: int, request: Request, body: schemas.ActionRequest | None = Body(None)
    ) -> dict[str, Any]:
        """Reset one GPU (nvidia-smi -r); the backend refuses while work holds it."""
        return node_action("reset", name, request, body, gpu=index)

    @api.post("/jobs/{name}/requeue", response_model=schemas.ActionResult, responses=ERRORS)
    def requeue(name: str, request: Request, body: schemas.RequeueRequest | None = Body(None)) -> dict[str, Any]:
        """Requeue a job, keeping it off the nodes in `exclude`."""
        body = body or schemas.RequeueRequest()
        try:
            result = plane.job_action(
                actor(request),
                "requeue",
                name,
                body.exclude,
                dry_run=body.dryRun,
                request=described(request, body.model_dump()),
            )
        finally:
            cache.clear()
        return {"target": f"job/{name}", "action": "requeue", "result": result, "dry_run": body.dryRun}

    return api
