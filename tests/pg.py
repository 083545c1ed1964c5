"""A real PostgreSQL server for tests: scripts/start-postgres.sh in a temporary directory, on a free port, started
once per test process and stopped (scripts/stop-postgres.sh) when the session ends. Each test that asks gets a
database of its own (CREATE DATABASE is a file copy of the empty template: tens of milliseconds).

The fixtures are in tests/conftest.py: `postgres` (the server), `pg_url` (a fresh database), `state` (a place for
the state database, parametrized over SQLite and PostgreSQL) and `state_db` (that database, open).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.state import Database, open_state
from tests.apiclient import free_port
from tests.conftest import REPO_ROOT, require_tool

TOOLS = ("initdb", "pg_ctl", "postgres")


def pg_bin() -> str:
    """Where initdb and pg_ctl are: $PG_BIN, PATH, or the newest /usr/lib/postgresql/*/bin (Debian keeps them
    off PATH)."""
    if os.environ.get("PG_BIN"):
        return os.environ["PG_BIN"]
    found = shutil.which("pg_ctl")
    if found:
        return str(Path(found).parent)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    return str(versions[0]) if versions else ""


def require_postgres() -> str:
    """The server's bin directory; skips (fails under CI=true) when PostgreSQL is not installed."""
    path = pg_bin()
    require_tool(*TOOLS, path=path or os.devnull)
    if os.geteuid() == 0:
        require_tool("runuser")  # PostgreSQL will not run as root
    return path


class PostgresServer:
    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        # not under pytest's tmp_path: its parents are private to root, and the server runs as `postgres`
        self.root = Path(tempfile.mkdtemp(prefix="gpufleet-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.url = ""
        self._names = itertools.count(1)
        self._admin: Any = None

    def _script(self, name: str, *args: str) -> str:
        proc = subprocess.run(
            [str(REPO_ROOT / "scripts" / name), *args],
            env=dict(os.environ, PG_BIN=self.bin_dir),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed: {proc.stderr[-2000:]}")
        return proc.stdout

    def start(self) -> None:
        self.url = self._script("start-postgres.sh", str(self.data), str(free_port())).strip().splitlines()[-1]

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        try:
            self._script("stop-postgres.sh", str(self.data))
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def admin(self, sql: str) -> None:
        import psycopg

        if self._admin is None:
            self._admin = psycopg.connect(self.url, autocommit=True)
        self._admin.execute(sql)

    def create_database(self) -> str:
        """A new empty database; its URL."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def drop_database(self, url: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


@dataclass
class StateTarget:
    """Where a test's state database lives: a data directory and, for PostgreSQL, a URL. `open()` opens it as a
    server would (again after a close: a restart)."""

    directory: Path
    url: str | None = None
    opened: list[Database] = field(default_factory=list)

    @property
    def dialect(self) -> str:
        return "postgresql" if self.url else "sqlite"

    def open(self) -> Database:
        db = open_state(self.directory, self.url)
        self.opened.append(db)
        return db

    def close_all(self) -> None:
        for db in self.opened:
            db.close()
