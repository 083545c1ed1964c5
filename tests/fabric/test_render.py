"""A fabric graph printed as ibnetdiscover prints it: the real capture comes back line for line, and any graph,
up to a 16k-HCA SuperPOD, reads back the same through the real tool's parser."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph, NodeKind
from gpufleet.fabric.intended import graph_from_ibnetdiscover, intended_graph
from gpufleet.fabric.render import to_ibnetdiscover
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests.conftest import CAPTURES

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"
STAMP = "Sun Nov 22 06:00:37 2026"


def _round_trip(graph: FabricGraph) -> FabricGraph:
    return from_ibnetdiscover(parse_ibnetdiscover(to_ibnetdiscover(graph, generated=STAMP)))


def _shape(graph: FabricGraph) -> tuple[dict[str, Any], dict[Any, Any]]:
    nodes = {n.name: (n.kind, n.host, n.ports if n.is_switch else None) for n in graph.nodes.values()}
    links = {link.key: (link.width, link.speed) for link in graph.links if link.up}
    return nodes, links


def _lids(graph: FabricGraph) -> dict[Any, int | None]:
    """Each switch's LID and each HCA port's."""
    out: dict[Any, int | None] = {n.name: n.lid for n in graph.switches()}
    for link in graph.links:
        for end, lid in ((link.a, link.a_lid), (link.b, link.b_lid)):
            if not graph.nodes[end.node].is_switch:
                out[end] = lid
    return out


def _cluster(nodes: int, rails: int = 8, **fabric: Any) -> Any:
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "dgx", "count": nodes, "nics": {"count": rails}}], "fabric": fabric}
    )
    return build_cluster("c", body)


def test_the_capture_prints_back_as_the_tool_printed_it() -> None:
    original = CAPTURE.read_text()
    graph = graph_from_ibnetdiscover(original, "capture")
    printed = to_ibnetdiscover(graph, generated=STAMP)
    ours, theirs = printed.splitlines(), original.splitlines()
    assert ours[:3] == theirs[:3]  # the header, but for where discovery started (ibsim's SM port)
    assert [line.replace("vendid=0x2c9", "vendid=0x0") for line in ours[4:]] == theirs[4:]


def test_a_graph_round_trips_with_its_guids_and_lids() -> None:
    graph = graph_from_ibnetdiscover(CAPTURE.read_text(), "capture")
    back = _round_trip(graph)
    assert _shape(back) == _shape(graph) and _lids(back) == _lids(graph)
    assert {n.name: n.guid for n in back.nodes.values()} == {n.name: n.guid for n in graph.nodes.values()}


def test_a_built_fabric_gets_guids_and_lids_made_up_deterministically() -> None:
    graph = intended_graph(_cluster(8, rails=4, leafRadix=8))
    for node in graph.nodes.values():
        node.guid = ""  # nothing but names
    first, second = to_ibnetdiscover(graph, generated=STAMP), to_ibnetdiscover(graph, generated=STAMP)
    assert first == second
    back = _round_trip(graph)
    assert _shape(back) == _shape(graph)
    lids = _lids(back)
    assert None not in lids.values() and 0 not in lids.values() and len(set(lids.values())) == len(lids)
    guids = [n.guid for n in back.nodes.values()]
    assert all(g.startswith("0x0002c903") for g in guids) and len(set(guids)) == len(guids)
    assert sorted(n.lid or 0 for n in back.switches()) == list(range(1, len(back.switches()) + 1))  # switches first


def test_the_twin_keeps_its_lids_and_only_up_cables_are_discovered() -> None:
    graph = intended_graph(_cluster(2, rails=2, leafRadix=8))
    leaf = graph.nodes["leaf-su1-r0"]
    leaf.lid = 77
    cable = graph.link_at(End("dgx-000/mlx5_0", 1))
    other = graph.link_at(End("dgx-001/mlx5_1", 1))
    assert cable is not None and other is not None
    cable.up = False
    if other.a.node.startswith("dgx"):
        other.a_lid = 500
    else:
        other.b_lid = 500
    back = _round_trip(graph)
    assert back.nodes["leaf-su1-r0"].lid == 77 and _lids(back)[End("dgx-001/mlx5_1", 1)] == 500
    assert back.link_at(End("dgx-000/mlx5_0", 1)) is None and len(back.links) == len(graph.links) - 1


@pytest.mark.slow
def test_a_16k_hca_superpod_round_trips() -> None:
    graph = intended_graph(_cluster(2048, leafRadix=64))
    assert len(graph.hcas()) == 16_384 and {n.tier for n in graph.switches()} == {"leaf", "spine", "core"}
    back = _round_trip(graph)
    assert _shape(back) == _shape(graph)
    lids = _lids(back)
    assert len(set(lids.values())) == len(lids) == 16_384 + len(graph.switches())
    assert back.nodes["leaf-su64-r7"].tier == "leaf" and back.nodes["core-1"].tier == "core"
    assert all(n.kind is NodeKind.hca for n in back.hcas()) and not back.conflicts
