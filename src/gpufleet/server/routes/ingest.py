"""The door: agents push batches of observations here (JSON or msgpack, docs/wire.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from gpufleet.control.service import ControlPlane
from gpufleet.model.wire import JSON, decode_batch, encode


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

    return api
