"""Who may do what, decided before a request's body is read.

An ASGI layer in front of the API: it bounds the body (by Content-Length, and by counting a chunked one), finds the
bearer token, and checks the role a request needs. A refused change is answered 401 or 403 and audited, each kind
of request on its own row (`RefusalAudit`): a flood of identical ones is audited as counts and a flood of different
ones is capped, so it cannot grow the log without bound. Handlers find the token in `request.state`.

What each request needs: agents' pushes (`/api/v1/ingest`), their enrollment (`/api/v1/agents/enroll`) and
preflight failures the agent or admin role; the preflight admission webhook nothing (the API server calls it without
a token, and it changes nothing); token management admin; any other change operator or admin; reads (and a rehearsal
of a remediation policy, a POST that changes nothing) nothing from loopback and a reading role from anywhere else.
`/healthz` and the dashboard's page are open (the page calls the API, which checks).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
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
# An agent with the fleet's shared agent token asks for a token bound to its node.
ENROLL = "/api/v1/agents/enroll"
# The API server calls the preflight admission webhook without a token; it only computes a patch.
ADMISSION = "/admission/v1/preflight"
# A GPU pod's preflight init container reports a failed check with an agent token.
PREFLIGHT_FAILURES = "/api/v1/preflight/failures"
TOKENS = "/api/v1/tokens"
# POSTs that only read: a policy rehearsed over the recorded events (its manifest is too long for a query string)
READING_POSTS = frozenset({"/api/v1/remediation/replay"})
OPEN_PATHS = frozenset({"/", "/healthz", "/favicon.ico"})
LOOPBACK = ("127.", "::1", "::ffff:127.")
READS = frozenset({"GET", "HEAD", "OPTIONS"})
REFUSAL_FLUSH_S = 5.0  # repeats of an identical refused request are written as a count within this long
REFUSAL_FORGET_S = 60.0  # a kind of refusal not seen for this long is forgotten: its next one is a new row
REFUSAL_CAP_WINDOW_S = 60.0
REFUSAL_NEW_KINDS_CAP = 100  # rows for new kinds of refusal a window; past it they are counted in one summary row
REFUSAL_COUNT_ROWS_CAP = 100  # count rows a window; past it counts wait (never dropped) for the next window
REFUSAL_MAX_KINDS = 10_000


class Need(Enum):
    nothing = "nothing"
    read = "read"
    change = "change"
    push = "push"
    admin = "admin"


# What an agent refused for want of a token is told: where its token comes from and how one is made.
AGENT_TOKEN_FIX = (
    "an agent pushes with an agent token: make one on the control plane's host (`gpufleet token create --role agent "
    "--node NODE --out FILE`) and give it to the agent as $GPUFLEET_TOKEN or in its $GPUFLEET_HOME/token"
)


def needs(method: str, path: str, local: bool) -> Need:
    if path.startswith(TOKENS):
        return Need.admin
    if method in READS or (method == "POST" and path in READING_POSTS):
        if path in OPEN_PATHS or path.startswith(("/static/", "/docs", "/openapi.json")):
            return Need.nothing
        return Need.nothing if local else Need.read
    if path == ADMISSION:
        return Need.nothing
    if path in (INGEST, PREFLIGHT_FAILURES, ENROLL):
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


def refusals(method: str, path: str) -> dict[int, str]:
    """The answers this layer may give a route, for its OpenAPI description: 401 and 403 where a caller from
    another host needs a token, 400 and 413 where it takes a body."""
    out: dict[int, str] = {}
    if method.upper() not in READS:
        out[400] = "The body is not JSON the route takes (not UTF-8, or outside its schema)."
        out[413] = "The body is over the size limit."
    if needs(method.upper(), path, local=False) is not Need.nothing:
        out[401] = "No token, or one that is not valid: send `Authorization: Bearer <token>`."
        out[403] = "The token's role may not do this."
    return out


WHO = {
    Need.read: "a viewer, operator or admin token",
    Need.change: "an operator or admin token",
    Need.push: "an agent or admin token",
    Need.admin: "an admin token",
}


Key = tuple[str, str, str, str]  # client, method, path, reason


@dataclass
class _Kind:
    """One kind of refused request (the same client, method, path and reason): its first row is written at once,
    its repeats are counted and written as a count."""

    status: int
    actor: str
    last: float  # its latest refusal
    pending: int = 0  # repeats not written yet
    total: int = 1


class RefusalAudit:
    """The audit of refused changes, one row per kind of request, so a refused `POST /api/v1/tokens` is never
    hidden behind another path refused before it.

    The first refusal of a kind is written at once. Identical repeats are counted, and the count is written within
    `REFUSAL_FLUSH_S` (at the next refusal, by a timer, or at `close()` when the server stops), never lost for
    want of a later refusal. A flood is bounded: at most `REFUSAL_NEW_KINDS_CAP` new kinds a window (past it,
    refusals are counted into one summary row naming how many and whose) and `REFUSAL_COUNT_ROWS_CAP` count rows
    (past it, counts wait for the next window and are still written whole).
    """

    def __init__(
        self, audit: Audit, clock: Callable[[], float] = time.monotonic, *, timer_s: float | None = REFUSAL_FLUSH_S
    ) -> None:
        self.audit = audit
        self.clock = clock
        self.timer_s = timer_s  # None: no timer (the caller flushes)
        self._lock = threading.Lock()
        self._kinds: dict[Key, _Kind] = {}
        self._pending: dict[Key, float] = {}  # kinds with repeats to write -> when the first of them came
        self._window = clock()
        self._new_rows = self._count_rows = 0
        self._dropped: Counter[str] = Counter()  # client -> refusals not written for the cap
        self._timer: threading.Timer | None = None
        self._closed = False

    def refused(self, status: int, why: str, method: str, path: str, client: str, actor: str) -> None:
        now = self.clock()
        key = (client, method, path, why)
        with self._lock:
            rows = self._due(now, force=False)
            kind = self._kinds.get(key)
            if kind is not None:
                kind.pending += 1
                kind.total += 1
                kind.last = now
                self._pending.setdefault(key, now)
            elif self._new_rows < REFUSAL_NEW_KINDS_CAP and len(self._kinds) < REFUSAL_MAX_KINDS:
                self._kinds[key] = _Kind(status, actor, now)
                self._new_rows += 1
                rows.append(self._row(key, self._kinds[key], 0))
            else:
                self._dropped[client] += 1
            self._arm()
        self._write(rows)

    def flush(self, *, force: bool = False) -> None:
        """Write the counts that are due (all of them with `force`)."""
        with self._lock:
            rows = self._due(self.clock(), force=force)
            self._arm()
        self._write(rows)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()

    def close(self) -> None:
        """Write every count still held and stop the timer (the server is stopping)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self.flush(force=True)

    def _due(self, now: float, *, force: bool) -> list[tuple[str, str, str, str, str]]:
        """The rows to write now (call holding the lock)."""
        rows = []
        if force or now - self._window >= REFUSAL_CAP_WINDOW_S:
            if self._dropped:
                rows.append(self._dropped_row())
                self._dropped.clear()
            if now - self._window >= REFUSAL_CAP_WINDOW_S:
                self._window, self._new_rows, self._count_rows = now, 0, 0
                self._kinds = {k: v for k, v in self._kinds.items() if v.pending or now - v.last < REFUSAL_FORGET_S}
        for key, since in list(self._pending.items()):  # oldest first
            if not force and (now - since < REFUSAL_FLUSH_S or self._count_rows >= REFUSAL_COUNT_ROWS_CAP):
                break
            kind = self._kinds[key]
            rows.append(self._row(key, kind, kind.pending))
            kind.pending = 0
            self._count_rows += 1
            del self._pending[key]
        return rows

    def _arm(self) -> None:
        """A timer for counts still held (call holding the lock)."""
        if self.timer_s is None or self._closed or self._timer is not None:
            return
        if self._pending or self._dropped:
            self._timer = threading.Timer(self.timer_s, self._on_timer)
            self._timer.daemon = True
            self._timer.start()

    @staticmethod
    def _row(key: Key, kind: _Kind, repeats: int) -> tuple[str, str, str, str, str]:
        client, method, path, why = key
        result = f"refused {kind.status}: {why}"
        request: dict[str, Any] = {"method": method, "path": path, "client": client}
        if repeats:
            result += f" (and {repeats} more identical requests from {client}; {kind.total} in all)"
            request["repeats"] = repeats
        return kind.actor or "anonymous", f"{method} {path}"[:200], path[:200], result, json.dumps(request)

    def _dropped_row(self) -> tuple[str, str, str, str, str]:
        count = sum(self._dropped.values())
        whose = ", ".join(f"{c or 'unknown'} ({n})" for c, n in self._dropped.most_common(5))
        result = (
            f"refused {count} more requests not audited one by one: over {REFUSAL_NEW_KINDS_CAP} new kinds of "
            f"refusal in {REFUSAL_CAP_WINDOW_S:g} s; from {whose}"
        )
        request = json.dumps({"dropped": count, "clients": dict(self._dropped.most_common(20))})
        return "anonymous", "refusals over the audit cap", "api", result, request

    def _write(self, rows: list[tuple[str, str, str, str, str]]) -> None:
        for row in rows:
            try:
                self.audit(*row)
            except Exception:  # the refusal stands even if the audit write fails; the log says so
                log.exception("cannot audit a refused request")


class Guard:
    def __init__(self, app: ASGIApp, tokens: TokenStore, audit: Audit, *, body_limit: int, ingest_limit: int) -> None:
        self.app = app
        self.tokens = tokens
        self.audit = audit
        self.body_limit = body_limit
        self.ingest_limit = ingest_limit
        self.refusals = RefusalAudit(audit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._on_shutdown(receive), send)
            return
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
                fix = AGENT_TOKEN_FIX if need is Need.push else "send Authorization: Bearer <token>"
                await self._refuse(send, 401, why, fix, method, path, client, "")
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
            self.refusals.refused(status, why, method, path, client, actor)
        await _answer(send, status, why, fix)

    def _on_shutdown(self, receive: Receive) -> Receive:
        """`receive` for the lifespan: when the server stops, the refusals' counts still held are written."""

        async def inner() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                self.refusals.close()
            return message

        return inner


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
