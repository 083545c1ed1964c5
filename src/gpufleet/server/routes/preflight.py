"""The GPU preflight: the mutating admission webhook the API server calls for every new pod in the selected
namespaces (`POST /admission/v1/preflight`, an AdmissionReview v1 in and out), and the failure a pod's preflight
init container reports (`POST /api/v1/preflight/failures`, an agent token), which opens an incident on the node.

The webhook's settings come from the server's environment, which the Helm chart sets:
GPUFLEET_PREFLIGHT_IMAGE (the image the init container runs), GPUFLEET_PREFLIGHT_SERVER (the URL it reports to),
GPUFLEET_PREFLIGHT_CA_FILE (the CA it trusts for that URL), GPUFLEET_PREFLIGHT_TOKEN_SECRET (the Secret in the pod's
namespace holding its token) and GPUFLEET_PREFLIGHT_NAMESPACES (comma-separated; empty: every namespace the API
server sends, which the webhook's namespaceSelector decides)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gpufleet import __version__
from gpufleet.control.service import ControlPlane
from gpufleet.errors import UserError
from gpufleet.integrations.kubernetes.admission import AdmissionError, Settings, review
from gpufleet.server import schemas
from gpufleet.server.routes.common import actor

log = logging.getLogger("gpufleet.server")

ADMISSION_PATH = "/admission/v1/preflight"
# What /openapi.json says the webhook takes: the AdmissionReview v1 envelope (the object inside is any Kubernetes
# object; the API server's own schema for it is the Pod's).
REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "request"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["admission.k8s.io/v1"]},
        "kind": {"type": "string", "enum": ["AdmissionReview"]},
        "request": {
            "type": "object",
            "required": ["uid", "kind", "operation"],
            "properties": {
                "uid": {"type": "string"},
                "kind": {"type": "object", "additionalProperties": {"type": "string"}},
                "namespace": {"type": "string"},
                "operation": {"type": "string", "enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"]},
                "object": {"type": "object"},
            },
        },
    },
}


def settings_from(environ: Mapping[str, str]) -> Settings:
    """The webhook's settings from the server's environment (see the module's note)."""
    ca_pem = ""
    ca_file = environ.get("GPUFLEET_PREFLIGHT_CA_FILE", "")
    if ca_file:
        try:
            ca_pem = Path(ca_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UserError(
                f"GPUFLEET_PREFLIGHT_CA_FILE {ca_file}: {exc.strerror}",
                fix="mount the CA the server's certificate is signed by, or unset the variable",
            ) from None
    namespaces = {n.strip() for n in environ.get("GPUFLEET_PREFLIGHT_NAMESPACES", "").split(",") if n.strip()}
    return Settings(
        image=environ.get("GPUFLEET_PREFLIGHT_IMAGE") or f"gpufleet:{__version__}",
        server_url=environ.get("GPUFLEET_PREFLIGHT_SERVER", ""),
        ca_pem=ca_pem,
        token_secret=environ.get("GPUFLEET_PREFLIGHT_TOKEN_SECRET", ""),
        image_pull_policy=environ.get("GPUFLEET_PREFLIGHT_PULL_POLICY") or "IfNotPresent",
        namespaces=frozenset(namespaces),
    )


def router(plane: ControlPlane, settings: Settings | None = None) -> APIRouter:
    api = APIRouter(tags=["preflight"])
    chosen = settings or settings_from(os.environ)

    @api.post(
        ADMISSION_PATH,
        responses={400: {"model": schemas.Problem}},
        summary="The GPU preflight admission webhook (AdmissionReview v1)",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": REVIEW_SCHEMA}}}},
    )
    async def admission(request: Request) -> JSONResponse:
        """Answers the API server's AdmissionReview: always allowed; a GPU pod gets the `gpufleet-preflight` init
        container as a JSONPatch. Called by the API server, with no token (the guard lets it through)."""
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError as exc:
            raise AdmissionError(
                f"the body is not JSON: {exc}", fix="send an AdmissionReview v1 as JSON, as the API server does"
            ) from None
        answer, decision = review(body, chosen)
        request_part = body.get("request") or {}
        log.debug(
            "preflight webhook: %s/%s: %s",
            request_part.get("namespace", ""),
            request_part.get("name") or (request_part.get("object") or {}).get("metadata", {}).get("generateName", ""),
            decision.reason,
        )
        return JSONResponse(answer)

    @api.post(
        "/api/v1/preflight/failures",
        response_model=schemas.PreflightResult,
        responses={400: {"model": schemas.Problem}},
    )
    def failure(body: schemas.PreflightFailure, request: Request) -> dict[str, Any]:
        """A GPU pod's preflight failed on its node: open an incident on the node (diag-failure)."""
        token = getattr(request.state, "token", None)
        bound = getattr(token, "node", None)
        if bound and bound != body.node:
            raise UserError(
                f"this token is bound to node {bound}, not {body.node}",
                fix="report with a preflight token that is not bound to a node",
            )
        incident = plane.report_preflight(body.node, body.check, body.output, actor(request), body.pod, body.gang)
        return {"incident": incident}

    return api
