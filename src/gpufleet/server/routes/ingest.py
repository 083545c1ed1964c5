"""The door: agents push batches of observations here (JSON or msgpack, docs/wire.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.control.service import ControlPlane
from gpufleet.errors import ForbiddenError
from gpufleet.model.wire import JSON, decode_batch, encode
from gpufleet.server import schemas


def router(plane: ControlPlane) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["agents"])

    @api.post(
        "/ingest",
        response_class=Response,
        responses={
            200: {
                "description": "The acknowledgement: the stream's highest sequence number, records taken, duplicates."
            }
        },
    )
    async def ingest(request: Request) -> Response:
        """One batch from one agent stream; records at or below the stream's last sequence number are duplicates."""
        body = await request.body()
        kind = request.headers.get("content-type")
        # off the event loop: decoding and the database write must not hold up every other request
        pusher = getattr(request.state, "token", None)  # what it may push for is the control plane's to check
        ack = await run_in_threadpool(lambda: plane.ingest(decode_batch(body, kind), pusher))
        return Response(encode(ack), media_type=JSON)

    @api.post(
        "/agents/enroll",
        response_model=schemas.Enrolled,
        responses={403: {"model": schemas.Problem}, 400: {"model": schemas.Problem}},
    )
    def enroll(request: Request, body: schemas.EnrollRequest) -> dict[str, str]:
        """An agent with the fleet's shared agent token asks for a token bound to its node (kept in its data
        directory): node actions go only to an agent whose token is bound to its node. The first to ask for a node
        gets it; a node that has one gets no second."""
        by = getattr(request.state, "token", None)
        if by is None:
            raise ForbiddenError(
                "enrollment needs the shared agent token", fix="start the agent with its token ($GPUFLEET_TOKEN)"
            )
        token, secret = plane.tokens.enroll(body.node, by)
        plane.audit(by.name, "enroll", f"node/{body.node}", f"token {token.name} bound to {body.node}")
        return {"name": token.name, "node": body.node, "token": secret}

    return api
