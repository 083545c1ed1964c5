"""Restarts never replay old faults. An agent that lost its spool reads the node's kernel log again under a new
incarnation: the real lines of a captured log, judged again by a fresh detector, open nothing new and store nothing
twice; a line the log had not held before still opens its incident. A restarted control plane shows each node's
recent kernel log from its state."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.detectors.seen import NodeSeen
from gpufleet.model import IncidentState
from gpufleet.model.observe import Record
from gpufleet.parsers.kernel.kmsg import parse_kmsg
from gpufleet.state import Database
from tests.control.helpers import T0, Clock, batch, inventory, plane_at

LOG = "burst_xid79_sxid_gpud.log"  # a real kernel log: an Xid 79 and the SXid lines that follow it


def judged(corpus: Path, now: float, extra: str = "") -> list[Record]:
    """The log's lines as an agent with a fresh detector judges them at `now`, numbered from 1 (a new spool)."""
    events = parse_kmsg((corpus / LOG).read_text() + extra, host="n1")
    seen = NodeSeen(kernel={"n1": events})
    findings = KernelDetector({}).detect(now, seen)
    return [Record(k, body) for k, body in enumerate([*seen.reports, *findings], start=1)]


def test_a_log_read_again_under_a_new_incarnation_opens_nothing_new(
    corpus: Path, state_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    plane = plane_at(state_db, clock)
    first = judged(corpus, T0)
    plane.ingest(batch("n1", first, incarnation="before"))
    opened = sorted(plane.book.incidents)
    assert opened
    for inc_id in opened:
        plane.transition(inc_id, IncidentState.resolved, "ops")
    stored = state_db.one("SELECT COUNT(*) FROM events WHERE node = 'n1'")

    clock.now = T0 + 7 * 86_400  # a week later the agent starts with an empty --data-dir
    again = judged(corpus, clock.now)
    with caplog.at_level(logging.WARNING, logger="gpufleet.control"):
        ack = plane.ingest(batch("n1", again, incarnation="after", when=clock.now))
    assert (ack.acked, ack.stored, ack.duplicates) == (len(again), 0, len(again))
    assert sorted(plane.book.incidents) == opened and not plane.book.open_incidents()
    assert state_db.one("SELECT COUNT(*) FROM events WHERE node = 'n1'") == stored
    assert sum("taken before from another stream" in r.getMessage() for r in caplog.records) == 1

    new_line = "[ 9999.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n"
    later = judged(corpus, clock.now, new_line)
    fresh = [Record(len(again) + r.seq, r.body) for r in later]
    plane.ingest(batch("n1", fresh, incarnation="after", when=clock.now))
    assert len(plane.book.open_incidents()) == 1  # the new line, and only it


def test_a_restarted_control_plane_shows_the_nodes_recent_kernel_log(corpus: Path, state_db: Database) -> None:
    plane = plane_at(state_db, Clock())
    plane.ingest(batch("n1", judged(corpus, T0), inventory=inventory("n1")))
    shown = [r.raw for r in plane.fleet.nodes["n1"].kernel_log]
    assert shown
    restarted = plane_at(state_db, Clock())
    assert [r.raw for r in restarted.fleet.nodes["n1"].kernel_log] == shown
