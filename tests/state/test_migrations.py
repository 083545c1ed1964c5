"""The schema's migrations: a new database gets every table, an older one is upgraded in place (a version-1 file
written before migrations existed among them), a newer one is refused, a failed upgrade changes nothing, and
servers starting together against one PostgreSQL database all come up."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.errors import BackendError
from gpufleet.state import AuditLog, Database, IncidentTable, SQLiteDatabase, open_state
from gpufleet.state.migrations import migrate, version
from gpufleet.state.schema import MIGRATIONS, SCHEMA_VERSION, Migration
from gpufleet.state.tokens import TokenStore
from tests.conftest import REPO_ROOT
from tests.pg import StateTarget

DATA = Path(__file__).parent / "data"
TABLES = (
    "meta", "streams", "events", "inventory", "incidents", "audit", "remediation_steps", "remediation_failures",
    "breaker", "tokens", "twin_checkpoint", "twin_actions",
)  # fmt: skip


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def test_a_new_database_gets_every_table(state_db: Database) -> None:
    assert version(state_db) == SCHEMA_VERSION
    assert state_db.query("SELECT key FROM meta") == [("schema_version",)]
    for table in TABLES[1:]:
        assert state_db.query(f"SELECT * FROM {table}") == []


def test_opening_again_changes_nothing(state: StateTarget) -> None:
    db = state.open()
    IncidentTable(db).save([_incident(1)], counter=2)
    db.close()
    again = state.open()
    assert version(again) == SCHEMA_VERSION and migrate(again) == SCHEMA_VERSION
    assert IncidentTable(again).get("INC-000001") is not None


def test_an_older_database_is_upgraded_in_place(state: StateTarget) -> None:
    db = state.open()
    db.execute("DROP TABLE twin_actions")
    db.execute("DROP TABLE twin_checkpoint")
    db.set_meta("schema_version", "1")
    AuditLog(db).append(actor="alice", action="cordon", target="node/a", decision="done")
    db.close()
    again = state.open()
    assert version(again) == SCHEMA_VERSION
    assert again.query("SELECT scenario FROM twin_checkpoint") == []
    assert [e.actor for e in AuditLog(again).entries()] == ["alice"]


def _load_v1(path: Path, extra: str = "") -> None:
    con = sqlite3.connect(path)
    con.executescript((DATA / "state-v1.sql").read_text() + extra)
    con.close()


def test_a_version_1_file_from_before_migrations_is_upgraded(tmp_path: Path) -> None:
    _load_v1(tmp_path / "state.db")
    db = open_state(tmp_path)
    assert version(db) == SCHEMA_VERSION
    incidents = IncidentTable(db)
    assert [b["id"] for b in incidents.list()] == ["INC-000002", "INC-000001"]
    assert incidents.next_number() == 3
    assert [t.name for t in TokenStore(db).list()] == ["ci-bot"]
    log = AuditLog(db)
    log.append(actor="bob", action="drain", target="node/n-001", decision="done")
    assert [(e.seq, e.actor) for e in log.entries()] == [(1, "admin"), (2, "bob")]  # numbering goes on
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM audit")  # the old triggers still hold
    db.execute("INSERT INTO twin_actions(scenario, time, action, args) VALUES ('s', 1, 'cordon', '[]')")
    db.close()


def test_a_version_1_file_keeps_the_twin_journal_it_made_itself(tmp_path: Path) -> None:
    # the tables exactly as the journal created them before they were in the schema
    journal = """
    CREATE TABLE twin_checkpoint (id INTEGER PRIMARY KEY CHECK (id = 1), scenario TEXT NOT NULL, time REAL NOT NULL,
        incarnation TEXT NOT NULL, agents TEXT NOT NULL);
    CREATE TABLE twin_actions (id INTEGER PRIMARY KEY AUTOINCREMENT, scenario TEXT NOT NULL, time REAL NOT NULL,
        action TEXT NOT NULL, args TEXT NOT NULL);
    INSERT INTO twin_checkpoint VALUES (1, 'scenario#1', 12.5, 'inc', '{}');
    INSERT INTO twin_actions(scenario, time, action, args) VALUES ('scenario#1', 3.0, 'cordon', '["n-001"]');
    """
    _load_v1(tmp_path / "state.db", journal)
    db = open_state(tmp_path)
    assert version(db) == SCHEMA_VERSION
    assert db.query("SELECT scenario, time FROM twin_checkpoint") == [("scenario#1", 12.5)]
    assert db.query("SELECT action FROM twin_actions") == [("cordon",)]
    db.close()


def test_a_database_from_a_newer_gpufleet_is_refused(state: StateTarget) -> None:
    db = state.open()
    db.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    db.close()
    with pytest.raises(BackendError, match="newer gpufleet"):
        state.open()


def test_a_failed_upgrade_changes_nothing(state_db: Database) -> None:
    broken = Migration(SCHEMA_VERSION + 1, "a broken one", ("CREATE TABLE extra (x {int})", "SELECT * FROM nowhere"))
    with pytest.raises(Exception, match="nowhere"):
        migrate(state_db, (*MIGRATIONS, broken))
    assert version(state_db) == SCHEMA_VERSION
    with pytest.raises(Exception, match="extra"):
        state_db.query("SELECT * FROM extra")  # created, then rolled back with the rest
    fixed = Migration(SCHEMA_VERSION + 1, "fixed", ("CREATE TABLE extra (x {int})",))
    assert migrate(state_db, (*MIGRATIONS, fixed)) == SCHEMA_VERSION + 1
    assert state_db.query("SELECT * FROM extra") == []


CHILD = """
import sys, time
from pathlib import Path
import psycopg  # imported before the start line, so the children start migrating together
from gpufleet.state import open_state
from gpufleet.state.migrations import version
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
db = open_state(Path(sys.argv[2]), sys.argv[3])
print(version(db))
"""


@pytest.mark.real
def test_servers_starting_together_all_migrate_one_postgresql(pg_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(go), str(tmp_path), pg_url],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    time.sleep(1.5)  # let every child import and wait at the line
    go.touch()
    results = [c.communicate(timeout=60) for c in children]
    assert [
        (c.returncode, err.strip().splitlines()[-1:] if err.strip() else [])
        for c, (_, err) in zip(children, results, strict=True)
    ] == [(0, [])] * 4
    assert [out.strip() for out, _ in results] == [str(SCHEMA_VERSION)] * 4
    db = open_state(tmp_path, pg_url)
    assert db.one("SELECT COUNT(*) FROM meta WHERE key = 'schema_version'") == (1,)
    db.close()


def _incident(number: int) -> dict[str, object]:
    return {
        "id": f"INC-{number:06d}", "cause": "gpu-lost", "entity": {"kind": "gpu", "node": "a", "index": 0},
        "severity": "critical", "state": "open", "first_seen": 1.0, "last_seen": 1.0, "count": 1,
    }  # fmt: skip


def test_sqlite_database_is_the_default(tmp_path: Path) -> None:
    assert isinstance(open_state(tmp_path), SQLiteDatabase)


def test_a_version_1_file_from_before_tokens_gets_them(tmp_path: Path) -> None:
    # released version-1 files were made before the tokens table joined version 1's schema
    _load_v1(tmp_path / "state.db", "DROP INDEX tokens_secret; DROP TABLE tokens;")
    db = open_state(tmp_path)
    assert version(db) == SCHEMA_VERSION
    tokens = TokenStore(db)
    _, secret = tokens.create("admin", "admin", "test")
    assert tokens.authenticate(secret) is not None
    db.close()
