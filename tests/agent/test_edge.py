"""When an agent reads and sends its node's inventory (the real agent and the twin's agents share this)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from gpufleet.agent.edge import INVENTORY_CHECK_S, INVENTORY_EVERY_S, EdgeAgent, InventoryCadence
from gpufleet.agent.pusher import BatchPusher, NodeState
from gpufleet.agent.spool import RecordSpool
from gpufleet.model import RootCause
from gpufleet.model.observe import Finding, NodeInventory
from gpufleet.telemetry.frame import MetricFrame
from tests.health.test_node_health import T0, fill, frame


def test_inventory_is_read_every_check_and_sent_when_it_changes_or_goes_stale() -> None:
    versions = {"driver": "550.54.15"}
    reads: list[float] = []

    def read() -> NodeInventory:
        reads.append(now)
        return NodeInventory(hostname="n1", driver=versions["driver"])

    cadence = InventoryCadence()
    now = 1000.0
    assert cadence.due(now, read) == NodeInventory(hostname="n1", driver="550.54.15")  # the first is always sent
    now += INVENTORY_CHECK_S - 1
    assert cadence.due(now, read) is None and len(reads) == 1  # not looked at again before the check interval
    now += 1
    assert cadence.due(now, read) is None and len(reads) == 2  # looked at, unchanged: not sent
    versions["driver"] = "550.90.07"
    now += INVENTORY_CHECK_S
    sent = cadence.due(now, read)
    assert sent is not None and sent.driver == "550.90.07"  # changed: sent at the next check
    now += INVENTORY_EVERY_S
    assert cadence.due(now, read) == sent  # unchanged but stale: sent again


def test_a_restarted_agent_does_not_report_an_ecc_error_it_reported_before(tmp_path: Path) -> None:
    """The detectors' latched state (the double-bit ECC count already reported) is kept with the spool."""
    path = tmp_path / "spool-node-a.db"

    def edge() -> tuple[EdgeAgent, MetricFrame]:
        f = frame()
        return EdgeAgent("node-a", f, RecordSpool(path), NodeState(), lambda: NodeInventory(hostname="node-a")), f

    def dbe_findings(agent: EdgeAgent) -> list[Finding]:
        records = agent.spool.peek(10_000)
        agent.spool.ack(records[-1].seq if records else 0)
        return [r.body for r in records if isinstance(r.body, Finding) and r.body.cause is RootCause.ecc_dbe]

    first, f = edge()
    fill(f, T0, dbe=2.0)
    first.after_collect(f)
    assert [x.entity.index for x in dbe_findings(first)] == [1]
    first.spool.close()

    again, f = edge()  # the agent restarts on its data directory
    fill(f, T0 + 60, dbe=2.0)
    again.after_collect(f)
    assert dbe_findings(again) == []
    fill(f, T0 + 61, dbe=3.0)  # a new error still is one
    again.after_collect(f)
    assert [x.entity.index for x in dbe_findings(again)] == [1]


def test_a_spool_deleted_under_a_running_agent_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spool = RecordSpool(tmp_path / "data" / "spool-n.db")
    assert spool.new and spool.lost() is None
    pusher = BatchPusher(spool, NodeState(), "http://127.0.0.1:9", lambda: None, agent="n", node="n", interval=1.0)
    try:
        shutil.rmtree(tmp_path / "data")
        with caplog.at_level(logging.ERROR, logger="gpufleet.agent"):
            pusher.check_spool()
            pusher.check_spool()
        said = [r.getMessage() for r in caplog.records if "spool" in r.getMessage()]
        assert len(said) == 1 and "was deleted while the agent runs" in said[0]
        assert not RecordSpool(tmp_path / "other.db").lost()
    finally:
        pusher.stop()
