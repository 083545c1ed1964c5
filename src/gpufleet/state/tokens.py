"""API bearer tokens and their roles.

A token is `gf_<id>_<secret>`; the database keeps its SHA-256 only (the secret is 256 random bits, so a fast hash
is as safe as a slow one and costs nothing per request). The name is what the audit log shows as the actor.

Roles: `viewer` reads; `operator` also changes the cluster (cordon, drain, incidents); `admin` also manages
tokens; `agent` only pushes observations. An agent token may be bound to one node (`--node`): it pushes for that node
only, and once a node has a token of its own no other agent token may push for it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpufleet.errors import ForbiddenError, NotFoundError, UserError
from gpufleet.locks import ordered_lock
from gpufleet.state.db import Database

PREFIX = "gf_"
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")  # a hostname or Kubernetes node name
CACHE_S = 5.0  # a revoked token stops working within this long on every replica
LAST_USED_EVERY_S = 60.0  # how often a token's last use is written back


class Role(StrEnum):
    viewer = "viewer"
    operator = "operator"
    admin = "admin"
    agent = "agent"

    def can_read(self) -> bool:
        return self in (Role.viewer, Role.operator, Role.admin)

    def can_change(self) -> bool:
        return self in (Role.operator, Role.admin)

    def can_push(self) -> bool:
        return self in (Role.agent, Role.admin)


@dataclass(frozen=True, slots=True)
class Token:
    id: str
    name: str
    role: Role
    created: float
    created_by: str
    last_used: float | None
    revoked: float | None
    node: str | None = None  # an agent token bound to one node

    @property
    def active(self) -> bool:
        return self.revoked is None


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


_COLUMNS = "id, name, role, created, created_by, last_used, revoked, node"


def _token(row: tuple[object, ...]) -> Token:
    id_, name, role, created, created_by, last_used, revoked, node = row
    return Token(
        str(id_),
        str(name),
        Role(str(role)),
        float(created),  # type: ignore[arg-type]
        str(created_by),
        None if last_used is None else float(last_used),  # type: ignore[arg-type]
        None if revoked is None else float(revoked),  # type: ignore[arg-type]
        None if node is None else str(node),
    )


def _role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise UserError(f"unknown role {role!r}", fix=f"use one of: {', '.join(r.value for r in Role)}") from None


class TokenStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = ordered_lock("tokens")
        self._cache: dict[str, tuple[float, Token | None]] = {}  # hash -> (when looked up, token)
        self._used: dict[str, float] = {}  # token id -> last use written back
        self._bound: dict[str, tuple[float, bool]] = {}  # node -> (when looked up, has a token of its own)

    def create(self, name: str, role: str, created_by: str, node: str | None = None) -> tuple[Token, str]:
        """A new token and its secret (shown once; only its hash is kept); `node` binds an agent token to a node."""
        name = name.strip()
        if not name or len(name) > 64 or not name.isprintable():
            raise UserError(f"bad token name {name!r}", fix="use 1-64 printable characters, e.g. ci-bot")
        kind = _role(role)
        if node is not None:
            node = node.strip()
            if kind is not Role.agent:
                raise UserError(f"--node binds an agent token; a {kind.value} token is not bound to a node",
                                fix="use --role agent with --node, or leave --node out")  # fmt: skip
            if not NODE_NAME.fullmatch(node):
                raise UserError(f"bad node name {node!r}", fix="give the node's name as its agent reports it")
        if self.get(name, missing_ok=True) is not None:
            raise UserError(f"a token named {name!r} exists", fix="choose another --name, or revoke the old one")
        id_ = secrets.token_hex(4)
        secret = f"{PREFIX}{id_}_{secrets.token_urlsafe(32)}"
        return self._insert(id_, name, kind, secret, created_by, node), secret

    def adopt(self, name: str, role: str, secret: str, created_by: str) -> Token:
        """Keep an existing secret as a token (a data directory's token file from before roles existed)."""
        return self._insert(secrets.token_hex(4), name, _role(role), secret, created_by)

    def _insert(self, id_: str, name: str, role: Role, secret: str, created_by: str, node: str | None = None) -> Token:
        now = time.time()
        self.db.execute(
            "INSERT INTO tokens (id, name, role, secret_hash, created, created_by, node) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (id_, name, role.value, secret_hash(secret), now, created_by, node),
        )
        with self._lock:
            self._cache.pop(secret_hash(secret), None)
            self._bound.clear()
        return Token(id_, name, role, now, created_by, None, None, node)

    def enroll(self, node: str, by: Token) -> tuple[Token, str]:
        """A token bound to `node`, made for the agent that asks with a shared (unbound) agent token: the first to
        ask for a node gets it. A node that has a token of its own gets no second one (its agent kept it in its data
        directory); a person revokes the old one to enroll the node again."""
        if by.role is not Role.agent or by.node is not None:
            bound = f"bound to {by.node}" if by.node else f"a {by.role.value} token"
            raise UserError(f"the token {by.name!r} is {bound}: only a shared agent token enrolls a node",
                            fix="an agent with a token of its own pushes with it and needs no enrollment")  # fmt: skip
        if not NODE_NAME.fullmatch(node):
            raise UserError(f"bad node name {node!r}", fix="give the node's name as its agent reports it")
        with self.db.transaction():  # two agents asking for one node at once: one of them gets it
            own = self.db.one("SELECT name FROM tokens WHERE node = ? AND revoked IS NULL LIMIT 1", (node,))
            if own is not None:
                raise ForbiddenError(
                    f"node {node} has a token of its own ({own[0]}); it is not given a second",
                    fix=f"if its agent lost it (a new data directory), revoke it: `gpufleet token revoke {own[0]}`, "
                    "and the agent enrolls again",
                )
            name = f"agent-{node}"[:64]
            if self.get(name, missing_ok=True) is not None:
                name = f"agent-{node}-{secrets.token_hex(3)}"[:64]
            return self.create(name, Role.agent.value, f"enrolled with {by.name}", node=node)

    def node_has_own_token(self, node: str) -> bool:
        """Whether an active agent token is bound to `node` (looked up at most every CACHE_S per node)."""
        now = time.monotonic()
        with self._lock:
            cached = self._bound.get(node)
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1]
        row = self.db.one("SELECT 1 FROM tokens WHERE node = ? AND revoked IS NULL LIMIT 1", (node,))
        with self._lock:
            if len(self._bound) > 100_000:
                self._bound.clear()
            self._bound[node] = (now, row is not None)
        return row is not None

    def authenticate(self, secret: str) -> Token | None:
        """The active token with this secret, or None."""
        key = secret_hash(secret)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and now - cached[0] < CACHE_S:
            token = cached[1]
        else:
            row = self.db.one(f"SELECT {_COLUMNS} FROM tokens WHERE secret_hash = ?", (key,))
            token = _token(row) if row is not None else None
            if token is not None and not token.active:
                token = None
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()  # a flood of made-up tokens must not grow memory
                self._cache[key] = (now, token)
        if token is not None:
            self._touch(token)
        return token

    def _touch(self, token: Token) -> None:
        wall = time.time()
        with self._lock:
            if wall - self._used.get(token.id, 0.0) < LAST_USED_EVERY_S:
                return
            self._used[token.id] = wall
        self.db.execute("UPDATE tokens SET last_used = ? WHERE id = ?", (wall, token.id))

    def list(self, include_revoked: bool = True) -> list[Token]:
        rows = self.db.query(f"SELECT {_COLUMNS} FROM tokens ORDER BY created, name")
        return [t for t in map(_token, rows) if include_revoked or t.active]

    def get(self, name_or_id: str, missing_ok: bool = False) -> Token | None:
        row = self.db.one(f"SELECT {_COLUMNS} FROM tokens WHERE name = ? OR id = ?", (name_or_id, name_or_id))
        if row is None and not missing_ok:
            raise NotFoundError(f"no token {name_or_id!r}", fix="list them with `gpufleet token list`")
        return _token(row) if row is not None else None

    def revoke(self, name_or_id: str) -> Token:
        token = self.get(name_or_id)
        assert token is not None
        if not token.active:
            raise UserError(f"token {token.name!r} is already revoked")
        now = time.time()
        self.db.execute("UPDATE tokens SET revoked = ? WHERE id = ?", (now, token.id))
        with self._lock:
            self._cache.clear()
            self._bound.clear()
        return Token(
            token.id, token.name, token.role, token.created, token.created_by, token.last_used, now, token.node
        )

    def has_admin(self) -> bool:
        return any(t.role is Role.admin for t in self.list(include_revoked=False))


def write_secret(path: Path, secret: str) -> None:
    """A token file only its owner can read (created so from the start, never briefly world-readable)."""
    from gpufleet.private_files import write_private

    write_private(path, secret + "\n")


def bootstrap_admin(store: TokenStore, path: Path) -> str | None:
    """On a first start, an admin token written to `path` (0600). A token file from before roles existed is
    adopted as the admin token. Returns the admin secret when this call made or adopted it."""
    if store.has_admin():
        return None
    if path.exists():
        secret = path.read_text(encoding="utf-8").strip()
        if secret and store.authenticate(secret) is None:
            store.adopt(_free_name(store, "admin"), "admin", secret, "first start")
            path.chmod(0o600)
            return secret
    for attempt in range(3):
        name = _free_name(store, "admin")
        try:
            _, secret = store.create(name, "admin", "first start")
            break
        except Exception:  # replicas starting at once on one database: another may have taken the name first
            if attempt == 2 or store.get(name, missing_ok=True) is None:
                raise
    write_secret(path, secret)
    return secret


def _free_name(store: TokenStore, base: str) -> str:
    name, n = base, 1
    while store.get(name, missing_ok=True) is not None:
        n += 1
        name = f"{base}-{n}"
    return name
