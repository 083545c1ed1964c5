"""The topology model schedulers are fed from: tiers, each leaf's hosts, each higher switch's children, and the one
home leaf of a host cabled to several."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import graph_from_ibnetdiscover, load_expected
from gpufleet.fabric.topology import topology_from_graph
from tests.conftest import CAPTURES, REPO_ROOT

IBSIM = REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml"
SU = REPO_ROOT / "examples" / "clusters" / "dgx-h100-su.yaml"


def test_the_ibsim_fat_tree() -> None:
    topology = topology_from_graph(load_expected(IBSIM))
    assert [s.name for s in topology.tier("leaf")] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert topology.switches["leaf3"].hosts == ("node05", "node06", "node07", "node08")
    assert topology.switches["leaf4"].hosts == ("node05", "node06", "node07", "node08")
    assert topology.switches["spine1"].children == ("leaf1", "leaf2", "leaf3", "leaf4")
    assert topology.switches["spine1"].level == 1 and topology.switches["leaf1"].level == 0
    # the dual-port HCAs: port 1 on leaf3, port 2 on leaf4; one rail on each, so the first rail's leaf is home
    node05 = topology.hosts["node05"]
    assert (node05.home, node05.leaves, node05.rails) == ("leaf3", ("leaf3", "leaf4"), 2)
    assert topology.homed("leaf3") == ["node05", "node06", "node07", "node08"] and topology.homed("leaf4") == []
    assert topology.hosts["node01"].leaves == ("leaf1",)
    assert topology.nvlink_domains() == {}


def test_a_discovered_fabric_gives_what_was_found() -> None:
    # the capture was taken with leaf1's cable to spine1 unplugged
    graph = graph_from_ibnetdiscover((CAPTURES / "ibsim" / "ibnetdiscover.txt").read_text(), "capture")
    topology = topology_from_graph(graph)
    assert topology.switches["spine1"].children == ("leaf2", "leaf3", "leaf4")
    assert topology.switches["spine2"].children == ("leaf1", "leaf2", "leaf3", "leaf4")
    assert sorted(topology.hosts) == [f"node0{i}" for i in range(1, 9)]


def test_rail_optimised_hosts_live_under_their_first_rails_leaf() -> None:
    topology = topology_from_graph(load_expected(SU))
    host = topology.hosts["dgx-000"]
    assert host.rails == 8 and host.leaves == tuple(f"leaf-su1-r{r}" for r in range(8))
    assert {h.home for h in topology.hosts.values()} == {"leaf-su1-r0"}
    assert len(topology.homed("leaf-su1-r0")) == 32


def _graph(cables: list[tuple[str, str]], tiers: dict[str, str] | None = None) -> FabricGraph:
    graph = FabricGraph(source="test")
    for a, b in cables:
        for end in (a, b):
            name = end.rsplit("/", 1)[0]
            if name not in graph.nodes:
                kind = NodeKind.hca if name.count("/") else NodeKind.switch
                host = name.split("/")[0] if kind is NodeKind.hca else ""
                graph.add_node(Node(name, kind, host=host, tier=(tiers or {}).get(name, "")))
        graph.add_link(
            Link(End(a.rsplit("/", 1)[0], int(a.rsplit("/", 1)[1])), End(b.rsplit("/", 1)[0], int(b.rsplit("/", 1)[1])))
        )
    graph.assign_tiers()
    return graph


def test_the_leaf_with_most_of_a_hosts_rails_is_its_home() -> None:
    graph = _graph(
        [
            ("h1/mlx5_0/1", "L1/1"),
            ("h1/mlx5_1/1", "L2/1"),
            ("h1/mlx5_2/1", "L2/2"),
            ("L1/10", "S1/1"),
            ("L2/10", "S1/2"),
        ]
    )
    topology = topology_from_graph(graph)
    assert topology.hosts["h1"].home == "L2" and topology.hosts["h1"].leaves == ("L1", "L2")
    assert topology.switches["S1"].tier == "spine" and topology.switches["S1"].children == ("L1", "L2")


def test_three_tiers_and_nvlink_domains() -> None:
    graph = _graph(
        [
            ("a/mlx5_0/1", "L1/1"),
            ("b/mlx5_0/1", "L2/1"),
            ("L1/2", "S1/1"),
            ("L2/2", "S2/1"),
            ("S1/2", "C1/1"),
            ("S2/2", "C1/2"),
        ]
    )
    topology = topology_from_graph(graph, nvlink_domains={"a": "nvl72-rack1", "b": "nvl72-rack1"})
    assert [s.name for s in topology.tier("core")] == ["C1"]
    assert topology.switches["C1"].children == ("S1", "S2") and topology.switches["S2"].children == ("L2",)
    assert topology.nvlink_domains() == {"nvl72-rack1": ["a", "b"]}


def test_a_fabric_without_named_hosts_is_a_clear_error() -> None:
    graph = _graph([("L1/1", "S1/1")])
    with pytest.raises(UserError, match="no host is cabled") as caught:
        topology_from_graph(graph)
    assert "node description" in (caught.value.fix or "")


def test_switches_with_nothing_below_them_are_noted() -> None:
    graph = _graph([("h/mlx5_0/1", "L1/1"), ("L1/2", "S1/1")], tiers={"L9": "leaf"})
    graph.add_node(Node("L9", NodeKind.switch, tier="leaf"))
    topology = topology_from_graph(graph)
    assert "L9" not in topology.switches and any("L9" in note for note in topology.notes)
