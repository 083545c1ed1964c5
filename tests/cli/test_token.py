"""`gpufleet token create|list|revoke` on the control plane's state database, and the admin token a first start
writes; without `--state` the command never makes a database of its own, nor uses a local one when the control
plane on this host keeps its state in PostgreSQL, and the command `gpufleet up` prints works as printed."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpufleet.state import LOCATION, open_state
from gpufleet.state.tokens import TokenStore, bootstrap_admin
from tests.clirun import gpufleet


def started(home: Path) -> dict[str, str]:
    """The environment of a host whose control plane (`gpufleet up`) made its state database in `home`."""
    open_state(home).close()
    return {"GPUFLEET_HOME": str(home)}


def test_create_list_revoke(tmp_path: Path) -> None:
    env = started(tmp_path)
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
    env = started(tmp_path)
    assert gpufleet("token", "create", "--name", "a", "--role", "viewer", env=env).returncode == 0
    again = gpufleet("token", "create", "--name", "a", "--role", "viewer", env=env)
    assert again.returncode == 2 and "a token named 'a' exists" in again.stderr and "Traceback" not in again.stderr
    bad_role = gpufleet("token", "create", "--name", "b", "--role", "root", env=env)
    assert bad_role.returncode == 2 and "root" in bad_role.stderr
    missing = gpufleet("token", "revoke", "nobody", env=env)
    assert missing.returncode == 2 and "no token 'nobody'" in missing.stderr


def test_out_file_is_private(tmp_path: Path) -> None:
    out = tmp_path / "agent.token"
    env = started(tmp_path)
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


def test_without_state_it_makes_no_database_of_its_own(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = gpufleet("token", "create", "--name", "ci-bot", "--role", "operator", env={"GPUFLEET_HOME": str(home)})
    assert made.returncode == 2 and "Traceback" not in made.stderr
    assert "no state database in" in made.stderr and "read by no control plane" in made.stderr
    assert "--state postgresql://" in made.stderr and "gpufleet up" in made.stderr  # the fix
    assert not (home / "state.db").exists() and made.stdout == ""
    listed = gpufleet("token", "list", env={"GPUFLEET_HOME": str(home)})
    assert listed.returncode == 2 and not (home / "state.db").exists()


@pytest.mark.parametrize("local_file", [False, True], ids=["no-local-file", "stale-local-file"])
def test_without_state_it_refuses_where_the_control_plane_keeps_its_state_in_postgres(
    tmp_path: Path, local_file: bool
) -> None:
    home = tmp_path / "home"
    if local_file:  # left from before the deployment moved to PostgreSQL
        open_state(home).close()
    home.mkdir(exist_ok=True)
    (home / LOCATION).write_text("postgresql://gpufleet@db.example:5432/fleet\n")  # as `server --state` records
    made = gpufleet("token", "create", "--name", "ci-bot", "--role", "operator", env={"GPUFLEET_HOME": str(home)})
    assert made.returncode == 2 and "Traceback" not in made.stderr
    assert "keeps its state in postgresql://gpufleet@db.example:5432/fleet" in made.stderr
    assert "--state postgresql://gpufleet@db.example:5432/fleet" in made.stderr
    assert (home / "state.db").exists() is local_file
    if local_file:
        assert TokenStore(open_state(home)).list() == []  # nothing went into the stale file


def test_a_control_plane_back_on_sqlite_clears_the_record(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / LOCATION).write_text("postgresql://gpufleet@db.example/fleet\n")
    open_state(home).close()  # `gpufleet up` on the SQLite file again
    assert not (home / LOCATION).exists()
    made = gpufleet("token", "create", "--name", "ci-bot", "--role", "viewer", env={"GPUFLEET_HOME": str(home)})
    assert made.returncode == 0, made.stderr


def test_the_command_up_prints_works_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex

    from gpufleet.cli.server import Mode, _banner, twin_plane
    from tests.twins import su_scenario

    home = tmp_path / "home"
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    scenario = su_scenario(tmp_path / "s.yaml", ["{at: 20s, type: xid, node: dgx-002, gpu: 3, code: 31}"])
    running = twin_plane(home, scenario, Mode.off, 1.0)
    try:
        banner = _banner("gpufleet is up", "127.0.0.1", 8470, running, home, Mode.off)
        elsewhere = _banner("gpufleet is up", "127.0.0.1", 18470, running, home, Mode.off)
    finally:
        running.plane.close()
        running.plane.db.close()
    # the commands to try reach this control plane as printed: --server where it is not the CLI's default
    assert "gpufleet get nodes   |" in banner and "--server" not in banner
    assert "gpufleet get nodes --server http://127.0.0.1:18470   |" in elsewhere
    (line,) = [line for line in banner.splitlines() if "token create" in line]
    words = shlex.split(line.split("others: ", 1)[1])
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    command = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    assert command[:3] == ["gpufleet", "token", "create"] and "--name" in command
    assert env == {"GPUFLEET_HOME": str(home)}  # named, since it is not the default
    monkeypatch.delenv("GPUFLEET_HOME")  # another shell on the host
    made = gpufleet(*command[1:], env=env)
    assert made.returncode == 0, made.stderr
    assert TokenStore(open_state(home)).authenticate(made.stdout.strip()) is not None


def test_on_postgres_the_printed_command_names_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from gpufleet.cli.server import token_command

    monkeypatch.delenv("GPUFLEET_HOME", raising=False)
    db = SimpleNamespace(dialect="postgresql", location="postgresql://gpufleet@db.example:5432/fleet")
    assert token_command(tmp_path, db) == (
        "gpufleet token create --name ci-bot --role operator --state postgresql://gpufleet@db.example:5432/fleet"
    )
    assert token_command(tmp_path, SimpleNamespace(dialect="sqlite")) == (
        "gpufleet token create --name ci-bot --role operator"
    )
