"""Fabric validation as ibdiagnet runs it: every finding kind, made to happen and not, on the real ibsim capture and
on built fabrics; and fast enough for a 16k-HCA fabric."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gpufleet.fabric.discover import add_link_states
from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import graph_from_ibnetdiscover, intended_graph, load_expected
from gpufleet.fabric.validate import validate
from gpufleet.parsers.infiniband.diags import parse_iblinkinfo
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests.conftest import CAPTURES

CAPTURES = CAPTURES / "ibsim"
EXAMPLE = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


def _capture(linkinfo: bool = False) -> FabricGraph:
    graph = graph_from_ibnetdiscover((CAPTURES / "ibnetdiscover.txt").read_text(), "ibnetdiscover.txt")
    if linkinfo:
        add_link_states(graph, parse_iblinkinfo((CAPTURES / "iblinkinfo.txt").read_text()))
    return graph


def _kinds(findings: list[FabricFinding]) -> list[str]:
    return [f.kind for f in findings]


def _ends(finding: FabricFinding) -> set[str]:
    return {str(e) for e in finding.ends} if finding.ends else {str(finding.port)}


def _su(nodes: int = 4, **fabric: Any) -> FabricGraph:
    """A small rail-optimized fabric as built: `nodes` nodes of 4 rails under 8-port leaves."""
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "n", "count": nodes, "nics": {"count": 4}}], "fabric": {"leafRadix": 8, **fabric}}
    )
    return intended_graph(build_cluster("c", body))


def _hand(links: list[tuple[str, str]], width: int = 4, speed: str = "HDR") -> FabricGraph:
    """A discovered-looking fabric from "switch/port" and "host/device/port" ends."""
    graph = FabricGraph(source="test")
    for pair in links:
        ends = []
        for text in pair:
            owner, port = text.rsplit("/", 1)
            if owner not in graph.nodes:
                kind = NodeKind.hca if "/" in owner else NodeKind.switch
                host = owner.split("/")[0] if kind is NodeKind.hca else ""
                graph.add_node(Node(owner, kind, description=owner.replace("/", " "), host=host))
            ends.append(End(owner, int(port)))
        graph.add_link(Link(ends[0], ends[1], width=width, speed=speed))
    graph.assign_tiers()
    return graph


# --- the real capture -------------------------------------------------------------------------------------------


def test_the_capture_matches_its_manifest_but_for_the_unlinked_uplink() -> None:
    findings = validate(_capture(), load_expected(EXAMPLE))
    assert [(f.kind, f.severity, _ends(f)) for f in findings] == [
        ("missing-link", "critical", {"leaf1/35", "spine1/1"})
    ]
    message = findings[0].message
    assert "leaf1/35" in message and "spine1/1" in message and "connect leaf1/35 to spine1/1" in findings[0].fix


def test_the_capture_against_a_manifest_with_one_more_cable_and_one_wider() -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    links = body["spec"]["fabric"]["links"]
    links.append({"a": "spine1/5", "b": "leaf1/5"})
    for link in links:
        if {link["a"], link["b"]} == {"leaf2/1", "node03/mlx5_0/1"}:
            link["width"] = 8
    expected = intended_graph(build_cluster("ibsim", ClusterBody.model_validate(body["spec"])))
    findings = validate(_capture(linkinfo=True), expected)
    by_kind = {f.kind: [_ends(x) for x in findings if x.kind == f.kind] for f in findings}
    assert by_kind["missing-link"] == [{"leaf1/35", "spine1/1"}, {"leaf1/5", "spine1/5"}]
    assert by_kind["link-width"] == [{"node03/mlx5_0/1", "leaf2/1"}]
    narrow = next(f for f in findings if f.kind == "link-width")
    assert narrow.message == "link node03/mlx5_0/1 <-> leaf2/1 runs at 4X, expected 8X"  # HCA end first
    assert set(by_kind) == {"missing-link", "link-width"}  # iblinkinfo's hints do not count against a manifest


def test_the_capture_alone_shows_the_leaf_and_spine_short_of_an_uplink() -> None:
    findings = validate(_capture())
    assert [(f.kind, str(f.port)) for f in findings] == [
        ("asymmetric-uplinks", "leaf1/0"),
        ("asymmetric-uplinks", "spine1/0"),
    ]
    assert "leaf1 has 1 uplink" in findings[0].message and "2, 1 to each of 2 spines" in findings[0].message
    assert "spine1 has 3 downlinks while its peers have 4" in findings[1].message


def test_iblinkinfo_could_be_hints_without_an_expected_fabric() -> None:
    findings = validate(_capture(linkinfo=True))
    widths = [f for f in findings if f.kind == "link-width"]
    assert len(widths) == 19  # ibsim's ports all say "Could be 12X"
    assert "could run 12X" in widths[0].message and widths[0].severity == "warning"


def test_the_capture_against_itself_is_clean() -> None:
    text = (CAPTURES / "ibnetdiscover.txt").read_text()
    assert validate(_capture(), graph_from_ibnetdiscover(text, "known-good")) == []


# --- cabling against an expected fabric -----------------------------------------------------------------------


def test_a_built_fabric_against_itself_is_clean_with_and_without_expected() -> None:
    for expected in (None, _su()):
        assert validate(_su(), expected) == []
    three = _su(nodes=8, tiers=3)
    assert {n.tier for n in three.nodes.values()} >= {"leaf", "spine", "core"}
    assert validate(three) == [] and validate(copy.deepcopy(three), three) == []


def test_missing_link_names_both_ends() -> None:
    expected, found = _su(), _su()
    gone = next(link for link in found.links if link.a.node == "leaf-su1-r2" and link.b.node == "n-001/mlx5_2")
    found.links.remove(gone)
    [finding] = validate(found, expected)
    assert finding.kind == "missing-link" and finding.severity == "critical"
    assert finding.ends == (End("n-001/mlx5_2", 1), End("leaf-su1-r2", 2))


def test_rails_swapped_at_a_node_are_two_miscabled_findings() -> None:
    expected, found = _su(), _su()
    for link in found.links:  # n-000's rail 0 and rail 1 cables swapped at the leaves
        if link.b == End("n-000/mlx5_0", 1):
            link.b = End("n-000/mlx5_1", 1)
        elif link.b == End("n-000/mlx5_1", 1):
            link.b = End("n-000/mlx5_0", 1)
    found._by_end = None
    findings = validate(found, expected)
    assert _kinds(findings) == ["miscabled", "miscabled"]
    first = findings[0]
    assert first.ends == (End("n-000/mlx5_0", 1), End("leaf-su1-r0", 1))
    assert "n-000/mlx5_0/1 should be cabled to leaf-su1-r0/1" in first.message
    assert "is cabled to leaf-su1-r1/1" in first.message  # the actual far end
    assert first.fix.startswith("re-cable n-000/mlx5_0/1 to leaf-su1-r0/1")


def test_one_end_moved_to_a_free_port_is_miscabled_naming_where_it_went() -> None:
    expected, found = _su(nodes=2), _su(nodes=2)  # leaf ports 3 and 4 are spare
    link = next(lk for lk in found.links if lk.b == End("n-001/mlx5_1", 1))
    link.a = End("leaf-su1-r0", 3)  # rail 1 plugged into rail 0's leaf
    found._by_end = None
    [finding] = validate(found, expected)
    assert finding.kind == "miscabled" and finding.ends == (End("n-001/mlx5_1", 1), End("leaf-su1-r1", 2))
    assert finding.message == "n-001/mlx5_1/1 is cabled to leaf-su1-r0/3, expected leaf-su1-r1/2"


def test_unexpected_link_between_spare_ports() -> None:
    expected, found = _su(nodes=2), _su(nodes=2)
    found.add_link(Link(End("leaf-su1-r0", 3), End("leaf-su1-r1", 3), width=4, speed="NDR"))
    findings = validate(found, expected)
    assert _kinds(findings) == ["unexpected-link"]
    assert findings[0].severity == "warning" and _ends(findings[0]) == {"leaf-su1-r0/3", "leaf-su1-r1/3"}


def test_width_and_speed_below_the_expected() -> None:
    expected, found = _su(), _su()
    found.link_at(End("leaf-su1-r0", 1)).width = 2  # type: ignore[union-attr]
    found.link_at(End("leaf-su1-r3", 5)).speed = "HDR"  # type: ignore[union-attr]
    findings = validate(found, expected)
    assert sorted(_kinds(findings)) == ["link-speed", "link-width"]
    speed = next(f for f in findings if f.kind == "link-speed")
    assert "runs at HDR, expected NDR" in speed.message and "leaf-su1-r3/5" in speed.message
    found.link_at(End("leaf-su1-r0", 1)).width = 8  # type: ignore[union-attr]  # wider than planned is fine
    assert _kinds(validate(found, expected)) == ["link-speed"]


def test_an_expected_cable_with_disabled_ports_is_down_and_with_polling_ports_missing() -> None:
    expected, found = _su(), _su()
    for end in (End("leaf-su1-r1", 5), End("leaf-su1-r2", 6)):
        link = found.link_at(end)
        assert link is not None
        found.links.remove(link)
    found._by_end = None
    found.idle_ports[End("leaf-su1-r1", 5)] = "Down/Disabled"
    found.idle_ports[End("leaf-su1-r2", 6)] = "Down/Polling"
    findings = {f.kind: f for f in validate(found, expected)}
    assert set(findings) == {"link-down", "missing-link"}
    assert "leaf-su1-r1/5" in findings["link-down"].message and "Down/Disabled" in findings["link-down"].message
    assert "Down/Polling" in findings["missing-link"].message


def test_a_found_link_that_is_not_up_is_down() -> None:
    found = _su(nodes=2)
    found.link_at(End("leaf-su1-r0", 1)).up = False  # type: ignore[union-attr]
    for expected in (None, _su(nodes=2)):
        [finding] = validate(found, expected)
        assert (finding.kind, finding.severity) == ("link-down", "critical")
        assert finding.ends == (End("n-000/mlx5_0", 1), End("leaf-su1-r0", 1))


def test_missing_and_unexpected_nodes() -> None:
    expected, found = _su(nodes=2), _su(nodes=2)
    for link in list(found.links_of("n-001/mlx5_3")):
        found.links.remove(link)
    del found.nodes["n-001/mlx5_3"]
    found.add_node(Node("stranger/mlx5_0", NodeKind.hca, "0x00000000000000aa", 1, description="stranger mlx5_0"))
    found.add_link(Link(End("stranger/mlx5_0", 1), End("leaf-su1-r3", 3), width=4, speed="NDR"))
    found._by_end = None
    findings = validate(found, expected)
    assert _kinds(findings) == ["missing-node", "unexpected-node"]
    missing, unexpected = findings
    assert missing.severity == "critical" and "HCA n-001/mlx5_3 is not on the fabric (expected with 1 cable)" in (
        missing.message
    )
    assert unexpected.severity == "warning" and "cabled port 1 to leaf-su1-r3/3" in unexpected.message


def test_a_managed_switch_description_names_the_expected_switch() -> None:
    expected, found = _su(nodes=2), _su(nodes=2)
    node = found.nodes.pop("leaf-su1-r0")
    node.name, node.description = "MF0;leaf-su1-r0:MQM9700/U1", "MF0;leaf-su1-r0:MQM9700/U1"
    found.add_node(node)
    for link in found.links:
        for side in ("a", "b"):
            end = getattr(link, side)
            if end.node == "leaf-su1-r0":
                setattr(link, side, End(node.name, end.port))
    found._by_end = None
    assert validate(found, expected) == []


# --- links without an expected fabric -------------------------------------------------------------------------


def test_1x_below_usual_width_and_speed_without_expected() -> None:
    links = [(f"h{i}/mlx5_0/1", f"leaf1/{i}") for i in range(1, 7)] + [("leaf1/30", "spine1/1")]
    found = _hand(links)
    assert validate(found) == []
    found.link_at(End("leaf1", 1)).width = 1  # type: ignore[union-attr]
    found.link_at(End("leaf1", 2)).width = 2  # type: ignore[union-attr]
    found.link_at(End("leaf1", 3)).speed = "EDR"  # type: ignore[union-attr]
    findings = validate(found)
    assert [(f.kind, _ends(f)) for f in findings] == [
        ("link-speed", {"h3/mlx5_0/1", "leaf1/3"}),
        ("link-width", {"h1/mlx5_0/1", "leaf1/1"}),
        ("link-width", {"h2/mlx5_0/1", "leaf1/2"}),
    ]
    assert "trained at 1X" in findings[1].message and "runs at 2X while the fabric's links run at 4X" in (
        findings[2].message
    )


def test_a_could_be_speed_hint() -> None:
    found = _hand([("h1/mlx5_0/1", "leaf1/1"), ("h2/mlx5_0/1", "leaf1/2")])
    link = found.link_at(End("leaf1", 2))
    assert link is not None
    found.could_be[link.key] = "Could be 53.125 Gbps"
    [finding] = validate(found)
    assert finding.kind == "link-speed" and "could run 53.125 Gbps" in finding.message


# --- identities ---------------------------------------------------------------------------------------------------


def test_duplicate_node_and_port_guids_and_discovery_conflicts() -> None:
    found = _capture()
    assert not [f for f in validate(found) if f.kind == "duplicate-guid"]
    found.nodes["leaf2"].guid = found.nodes["leaf1"].guid
    link = found.link_at(End("node02/mlx5_0", 1))
    other = found.link_at(End("node01/mlx5_0", 1))
    assert link is not None and other is not None
    if link.a.node == "node02/mlx5_0":
        link.a_guid = other.a_guid if other.a.node == "node01/mlx5_0" else other.b_guid
    else:
        link.b_guid = other.a_guid if other.a.node == "node01/mlx5_0" else other.b_guid
    found.conflicts.append("leaf1/1 is listed as cabled to both node01/mlx5_0/1 and node02/mlx5_0/1")
    dupes = [f for f in validate(found) if f.kind == "duplicate-guid"]
    assert len(dupes) == 3 and all(f.severity == "critical" for f in dupes)
    text = " | ".join(f.message for f in dupes)
    assert "node GUID 0x0000000000200002 is used by 2 nodes: leaf1, leaf2" in text
    assert "port GUID 0x0000000000100001 is used by 2 ports: node01/mlx5_0/1, node02/mlx5_0/1" in text
    assert "listed as cabled to both" in text
    assert {str(f.port) for f in dupes} == {"leaf1/0", "node01/mlx5_0/1", "leaf1/1"}


def test_duplicate_and_zero_lids() -> None:
    found = _capture()
    assert not [f for f in validate(found) if "lid" in f.kind]
    found.nodes["leaf2"].lid = 4  # leaf1's
    link = found.link_at(End("node03/mlx5_0", 1))
    assert link is not None
    if link.a.node == "node03/mlx5_0":
        link.a_lid = 0
    else:
        link.b_lid = 0
    findings = [f for f in validate(found) if "lid" in f.kind]
    assert [(f.kind, f.severity) for f in findings] == [("duplicate-lid", "critical"), ("zero-lid", "critical")]
    assert "LID 4 is assigned to 2 ports: leaf1/0, leaf2/0" in findings[0].message
    assert "node03/mlx5_0/1 has LID 0" in findings[1].message and "LID assignment" in findings[1].fix


def test_duplicate_node_descriptions_are_a_warning() -> None:
    found = _capture()
    found.nodes["spine2"].description = "spine1"
    [finding] = [f for f in validate(found) if f.kind == "duplicate-description"]
    assert finding.severity == "warning" and "spine1, spine2" in finding.message
    assert "node description" in finding.fix


def test_discovery_notes_are_info() -> None:
    found = _capture()
    found.notes.append("ibwarn: [1234] _do_madrpc: recv failed: Connection timed out")
    [note] = [f for f in validate(found) if f.severity == "info"]
    assert note.kind == "discovery-note" and "recv failed" in note.message


# --- peers ----------------------------------------------------------------------------------------------------------


def test_a_leaf_with_its_uplinks_bunched_on_one_spine() -> None:
    expected = _su(nodes=4, topology="fat-tree")  # 4 leaves of 4 HCAs, each leaf 2 cables to each of 2 spines
    found = copy.deepcopy(expected)
    leaf = "leaf-1"
    spines = sorted({end.node for lk in found.links_of(leaf) for end in lk.ends() if end.node.startswith("spine")})
    moved = next(lk for lk in found.links_of(leaf) if spines[1] in (lk.a.node, lk.b.node))
    far = moved.b if moved.a.node == leaf else moved.a
    if moved.a.node == leaf:
        moved.b = End(spines[0], 40)
    else:
        moved.a = End(spines[0], 40)
    found._by_end = None
    alone = [f for f in validate(found) if f.kind == "asymmetric-uplinks"]
    assert [str(f.port) for f in alone] == [f"{leaf}/0", f"{far.node}/0"]
    assert f"3 to {spines[0]}, 1 to {spines[1]}" in alone[0].message
    assert "2 to each of 2 spines" in alone[0].message
    # against the manifest the moved cable is a miscabling, which says it all
    against = validate(found, expected)
    assert "asymmetric-uplinks" not in _kinds(against) and "miscabled" in _kinds(against)


# --- speed ----------------------------------------------------------------------------------------------------------


def test_16k_hcas_in_three_tiers_validate_and_name_the_one_missing_cable() -> None:
    """At SuperPOD size (its speed is measured by bench/fabric.py)."""
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "dgx", "count": 2048, "nics": {"count": 8}}], "fabric": {"leafRadix": 64}}
    )
    cluster = build_cluster("superpod", body)
    expected, found = intended_graph(cluster), intended_graph(cluster)
    assert len(found.hcas()) == 16_384 and len(found.links) == 3 * 16_384
    assert {n.tier for n in found.nodes.values() if n.is_switch} == {"leaf", "spine", "core"}
    gone = found.links.pop(1234)
    findings = validate(found, expected)
    assert [f.kind for f in findings] == ["missing-link"] and set(findings[0].ends or ()) == {gone.a, gone.b}
