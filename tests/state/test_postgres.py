"""What only PostgreSQL has: URLs (which ones are taken, passwords never shown), a server that cannot be reached,
and a connection lost under a running control plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import BackendError, UserError
from gpufleet.state import open_state
from gpufleet.state.postgres import PostgresDatabase, redact
from tests.pg import PostgresServer


def test_passwords_are_taken_out_of_urls() -> None:
    assert redact("postgresql://gf:s3cret@db.example:5432/fleet") == "postgresql://gf@db.example:5432/fleet"
    assert redact("postgres://gf@db/fleet?password=s3cret&sslmode=require") == (
        "postgres://gf@db/fleet?password=%2A%2A%2A&sslmode=require"
    )
    assert "s3cret" not in redact("postgresql://gf:s3cret@/fleet?host=/run/postgresql")


@pytest.mark.parametrize("url", ["mysql://gf:s3cret@db/fleet", "sqlite:///var/lib/state.db", "/var/lib/state.db"])
def test_a_url_that_is_not_postgresql_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(UserError, match="unsupported state database URL") as caught:
        open_state(tmp_path, url)
    assert "s3cret" not in str(caught.value) and "PostgreSQL URL" in str(caught.value)


def test_a_server_that_is_not_there_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    with pytest.raises(BackendError) as caught:
        open_state(tmp_path, "postgresql://gf:s3cret@127.0.0.1:1/fleet")
    message = str(caught.value)
    assert message.startswith("cannot connect to the state database postgresql://gf@127.0.0.1:1/fleet: ")
    assert "s3cret" not in message and "\n" not in message and caught.value.fix
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no psycopg traceback behind it


@pytest.mark.real
def test_both_url_schemes_reach_the_database(pg_url: str, tmp_path: Path) -> None:
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        db = open_state(tmp_path, url)
        assert isinstance(db, PostgresDatabase) and db.dialect == "postgresql" and db.directory == tmp_path
        db.close()


@pytest.mark.real
def test_a_database_that_does_not_exist_is_named(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(BackendError, match='database "no_such_db" does not exist'):
        open_state(tmp_path, url)


@pytest.mark.real
def test_a_lost_connection_fails_one_statement_and_the_next_reconnects(
    postgres: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    db = open_state(tmp_path, pg_url)
    db.set_meta("k", "v")

    def cut() -> None:
        postgres.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'gpufleet' "
            f"AND datname = '{pg_url.rsplit('/', 1)[1]}'"
        )

    cut()
    with pytest.raises(BackendError, match="lost the connection to the state database"):
        db.get_meta("k")
    assert db.get_meta("k") == "v"
    with pytest.raises(BackendError, match="lost the connection"), db.transaction():
        db.set_meta("k", "half")
        cut()
        db.set_meta("k", "written")
    assert not db.in_transaction and db.get_meta("k") == "v"  # the transaction died with its connection
    with db.transaction():
        db.set_meta("k", "w")
    assert db.get_meta("k") == "w"
    db.close()


@pytest.mark.real
def test_the_control_plane_records_where_its_state_is_and_tokens_follow_it(pg_url: str, tmp_path: Path) -> None:
    import stat

    from gpufleet.state import LOCATION, recorded_location
    from gpufleet.state.tokens import TokenStore
    from tests.clirun import gpufleet

    home = tmp_path / "home"
    open_state(home, pg_url).close()  # what `gpufleet server --state URL` does on its way in
    assert recorded_location(home) == redact(pg_url)
    assert stat.S_IMODE((home / LOCATION).stat().st_mode) == 0o600
    env = {"GPUFLEET_HOME": str(home), "GPUFLEET_STATE": ""}
    guessed = gpufleet("token", "create", "--name", "ci-bot", "--role", "viewer", env=env)
    assert guessed.returncode == 2 and f"--state {redact(pg_url)}" in guessed.stderr
    assert not (home / "state.db").exists()
    made = gpufleet("token", "create", "--name", "ci-bot", "--role", "viewer", "--state", pg_url, env=env)
    assert made.returncode == 0, made.stderr
    db = open_state(home, pg_url)
    try:
        assert TokenStore(db).authenticate(made.stdout.strip()) is not None
    finally:
        db.close()
