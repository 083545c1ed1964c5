"""`gpufleet token create|list|revoke` on the control plane's state database, and the admin token a first start
writes."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from gpufleet.state import open_state
from gpufleet.state.tokens import TokenStore, bootstrap_admin
from tests.clirun import gpufleet


def test_create_list_revoke(tmp_path: Path) -> None:
    env = {"GPUFLEET_HOME": str(tmp_path)}
    made = gpufleet("token", "create", "--name", "ci-bot", "--role", "operator", env=env)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("gf_") and "shown only now" in made.stderr
    listed = json.loads(gpufleet("token", "list", "-o", "json", env=env).stdout)
    assert [(t["name"], t["role"], t["revoked"]) for t in listed] == [("ci-bot", "operator", "")]
    assert secret not in json.dumps(listed) and "secret_hash" not in listed[0]
    store = TokenStore(open_state(tmp_path))
    token = store.authenticate(secret)
    assert token is not None and token.name == "ci-bot"
    revoked = gpufleet("token", "revoke", "ci-bot", env=env)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert TokenStore(open_state(tmp_path)).authenticate(secret) is None
    actions = [e.action for e in store_audit(tmp_path)]
    assert actions == ["token-create", "token-revoke"]


def store_audit(home: Path) -> list:  # type: ignore[type-arg]
    from gpufleet.state import AuditLog

    return AuditLog(open_state(home)).entries()


def test_clear_errors(tmp_path: Path) -> None:
    env = {"GPUFLEET_HOME": str(tmp_path)}
    assert gpufleet("token", "create", "--name", "a", "--role", "viewer", env=env).returncode == 0
    again = gpufleet("token", "create", "--name", "a", "--role", "viewer", env=env)
    assert again.returncode == 2 and "a token named 'a' exists" in again.stderr and "Traceback" not in again.stderr
    bad_role = gpufleet("token", "create", "--name", "b", "--role", "root", env=env)
    assert bad_role.returncode == 2 and "root" in bad_role.stderr
    missing = gpufleet("token", "revoke", "nobody", env=env)
    assert missing.returncode == 2 and "no token 'nobody'" in missing.stderr


def test_out_file_is_private(tmp_path: Path) -> None:
    out = tmp_path / "agent.token"
    env = {"GPUFLEET_HOME": str(tmp_path)}
    assert gpufleet("token", "create", "--name", "n1", "--role", "agent", "--out", str(out), env=env).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert TokenStore(open_state(tmp_path)).authenticate(out.read_text().strip()) is not None


def test_first_start_writes_an_admin_token_once(tmp_path: Path) -> None:
    store = TokenStore(open_state(tmp_path))
    path = tmp_path / "token"
    secret = bootstrap_admin(store, path)
    assert secret is not None and path.read_text().strip() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = store.authenticate(secret)
    assert token is not None and token.role.value == "admin"
    assert bootstrap_admin(store, path) is None  # a second start keeps it


def test_a_token_file_from_before_roles_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("0123456789abcdef0123456789abcdef0123456789abcdef\n")
    path.chmod(0o644)
    store = TokenStore(open_state(tmp_path))
    assert bootstrap_admin(store, path) == "0123456789abcdef0123456789abcdef0123456789abcdef"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.authenticate(path.read_text().strip()) is not None
