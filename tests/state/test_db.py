"""The state database's interface on both engines: the query helper, transactions (commit, rollback, nesting,
atomicity across threads), upserts, inserted ids, placeholders and literal `%` and `?`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpufleet.errors import BackendError
from gpufleet.state import Database, SQLiteDatabase, open_state
from gpufleet.state.db import where
from gpufleet.state.postgres import to_pyformat


def test_where_keeps_only_the_filters_that_are_set() -> None:
    assert where({"state": None, "node": ""}) == ("", [])
    assert where({"state": "open", "node": None}) == (" WHERE state = ?", ["open"])
    assert where({"kind": ["kmsg", "link"], "node": "n1"}, "state != 'resolved'") == (
        " WHERE state != 'resolved' AND kind IN (?, ?) AND node = ?",
        ["kmsg", "link", "n1"],
    )


def test_database_of_a_path_is_sqlite() -> None:
    db = Database(":memory:")
    assert isinstance(db, SQLiteDatabase) and db.dialect == "sqlite" and db.directory is None


def _table(db: Database) -> None:
    db.execute("CREATE TABLE t (kind TEXT, node TEXT)")


def test_where_runs_on_both_engines(state_db: Database) -> None:
    _table(state_db)
    state_db.executemany("INSERT INTO t VALUES (?, ?)", [("kmsg", "a"), ("link", "a"), ("kmsg", "b"), ("finding", "a")])
    clause, args = where({"kind": ["kmsg", "link"], "node": "a"})
    assert sorted(state_db.query(f"SELECT kind FROM t{clause}", args)) == [("kmsg",), ("link",)]


def test_a_transaction_commits_whole(state_db: Database) -> None:
    _table(state_db)
    with state_db.transaction():
        state_db.execute("INSERT INTO t VALUES ('a', 'n1')")
        state_db.executemany("INSERT INTO t VALUES (?, ?)", [("b", "n1"), ("c", "n2")])
    assert state_db.one("SELECT COUNT(*) FROM t") == (3,)
    assert not state_db.in_transaction


def test_a_failed_transaction_leaves_nothing_and_the_next_one_works(state_db: Database) -> None:
    _table(state_db)
    with pytest.raises(RuntimeError, match="boom"), state_db.transaction():
        state_db.execute("INSERT INTO t VALUES ('a', 'n1')")
        state_db.executemany("INSERT INTO t VALUES (?, ?)", [("b", "n1")])
        raise RuntimeError("boom")
    assert state_db.one("SELECT COUNT(*) FROM t") == (0,)
    with state_db.transaction():
        state_db.execute("INSERT INTO t VALUES ('c', 'n1')")
    assert state_db.query("SELECT kind FROM t") == [("c",)]


def test_a_failed_statement_rolls_back_its_transaction(state_db: Database) -> None:
    state_db.execute("CREATE TABLE u (k TEXT PRIMARY KEY)")
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"), state_db.transaction():
        state_db.execute("INSERT INTO u VALUES ('x')")
        state_db.execute("INSERT INTO u VALUES ('x')")
    assert state_db.one("SELECT COUNT(*) FROM u") == (0,)
    state_db.execute("INSERT INTO u VALUES ('x')")  # the connection is usable again (PostgreSQL: not aborted)
    assert state_db.one("SELECT COUNT(*) FROM u") == (1,)


def test_nested_transactions_join_the_outer_one(state_db: Database) -> None:
    _table(state_db)
    with pytest.raises(RuntimeError), state_db.transaction():
        with state_db.transaction():
            state_db.execute("INSERT INTO t VALUES ('inner', 'n1')")
        assert state_db.in_transaction  # the inner block's end committed nothing
        raise RuntimeError("outer fails")
    assert state_db.one("SELECT COUNT(*) FROM t") == (0,)
    with state_db.transaction():
        with state_db.transaction():
            state_db.execute("INSERT INTO t VALUES ('inner', 'n1')")
        state_db.execute("INSERT INTO t VALUES ('outer', 'n1')")
    assert sorted(state_db.query("SELECT kind FROM t")) == [("inner",), ("outer",)]


def test_a_transaction_is_atomic_to_other_threads(state_db: Database) -> None:
    _table(state_db)
    inside, seen = threading.Event(), []

    def reader() -> None:
        inside.wait(5)
        seen.append(state_db.one("SELECT COUNT(*) FROM t"))  # waits for the writer's lock: never half a batch

    t = threading.Thread(target=reader)
    t.start()
    with state_db.transaction():
        state_db.execute("INSERT INTO t VALUES ('a', 'n1')")
        inside.set()
        t.join(0.2)
        state_db.execute("INSERT INTO t VALUES ('b', 'n1')")
    t.join(5)
    assert seen == [(2,)]


def test_upserts_replace_and_ignore(state_db: Database) -> None:
    state_db.set_meta("k", "one")
    state_db.set_meta("k", "two")
    assert state_db.get_meta("k") == "two" and state_db.get_meta("missing") is None
    state_db.execute("CREATE TABLE u (k TEXT PRIMARY KEY, v TEXT)")
    for v in ("first", "second"):
        state_db.execute("INSERT INTO u VALUES (?, ?) ON CONFLICT (k) DO NOTHING", ("x", v))
    assert state_db.query("SELECT v FROM u") == [("first",)]


def test_execute_returns_the_id_an_insert_made(state_db: Database) -> None:
    sql = "INSERT INTO twin_actions(scenario, time, action, args) VALUES (?, ?, ?, ?) RETURNING id"
    first = state_db.execute(sql, ("s", 1.0, "cordon", "[]"))
    second = state_db.execute(sql, ("s", 2.0, "drain", "[]"))
    assert first > 0 and second == first + 1
    assert state_db.query("SELECT id, action FROM twin_actions ORDER BY id") == [(first, "cordon"), (second, "drain")]


def test_literal_percent_and_question_marks_survive(state_db: Database) -> None:
    _table(state_db)
    state_db.executemany("INSERT INTO t VALUES (?, ?)", [("100%", "what?"), ("50", "n?")])
    assert state_db.query("SELECT node FROM t WHERE kind LIKE '%\\%%' ESCAPE '\\'") == [("what?",)]
    assert state_db.query("SELECT kind FROM t WHERE node = 'what?'") == [("100%",)]
    assert state_db.query("SELECT kind FROM t WHERE node = ? AND kind LIKE '1%'", ("what?",)) == [("100%",)]
    assert state_db.one("SELECT 'it''s ?' || ?", ("%s",)) == ("it's ?%s",)


def test_floats_keep_their_precision(state_db: Database) -> None:
    """Epoch seconds with microseconds: PostgreSQL's REAL would round them to minutes."""
    state_db.execute(
        "INSERT INTO inventory VALUES (?, ?, ?, ?)",
        ("n1", "a", 1_800_000_000.123456, "{}"),
    )
    assert state_db.one("SELECT updated FROM inventory") == (1_800_000_000.123456,)
    big = 2**62
    state_db.execute(
        "INSERT INTO streams(agent, incarnation, node, last_seq, last_time) VALUES (?, ?, ?, ?, ?)",
        ("a", "i", "n", big, 0.5),
    )
    assert state_db.one("SELECT last_seq FROM streams") == (big,)


def test_placeholders_become_pyformat_outside_quotes() -> None:
    assert (
        to_pyformat("SELECT ? FROM t WHERE a LIKE 'x%' AND b = ?") == "SELECT %s FROM t WHERE a LIKE 'x%%' AND b = %s"
    )
    assert (
        to_pyformat("SELECT '?', \"c?\", 'it''s ?' -- why?\nFROM t") == "SELECT '?', \"c?\", 'it''s ?' -- why?\nFROM t"
    )
    assert to_pyformat("SELECT 5 % 2, $$ ? % $$") == "SELECT 5 %% 2, $$ ? %% $$"


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_sqlite_file_and_its_journal_are_private(tmp_path: Path) -> None:
    db = open_state(tmp_path / "home")
    db.execute("INSERT INTO meta VALUES ('k', 'v')")
    files = [tmp_path / "home" / f"state.db{suffix}" for suffix in ("", "-wal", "-shm")]
    assert [_mode(f) for f in files] == [0o600, 0o600, 0o600]
    db.close()


def test_an_existing_world_readable_file_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = SQLiteDatabase(path)  # open, so its -wal and -shm stay
    for f in tmp_path.iterdir():
        f.chmod(0o644)
    second = SQLiteDatabase(path)
    assert {f.name: _mode(f) for f in tmp_path.iterdir()} == {
        "state.db": 0o600,
        "state.db-wal": 0o600,
        "state.db-shm": 0o600,
    }
    first.close()
    second.close()


def test_an_unopenable_file_is_a_backend_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"not a database" * 100)
    with pytest.raises(BackendError, match="state database"):
        open_state(tmp_path)
