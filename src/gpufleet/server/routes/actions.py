"""People's actions on nodes, GPUs and jobs, through the control plane's backend: cordon, uncordon, drain, reset a
GPU, requeue a job. `dryRun` checks everything and changes nothing; every call is audited with its result."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query, Request

from gpufleet.control.node_actions import action_row
from gpufleet.control.service import ControlPlane
from gpufleet.model.actions import NodeActionKind
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

    @api.post("/nodes/{name}/actions", response_model=schemas.NodeActionQueued, responses=ERRORS)
    def node_agent_action(name: str, request: Request, body: schemas.NodeActionRequest) -> dict[str, Any]:
        """Ask the node's own agent to act on its node: reset a GPU, reboot (with the command its operator gave
        it), cap power, restart an NVIDIA daemon or run diagnostics. Queued, handed to the agent with its next push
        and carried out there once; `GET /api/v1/actions` shows its result and the command's output."""
        try:
            return plane.agent_action(
                actor(request),
                name,
                NodeActionKind(body.kind),
                gpu=body.gpu,
                fraction=body.fraction,
                level=body.level,
                service=body.service,
                reason=body.reason,
                deadline_s=body.deadlineSeconds,
                dry_run=body.dryRun,
                request=described(request, body.model_dump()),
            )
        finally:
            cache.clear()

    @api.get("/actions", response_model=list[schemas.NodeActionRow])
    def node_actions(
        node: str | None = Query(None, max_length=253),
        incident: str | None = Query(None, max_length=64),
        limit: int = Query(100, ge=1, le=10_000),
    ) -> list[dict[str, Any]]:
        """Node actions for the nodes' agents, newest first: what was asked, by whom, and what the agent did."""
        rows = plane.node_actions.table.listed(node=node, incident=incident, limit=limit)
        return [action_row(r) for r in rows]

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
