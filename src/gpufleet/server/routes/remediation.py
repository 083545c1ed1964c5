"""Rehearse a remediation policy: the recorded incidents and node events replayed through the engine under a
candidate policy, next to what was done. A read: a viewer may call it, and it changes nothing."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.control.policy_replay import DEFAULT_SINCE, MAX_POLICY_TEXT, policy_from_text, rehearse, runbooks_for
from gpufleet.control.service import ControlPlane
from gpufleet.errors import UserError
from gpufleet.server import schemas
from gpufleet.spec.base import parse_duration

REPLAY = "/api/v1/remediation/replay"
ERRORS: dict[int | str, dict[str, Any]] = {400: {"model": schemas.Problem}}


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: str = Field(
        ..., max_length=MAX_POLICY_TEXT, description="The candidate RemediationPolicy manifest, as YAML or JSON text."
    )
    since: str = Field(DEFAULT_SINCE, max_length=32, description="How far back to replay: 30d, 12h, 90m.")
    rebootTime: str = Field("5m", max_length=32, description="How long a reboot the recorded run did not do lasts.")
    resetTime: str = Field("1m", max_length=32, description="How long a GPU reset takes the GPU out of service.")


def _duration(name: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError:
        raise UserError(f"{name} {text!r} is not a duration", fix=f"give {name} like 5m or 90s") from None


def router(plane: ControlPlane) -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["remediation"])

    @api.post("/remediation/replay", responses=ERRORS)
    def replay(body: ReplayRequest = Body(...)) -> dict[str, Any]:
        """Replay the last `since` of recorded incidents and node events through the remediation engine under the
        candidate policy, in event time, and compare with what the recorded run did (or, without one, with the
        built-in default policy replayed the same way): per incident the actions, and totals of nodes and GPU-hours
        out of service, breaker trips, refusals and deferrals. Changes nothing."""
        policy = policy_from_text(body.policy, "policy")
        result = rehearse(
            plane.db,
            policy,
            body.since,
            runbooks=runbooks_for(policy, None),
            reboot_s=_duration("rebootTime", body.rebootTime),
            gpu_reset_s=_duration("resetTime", body.resetTime),
        )
        return result.as_dict()

    return api
