"""The discovered fabric from real ibnetdiscover and iblinkinfo output (captured from ibsim's fat tree)."""

from __future__ import annotations

from gpufleet.fabric.discover import add_link_states, from_iblinkinfo, from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph, NodeKind, hca_name, node_name
from gpufleet.model.fabric import normalise_guid
from gpufleet.parsers.infiniband.diags import parse_iblinkinfo, parse_ibnetdiscover, scan_ibnetdiscover
from tests.conftest import CAPTURES

CAPTURES = CAPTURES / "ibsim"


def _discovered() -> FabricGraph:
    graph = from_ibnetdiscover(parse_ibnetdiscover((CAPTURES / "ibnetdiscover.txt").read_text()))
    add_link_states(graph, parse_iblinkinfo((CAPTURES / "iblinkinfo.txt").read_text()))
    return graph


def test_nodes_links_and_tiers_from_a_real_capture() -> None:
    graph = _discovered()
    assert len(graph.switches()) == 6 and len(graph.hcas()) == 8
    # 20 cables in the topology file; this capture was taken with leaf1 port 35 unlinked
    assert len(graph.links) == 19 and not graph.conflicts
    assert {n.name for n in graph.switches() if n.tier == "spine"} == {"spine1", "spine2"}
    assert {n.name for n in graph.switches() if n.tier == "leaf"} == {"leaf1", "leaf2", "leaf3", "leaf4"}
    node05 = graph.nodes["node05/mlx5_0"]
    assert node05.kind is NodeKind.hca and node05.host == "node05"
    assert graph.peer(End("node05/mlx5_0", 2)) == End("leaf4", 1)
    link = graph.link_at(End("leaf1", 1))
    assert link is not None and (link.width, link.speed, link.rate_gbps) == (4, "HDR", 200.0)
    assert {link.a_lid, link.b_lid} == {4, 2}  # the switch's LID and the HCA port's
    assert graph.nodes["leaf1"].lid == 4 and graph.nodes["leaf1"].guid == "0x0000000000200002"


def test_iblinkinfo_adds_idle_ports_and_could_be_hints() -> None:
    graph = _discovered()
    assert graph.idle_ports[End("leaf1", 3)] == "Down/Polling"
    link = graph.link_at(End("leaf1", 1))
    assert link is not None and graph.could_be[link.key].startswith("Could be 12X")


def test_iblinkinfo_alone_gives_the_same_cables() -> None:
    alone = from_iblinkinfo(parse_iblinkinfo((CAPTURES / "iblinkinfo.txt").read_text()))
    assert {link.key for link in alone.links} == {link.key for link in _discovered().links}


def test_a_cable_listed_differently_from_its_two_ends_is_a_conflict() -> None:
    text = (CAPTURES / "ibnetdiscover.txt").read_text()
    # node02's HCA claims leaf1 port 1, which leaf1 lists as node01's: two nodes with one GUID look like this
    edited = text.replace('[1](100003) \t"S-0000000000200002"[2]', '[1](100003) \t"S-0000000000200002"[1]')
    assert edited != text
    graph = from_ibnetdiscover(scan_ibnetdiscover(edited))
    assert graph.conflicts and "leaf1/1" in graph.conflicts[0]


def test_names() -> None:
    assert hca_name("dgx-017 mlx5_3") == ("dgx-017", "mlx5_3")
    assert hca_name("MT4123 ConnectX6   Mellanox Technologies") is None
    assert node_name("dgx-017 mlx5_3", "0x1", NodeKind.hca) == "dgx-017/mlx5_3"
    assert node_name("", "0x00000000000000ab", NodeKind.switch) == "0x00000000000000ab"
    assert node_name("leaf1", "0x2", NodeKind.switch, {"leaf1"}) == "0x2"  # a duplicate description
    assert normalise_guid("S-0000000000200002") == normalise_guid("0x200002") == "0x0000000000200002"
    assert normalise_guid("zz") == ""
