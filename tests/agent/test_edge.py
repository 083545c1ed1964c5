"""When an agent reads and sends its node's inventory (the real agent and the twin's agents share this)."""

from __future__ import annotations

from gpufleet.agent.edge import INVENTORY_CHECK_S, INVENTORY_EVERY_S, InventoryCadence
from gpufleet.model.observe import NodeInventory


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
