"""API tokens on both engines: create (the secret shown once, only its hash kept), authenticate, revoke, the
first start's admin token, and tokens that outlive the process."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import NotFoundError, UserError
from gpufleet.state import Database
from gpufleet.state.tokens import PREFIX, Role, TokenStore, bootstrap_admin, secret_hash
from tests.pg import StateTarget


def test_a_created_token_authenticates_by_its_secret_only(state_db: Database) -> None:
    store = TokenStore(state_db)
    token, secret = store.create("ci-bot", "operator", "alice")
    assert secret.startswith(f"{PREFIX}{token.id}_") and token.role is Role.operator and token.active
    assert store.authenticate(secret) == token
    assert store.authenticate(secret + "x") is None
    stored = state_db.query("SELECT secret_hash FROM tokens")
    assert stored == [(secret_hash(secret),)]  # the secret itself is never stored
    by_name, by_id = store.get("ci-bot"), store.get(token.id)
    assert by_name is not None and by_id is not None and by_name.id == by_id.id == token.id
    assert [t.id for t in store.list()] == [token.id]


def test_names_and_roles_are_checked(state_db: Database) -> None:
    store = TokenStore(state_db)
    store.create("ci-bot", "viewer", "alice")
    with pytest.raises(UserError, match="exists"):
        store.create("ci-bot", "viewer", "alice")
    with pytest.raises(UserError, match="unknown role"):
        store.create("other", "root", "alice")
    with pytest.raises(UserError, match="bad token name"):
        store.create("  ", "viewer", "alice")
    with pytest.raises(NotFoundError):
        store.get("nobody")


def test_a_revoked_token_stops_working_and_stays_listed(state_db: Database) -> None:
    store = TokenStore(state_db)
    token, secret = store.create("agent-1", "agent", "alice")
    assert store.authenticate(secret) is not None  # cached as good ...
    revoked = store.revoke("agent-1")
    assert store.authenticate(secret) is None  # ... and forgotten on revoke
    assert revoked.revoked is not None and not revoked.active
    assert store.list(include_revoked=False) == [] and [t.name for t in store.list()] == ["agent-1"]
    with pytest.raises(UserError, match="already revoked"):
        store.revoke(token.id)


def test_last_use_is_written_back(state_db: Database) -> None:
    store = TokenStore(state_db)
    token, secret = store.create("viewer", "viewer", "alice")
    assert token.last_used is None
    store.authenticate(secret)
    used = store.get("viewer")
    assert used is not None and used.last_used is not None and used.last_used >= token.created


def test_the_first_start_makes_one_admin_token_in_a_private_file(state: StateTarget, tmp_path: Path) -> None:
    path = tmp_path / "token"
    store = TokenStore(state.open())
    secret = bootstrap_admin(store, path)
    assert secret is not None and path.read_text().strip() == secret
    assert path.stat().st_mode & 0o777 == 0o600
    admin = store.authenticate(secret)
    assert admin is not None and admin.role is Role.admin and admin.created_by == "first start"
    assert bootstrap_admin(store, path) is None  # an admin exists: nothing new
    again = TokenStore(state.open())  # another process, later
    same = again.authenticate(secret)
    assert same is not None and same.id == admin.id and again.has_admin()


def test_replicas_starting_at_once_each_get_an_admin_token(
    state: StateTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas on one database both find no admin and pick the name "admin"; the one that loses the name takes
    the next free one instead of failing to start."""
    first, second = TokenStore(state.open()), TokenStore(state.open())
    checked: list[str] = []
    real_get = second.get

    def not_yet(name: str, missing_ok: bool = False) -> object:
        if name == "admin" and not checked:  # the other replica's insert lands between this check and ours
            checked.append(name)
            assert bootstrap_admin(first, tmp_path / "r0-token") is not None
            return None
        return real_get(name, missing_ok=missing_ok)

    monkeypatch.setattr(second, "get", not_yet)
    secret = bootstrap_admin(second, tmp_path / "r1-token")
    token = second.authenticate(secret or "")
    assert token is not None and token.role is Role.admin and token.name == "admin-2"


def test_a_token_file_from_before_roles_is_adopted(state_db: Database, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old-secret-from-a-file\n")
    path.chmod(0o644)
    store = TokenStore(state_db)
    store.create("admin", "viewer", "alice")  # the name is taken: the adopted token gets another
    assert bootstrap_admin(store, path) == "old-secret-from-a-file"
    adopted = store.authenticate("old-secret-from-a-file")
    assert adopted is not None and adopted.role is Role.admin and adopted.name == "admin-2"
    assert path.stat().st_mode & 0o777 == 0o600
