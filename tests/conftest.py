"""Shared fixtures: where the real captures and the trace live, and how tests that need real components behave."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpufleet import locks

if TYPE_CHECKING:
    from gpufleet.state import Database
    from tests.pg import PostgresServer, StateTarget

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# every lock made in a test checks the one lock order (gpufleet.locks), in this process and in the servers and agents
# the tests start
os.environ["GPUFLEET_LOCK_ORDER"] = "check"
locks.check_order(True)


@pytest.fixture(autouse=True)
def lock_order() -> Iterator[None]:
    """A test fails when any thread took the shared locks out of their order, even if no deadlock happened."""
    locks.clear_violations()
    yield
    broken = locks.violations()
    assert not broken, "lock order broken:\n" + "\n".join(map(str, broken[:3]))


CORPUS = REPO_ROOT / "tests" / "corpus"
"""Real captured outputs, each with a `.source.txt` naming where it came from (tests/corpus/README.md)."""
CAPTURES = REPO_ROOT / "tests" / "captures"
"""Real captures of single tools, each beside its `.source.txt`: the parsers', the live sources' and the fabric's."""
OPENB = REPO_ROOT / "tests" / "sched" / "data" / "openb"
"""The openb production trace's default pod list and GPU node list, with the FGD paper's results (SOURCES.md there)."""
CATALOG_DATA = REPO_ROOT / "src" / "gpufleet" / "catalog" / "data"
"""The catalogs' source tables as gpufleet ships them (SOURCES.md there)."""


@pytest.fixture(scope="session")
def corpus() -> Path:
    return CORPUS


@pytest.fixture(scope="session")
def openb() -> Path:
    return OPENB


def require_tool(*names: str, path: str | None = None) -> None:
    """Skip when a real external tool is missing; under CI=true a missing tool is a failure, not a skip. `path`
    searches there instead of $PATH."""
    missing = [n for n in names if shutil.which(n, path=path) is None]
    if missing:
        msg = f"needs {', '.join(missing)} (installed by scripts/install-components.sh)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture
def make_twin():  # type: ignore[no-untyped-def]
    from tests.twins import small_twin

    return small_twin


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (tests/pg.py)."""
    from tests.pg import PostgresServer, require_postgres

    server = PostgresServer(require_postgres())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped after the test."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.real)])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateTarget]:
    """Where a state database lives, once on each engine: a data directory's SQLite file, or a fresh PostgreSQL
    database. Whatever the test opened is closed after it."""
    from tests.pg import StateTarget

    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    target = StateTarget(tmp_path / "home", url)
    yield target
    target.close_all()


@pytest.fixture
def state_db(state: StateTarget) -> Database:
    """The state database of `state`, open."""
    return state.open()
