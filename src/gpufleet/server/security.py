"""Who may do what, decided before a request's body is read.

An ASGI layer in front of the API: it bounds the body (by Content-Length, and by counting a chunked one), finds the
bearer token, and checks the role a request needs. A refused change is answered 401 or 403 and audited; a flood of
them is audited as counts, so it cannot grow the log without bound. Handlers find the token in `request.state`.

What each request needs: agents' pushes (`/api/v1/ingest`) the agent or admin role; token management admin; any
other change operator or admin; reads nothing from loopback and a reading role from anywhere else. `/healthz` and
the dashboard's page are open (the page calls the API, which checks).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpufleet.state.tokens import Role, Token, TokenStore

log = logging.getLogger("gpufleet.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Audit = Callable[[str, str, str, str, str], None]  # actor, action, target, result, request

INGEST = "/api/v1/ingest"
TOKENS = "/api/v1/tokens"
OPEN_PATHS = frozenset({"/", "/healthz", "/favicon.ico"})
LOOPBACK = ("127.", "::1", "::ffff:127.")
READS = frozenset({"GET", "HEAD", "OPTIONS"})
REFUSAL_AUDIT_EVERY_S = 1.0


class Need(Enum):
    nothing = "nothing"
    read = "read"
    change = "change"
    push = "push"
    admin = "admin"


def needs(method: str, path: str, local: bool) -> Need:
    if path.startswith(TOKENS):
        return Need.admin
    if method in READS:
        if path in OPEN_PATHS or path.startswith(("/static/", "/docs", "/openapi.json")):
            return Need.nothing
        return Need.nothing if local else Need.read
    if path == INGEST:
        return Need.push
    return Need.change


def allows(role: Role, need: Need) -> bool:
    match need:
        case Need.nothing:
            return True
        case Need.read:
            return role.can_read()
        case Need.change:
            return role.can_change()
        case Need.push:
            return role.can_push()
        case Need.admin:
            return role is Role.admin


WHO = {
    Need.read: "a viewer, operator or admin token",
    Need.change: "an operator or admin token",
    Need.push: "an agent or admin token",
    Need.admin: "an admin token",
}


@dataclass
class _Refusals:
    """Refused changes per (client, reason): the first in each second is audited, later ones counted into the next."""

    last: float = 0.0
    suppressed: int = 0


class Guard:
    def __init__(self, app: ASGIApp, tokens: TokenStore, audit: Audit, *, body_limit: int, ingest_limit: int) -> None:
        self.app = app
        self.tokens = tokens
        self.audit = audit
        self.body_limit = body_limit
        self.ingest_limit = ingest_limit
        self._refusals: dict[tuple[str, str], _Refusals] = {}
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        client = (scope.get("client") or ("", 0))[0] or ""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        limit = self.ingest_limit if path == INGEST else self.body_limit
        length = headers.get("content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > limit):
            await _answer(send, 413, f"request body over {limit} bytes", "send a smaller body")
            return
        token, presented = self._token(headers)
        need = needs(method, path, client.startswith(LOOPBACK))
        if need is not Need.nothing:
            if token is None:
                why = "the token is not valid" if presented else "this call needs a token"
                await self._refuse(send, 401, why, "send Authorization: Bearer <token>", method, path, client, "")
                return
            if not allows(token.role, need):
                why = f"the {token.role.value} token {token.name!r} may not do this; it needs {WHO[need]}"
                fix = "ask an admin for a token with that role (`gpufleet token create --role ...`)"
                await self._refuse(send, 403, why, fix, method, path, client, token.name)
                return
        scope.setdefault("state", {})["token"] = token
        if method in READS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, limit)
        if body is None:
            await _answer(send, 413, f"request body over {limit} bytes", "send a smaller body")
            return
        await self.app(scope, _replay(body, receive), send)

    def _token(self, headers: dict[str, str]) -> tuple[Token | None, bool]:
        value = headers.get("authorization", "")
        if not value:
            return None, False
        scheme, _, secret = value.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip() or len(secret) > 512:
            return None, True
        return self.tokens.authenticate(secret.strip()), True

    async def _refuse(
        self, send: Send, status: int, why: str, fix: str, method: str, path: str, client: str, actor: str
    ) -> None:
        if method not in READS:
            self._audit_refusal(status, why, method, path, client, actor)
        await _answer(send, status, why, fix)

    def _audit_refusal(self, status: int, why: str, method: str, path: str, client: str, actor: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._refusals) > 10_000:
                self._refusals.clear()
            seen = self._refusals.setdefault((client, why), _Refusals())
            if now - seen.last < REFUSAL_AUDIT_EVERY_S:
                seen.suppressed += 1
                return
            seen.last, more = now, seen.suppressed
            seen.suppressed = 0
        result = f"refused {status}: {why}" + (f" (and {more} more like it from {client})" if more else "")
        request = json.dumps({"method": method, "path": path, "client": client})
        try:
            self.audit(actor or "anonymous", f"{method} {path}"[:200], path[:200], result, request)
        except Exception:  # the refusal stands even if the audit write fails; the log says so
            log.exception("cannot audit a refused request")


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` (a chunked body has no Content-Length to check first)."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away: the app sees an empty body and the disconnect
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def inner() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return inner


async def _answer(send: Send, status: int, error: str, fix: str) -> None:
    body = json.dumps({"error": error, "fix": fix}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="gpufleet"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
