"""What every router needs: the caller's name and a short record of the request for the audit log."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from gpufleet.errors import AuthError, UserError


def actor(request: Request) -> str:
    """The name of the token that made this request (the guard in front of the API let it through)."""
    token = getattr(request.state, "token", None)
    if token is None:
        raise AuthError("this call needs a token", fix="send Authorization: Bearer <token>")
    return str(token.name)


def described(request: Request, body: Any = None) -> str:
    """The request as the audit log keeps it: method, path, query and body (bounded)."""
    record: dict[str, Any] = {"method": request.method, "path": request.url.path}
    if request.url.query:
        record["query"] = request.url.query
    if body is not None:
        record["body"] = body
    if request.client is not None:
        record["client"] = request.client.host
    return json.dumps(record, default=str)[:2000]


class BadParameter(UserError):
    """A query parameter with a value the API does not take: answered 422, like a wrong type."""
