"""The state database's query helper: filters that are set become the WHERE clause, in order."""

from __future__ import annotations

from gpufleet.state.db import Database, where


def test_where_keeps_only_the_filters_that_are_set() -> None:
    assert where({"state": None, "node": ""}) == ("", [])
    assert where({"state": "open", "node": None}) == (" WHERE state = ?", ["open"])
    assert where({"kind": ["kmsg", "link"], "node": "n1"}, "state != 'resolved'") == (
        " WHERE state != 'resolved' AND kind IN (?, ?) AND node = ?",
        ["kmsg", "link", "n1"],
    )


def test_where_runs_against_sqlite() -> None:
    db = Database(":memory:")
    db.execute("CREATE TABLE t (kind TEXT, node TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [("kmsg", "a"), ("link", "a"), ("kmsg", "b"), ("finding", "a")])
    clause, args = where({"kind": ["kmsg", "link"], "node": "a"})
    assert sorted(db.query(f"SELECT kind FROM t{clause}", args)) == [("kmsg",), ("link",)]
