"""The control plane's tables on both engines: a batch stored with its stream position and inventory in one
transaction, the partial unique index that refuses a record twice (but not the control plane's own events), and
the event list's filters."""

from __future__ import annotations

import pytest

from gpufleet.control.store import CONTROL_AGENT, StateStore
from gpufleet.model.observe import KernelReport, Record
from gpufleet.state import Database
from tests.control.helpers import T0, batch, inventory, lost_gpu


def _records(node: str, *seqs: int) -> list[Record]:
    return [Record(k, lost_gpu(node, T0 + k, gpu=k % 8)) for k in seqs]


def test_a_batch_its_stream_and_its_inventory_are_stored_together(state_db: Database) -> None:
    store = StateStore(state_db)
    first = batch("a", _records("a", 1, 2), inventory=inventory("a"))
    store.store_batch(first, first.records, 2, received=T0 + 0.5)
    assert store.streams() == {("a", "inc-1"): (2, T0, "a")}
    later = batch("a", _records("a", 3), when=T0 + 10)
    store.store_batch(later, later.records, 3, received=T0 + 10.5)
    assert store.streams() == {("a", "inc-1"): (3, T0 + 10, "a")}  # the position moves on, one row per stream
    [(node, agent, inv)] = store.inventories()
    assert (node, agent, inv) == ("a", "a", inventory("a"))
    newer = inventory("a")
    newer.driver = "560.35.03"
    store.store_batch(batch("a", [], inventory=newer), [], 3, received=T0 + 20)
    assert [i.driver for _, _, i in store.inventories()] == ["560.35.03"]  # replaced, not added


def test_a_record_is_refused_twice_by_the_database_itself(state_db: Database) -> None:
    store = StateStore(state_db)
    sent = batch("a", _records("a", 1, 2))
    store.store_batch(sent, sent.records, 2, received=T0)
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.store_batch(sent, sent.records[1:], 2, received=T0)  # the same (agent, incarnation, seq)
    assert store.count_events(agent="a") == 2  # and the failed batch left nothing
    other = batch("a", _records("a", 2), incarnation="inc-2")  # a new spool: same seq, new stream
    store.store_batch(other, other.records, 2, received=T0)
    store.add_event(T0, "incident", "gpu/a/1", "INC-000001 opened", node="a")
    store.add_event(T0, "incident", "gpu/a/1", "INC-000001 opened", node="a")  # seq 0: not a stream record
    assert store.count_events(agent=CONTROL_AGENT) == 2 and store.count_events() == 5


def test_events_are_listed_newest_first_with_filters(state_db: Database) -> None:
    store = StateStore(state_db)
    report = KernelReport(T0, "b", "xid", "Xid 48", "NVRM: Xid (PCI:0000:3b:00): 48, DBE", gpu=1, xid=48)
    a = batch("a", _records("a", 1))
    b = batch("b", [Record(1, report)])
    with state_db.transaction():
        store.store_batch(a, a.records, 1, received=T0)
        store.store_batch(b, b.records, 1, received=T0)
    store.add_event(T0 + 5, "agent", "node/a", "a is AgentLost", node="a", silent_s=12.5)
    events = store.events()
    assert [(e["kind"], e["node"]) for e in events] == [("agent", "a"), ("kmsg", "b"), ("finding", "a")]
    assert events[0]["attrs"] == {"silent_s": 12.5} and events[1]["entity"] == "gpu/b/1"
    assert [e["kind"] for e in store.events(kind="kmsg,agent")] == ["agent", "kmsg"]
    assert [e["kind"] for e in store.events(node="a", limit=1)] == ["agent"]
    assert [e["node"] for e in store.events(agent="a,b")] == ["b", "a"]
    assert events[0]["id"] > events[1]["id"] > events[2]["id"]
