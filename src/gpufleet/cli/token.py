"""`gpufleet token create|list|revoke`: the API's bearer tokens, managed on the control plane's host (its state
database), as `kubeadm token` is."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import typer

from gpufleet.cli.output import OUTPUT_HELP, OutputFormat, console, emit, err_console, make_table
from gpufleet.cli.render import clock
from gpufleet.control.paths import data_dir
from gpufleet.state.audit import AuditLog
from gpufleet.state.tokens import Role, Token, TokenStore, write_secret

token_app = typer.Typer(
    help="API tokens and their roles: viewer (reads), operator (changes), admin (also tokens), agent (pushes).",
    no_args_is_help=True,
)

MAX_NAME = 64  # what the token store takes

STATE_HELP = (
    "The control plane's state database: a postgresql:// URL, or $GPUFLEET_STATE; default the SQLite file in "
    "$GPUFLEET_HOME, which the control plane (`gpufleet up` or `gpufleet server`) must have made: no new one is "
    "made here, and none is used when the control plane on this host keeps its state in PostgreSQL."
)


def _store(state: str | None) -> TokenStore:
    from gpufleet.state import open_state

    # create=False: a token goes where the control plane reads, never into a database made just for it
    return TokenStore(open_state(data_dir(), state or os.environ.get("GPUFLEET_STATE"), create=False))


def _when(t: float | None) -> str:
    return "" if t is None else clock(t)


def _row(token: Token) -> dict[str, object]:
    return {
        "id": token.id,
        "name": token.name,
        "role": token.role.value,
        "node": token.node or "",
        "created": _when(token.created),
        "created_by": token.created_by,
        "last_used": _when(token.last_used),
        "revoked": _when(token.revoked),
    }


def _who() -> str:
    try:
        return f"local:{getpass.getuser()}"
    except Exception:
        return "local"


@token_app.command("create")
def create(
    name: str | None = typer.Option(
        None,
        "--name",
        help="What the audit log will call its holder, e.g. ci-bot (default: agent-NODE for a node's token, else the "
        "role; -2, -3, ... added while one of that name exists).",
    ),
    role: Role = typer.Option(..., "--role", help="viewer, operator, admin or agent."),
    out: Path | None = typer.Option(
        None, "--out", help="Write the token to this file (mode 0600) instead of printing it."
    ),
    node: str | None = typer.Option(
        None,
        "--node",
        help="With --role agent: bind the token to this node. It may push for that node only, and no other agent "
        "token may push for it any more.",
    ),
    state: str | None = typer.Option(None, "--state", help=STATE_HELP),
) -> None:
    """Make a token; its secret is shown once (only a hash is kept)."""
    store = _store(state)
    token, secret = store.create(name or _default_name(store, role, node), role.value, _who(), node=node)
    bound = f" for node {token.node}" if token.node else ""
    AuditLog(store.db).append(
        actor=_who(),
        action="token-create",
        target=f"token/{token.name}",
        decision=f"created ({token.role.value}{bound})",
    )
    if out is not None:
        write_secret(out, secret)
        err_console.print(f"token {token.name} ({token.role.value}{bound}) written to {out}")
        return
    err_console.print(f"token {token.name} ({token.role.value}{bound}); it is shown only now:")
    console.print(secret, markup=False, highlight=False)


def _default_name(store: TokenStore, role: Role, node: str | None) -> str:
    """A name no token has yet: `agent-NODE` for a token bound to a node, else the role's name, with -2, -3, ...
    added while one of that name exists (a node's second token, made to rotate the first, is agent-NODE-2)."""
    base = f"agent-{node.strip()}" if node and role is Role.agent else role.value
    base = base[: MAX_NAME - 4]  # room for the number
    name, n = base, 1
    while store.get(name, missing_ok=True) is not None:
        n += 1
        name = f"{base}-{n}"
    return name


@token_app.command("list")
def list_tokens(
    output: OutputFormat = typer.Option(OutputFormat.table, "--output", "-o", help=OUTPUT_HELP),
    state: str | None = typer.Option(None, "--state", help=STATE_HELP),
) -> None:
    """Every token with its role and when it was last used (never its secret)."""
    rows = [_row(t) for t in _store(state).list()]

    def table(wide: bool) -> None:
        cols = ["id", "name", "role", "node", "created", "last_used", "revoked"] + (["created_by"] if wide else [])
        console.print(make_table([c.upper() for c in cols], [[r[c] for c in cols] for r in rows]))

    emit(rows, output, table)


@token_app.command("revoke")
def revoke(
    name: str = typer.Argument(..., help="The token's name or id."),
    state: str | None = typer.Option(None, "--state", help=STATE_HELP),
) -> None:
    """Stop a token working (within seconds on every control-plane replica); it stays listed."""
    store = _store(state)
    token = store.revoke(name)
    AuditLog(store.db).append(actor=_who(), action="token-revoke", target=f"token/{token.name}", decision="revoked")
    console.print(f"token {token.name} revoked", markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
