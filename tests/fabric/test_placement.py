"""Placement's view of the fabric: rails per node, leaf health and uplink capacity, from a real capture, and a gang
that keeps off a leaf with an uplink down."""

from __future__ import annotations

from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, Link
from gpufleet.fabric.placement import placement_health
from gpufleet.model import Severity
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.sched.framework.scheduler import Scheduler
from tests.conftest import CAPTURES
from tests.sched.k8s_objects import knode, kpod, snap

CAPTURES = CAPTURES / "ibsim"


def _captured() -> FabricGraph:
    """ibsim's 2-spine/4-leaf fat tree as captured: leaf1's uplink on port 35 was unlinked."""
    return from_ibnetdiscover(parse_ibnetdiscover((CAPTURES / "ibnetdiscover.txt").read_text()))


def _whole() -> FabricGraph:
    graph = _captured()
    graph.add_link(Link(End("leaf1", 35), End("spine1", 1), 4, "HDR"))
    return graph


def test_rails_and_a_leaf_short_of_an_uplink_from_a_real_capture() -> None:
    health = placement_health(_captured())
    assert health.rails["node01"] == {0: "leaf1"}
    assert health.rails["node05"] == {0: "leaf3", 1: "leaf4"}  # a dual-port HCA: a rail per port
    leaf1 = health.leaves["leaf1"]
    assert leaf1.state == "degraded" and leaf1.uplink_capacity == 0.5
    assert leaf1.reasons == ("1 of 2 uplinks missing (it has 1)",)
    assert {name: h.state for name, h in health.leaves.items() if name != "leaf1"} == dict.fromkeys(
        ("leaf2", "leaf3", "leaf4"), "ok"
    )
    assert health.node_state("node02")[:2] == ("degraded", 0.5)
    assert health.node_state("node06") == ("ok", 1.0, ())
    assert health.node_state("not-in-the-fabric") == ("ok", 1.0, ())  # unknown is ok
    assert placement_health(_whole()).leaves["leaf1"].state == "ok"


def test_findings_slow_and_down_links() -> None:
    graph = _whole()
    flap = FabricFinding(
        "link-flap", Severity.critical, "went down 4 times in 10 min", "reseat", (End("leaf3", 35), End("spine1", 3))
    )
    cable = FabricFinding("symbol-errors", Severity.warning, "1234 symbol errors", "clean", (End("node07/mlx5_0", 2),
                          End("leaf4", 3)))  # fmt: skip
    congestion = FabricFinding("xmit-discards", Severity.warning, "discards", "", port=End("leaf2", 35))
    graph.link_at(End("leaf4", 36)).width = 2  # type: ignore[union-attr]  # trained at 2x
    for end in (End("leaf2", 1), End("leaf2", 2)):
        graph.link_at(end).up = False  # type: ignore[union-attr]
    health = placement_health(graph, [flap, cable, congestion])
    leaf3 = health.leaves["leaf3"]
    assert leaf3.state == "degraded" and leaf3.uplink_capacity == 1.0
    assert "uplink leaf3/35 <-> spine1/3: link-flap (critical)" in leaf3.reasons[0]
    leaf4 = health.leaves["leaf4"]
    assert leaf4.state == "degraded" and leaf4.uplink_capacity == 0.75
    assert leaf4.reasons == ("uplink spine2/4 <-> leaf4/36 runs at 100 Gb/s (2xHDR), below the 200 Gb/s of the others",)
    assert health.leaves["leaf2"].state == "down"  # both its nodes' cables are down; a congested port is no matter
    assert health.leaves["leaf2"].reasons[0] == "all 2 of its links to the nodes are down"
    assert health.cables["node07"] == ("cable node07/mlx5_0/2 <-> leaf4/3: symbol-errors (warning)",)
    assert health.node_state("node03")[0] == "down"


def test_an_intended_fabric_says_how_many_uplinks_a_leaf_should_have() -> None:
    intended = _whole()
    health = placement_health(_captured(), expected=intended)
    assert health.leaves["leaf1"].state == "degraded"
    lonely = _captured()
    lonely.links = [link for link in lonely.links if link.key != (End("leaf1", 36), End("spine2", 1))]
    lonely._by_end = None
    assert placement_health(lonely, expected=intended).leaves["leaf1"].state == "down"


def test_scheduler_names_match_fabric_hosts_by_short_name() -> None:
    names = [f"node0{i}.cluster.local" for i in range(1, 9)]
    health = placement_health(_captured(), names=names)
    assert health.rails["node01.cluster.local"] == {0: "leaf1"}


def _gang_plan(graph: FabricGraph, members: int) -> list[str]:
    """Where a gang of `members` whole 8-GPU nodes lands on node01..node08 of the captured fabric."""
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    s = snap(
        *[knode(f"node0{i}") for i in range(1, 9)], *[kpod(f"g-{i}", gpus=8, labels=group) for i in range(members)]
    )
    s.fabric_health = placement_health(graph)
    result = Scheduler.from_snapshot(s).plan(s.pending("gpufleet"), s.gangs)
    assert not result.failures, result.failures
    return sorted(p.node for p in result.placements)


def test_a_gang_keeps_off_a_leaf_with_an_uplink_down() -> None:
    # node01 and node02 hang off leaf1, the tightest leaf group that holds a gang of two: taken when leaf1 is
    # whole, left alone while it is short of an uplink
    assert _gang_plan(_whole(), 2) == ["node01", "node02"]
    assert _gang_plan(_captured(), 2) == ["node03", "node04"]


def test_a_gang_that_fits_nowhere_else_still_uses_the_degraded_leaf() -> None:
    assert _gang_plan(_captured(), 8) == [f"node0{i}" for i in range(1, 9)]
