"""The IB parsers against live infiniband-diags output.

ibsim simulates a fat tree (2 spines, 4 leaves, 8 HCAs), OpenSM brings it up, and the ibsim console injects counter
errors and a link fault; the tools reach the simulator through umad2sim (tests/ibsim.py).
"""

from __future__ import annotations

import pytest

from gpufleet.parsers.infiniband.diags import (
    parse_iblinkinfo,
    parse_ibnetdiscover,
    parse_ibqueryerrors,
    parse_perfquery,
)
from tests.ibsim import Fabric, fabric, wait_for  # noqa: F401

pytestmark = pytest.mark.real


def test_discovery_then_injected_faults(fabric: Fabric) -> None:  # noqa: F811
    discovered = fabric.tool("ibnetdiscover")
    assert discovered.returncode == 0, discovered.stderr
    topo = parse_ibnetdiscover(discovered.stdout)
    types = [node.type for node in topo.nodes.values()]
    assert (types.count("Switch"), types.count("Ca")) == (6, 8)
    assert len(topo.links) == 2 * 20  # 20 cables, each listed from both ends
    node01 = next(node for node in topo.nodes.values() if node.description == "node01 mlx5_0")
    assert node01.lid is not None

    for counter in ("SymbolErrorCounter=1234", "PortRcvErrors=77", "LinkDownedCounter=3"):
        fabric.sim(f'PerformanceSet "node01 mlx5_0"[1] PortCounters.{counter}', "has been set")
    counters = fabric.tool("perfquery", str(node01.lid), "1")
    assert counters.returncode == 0, counters.stderr
    [port] = parse_perfquery(counters.stdout)
    assert (port.lid, port.port, port.extended) == (node01.lid, 1, False)
    assert (port.counters["SymbolErrorCounter"], port.counters["PortRcvErrors"]) == (1234, 77)
    assert port.counters["LinkDownedCounter"] == 3
    [extended] = parse_perfquery(fabric.tool("perfquery", "-x", str(node01.lid), "1").stdout)
    assert extended.extended and extended.counters["PortXmitPkts"] >= 0

    errors = fabric.tool("ibqueryerrors")
    assert errors.returncode == 1  # ibqueryerrors exits 1 when it found errors
    report = parse_ibqueryerrors(errors.stdout)
    bad = {(p.node, p.port): p.counters for p in report.ports}
    assert bad[("node01 mlx5_0", 1)] == {
        "SymbolErrorCounter": 1234,
        "LinkDownedCounter": 3,
        "PortRcvErrors": 77,
    }
    assert report.nodes_checked == 14 and report.ports_checked is not None

    fabric.sim('Unlink "leaf1"[35]', "")

    def leaf1_35_down() -> bool:
        links = parse_iblinkinfo(fabric.tool("iblinkinfo").stdout)
        port35 = next(link for link in links if link.node == "leaf1" and link.port == 35)
        return not port35.up and port35.remote_name == ""

    wait_for(leaf1_35_down, "leaf1 port 35 to go down")
