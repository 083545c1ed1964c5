"""The intended fabric from the cluster manifest: the shapes the builder lays out (checked against the DGX B200
SuperPOD's published counts), evenly spread uplinks, the graph validation compares with, and expected fabrics read
from files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import ManifestError, NotFoundError, ParseError, UserError
from gpufleet.fabric.graph import End, FabricGraph, NodeKind
from gpufleet.fabric.intended import graph_from_ibnetdiscover, intended_graph, load_expected
from gpufleet.model import Cluster
from gpufleet.sim.fabric_state import PortArrays
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from gpufleet.spec.loader import load_cluster
from tests.conftest import CAPTURES

EXAMPLES = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters"
CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def _cluster(nodes: int, rails: int = 8, **fabric: Any) -> Cluster:
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "dgx", "count": nodes, "nics": {"count": rails}}], "fabric": fabric}
    )
    return build_cluster("c", body)


def _tiers(cluster: Cluster) -> Counter[str]:
    return Counter(sw.tier for sw in cluster.fabric.switches)


def _cables(cluster: Cluster) -> Counter[tuple[str, ...]]:
    tier = {sw.name: sw.tier for sw in cluster.fabric.switches}
    return Counter(
        tuple(sorted((tier.get(link.a[0], "hca"), tier.get(link.b[0], "hca")))) for link in cluster.fabric.links
    )


def _spread(cluster: Cluster, lower: str, upper: str) -> dict[str, Counter[str]]:
    """Each `lower`-tier switch's cables per `upper`-tier switch."""
    tier = {sw.name: sw.tier for sw in cluster.fabric.switches}
    out: dict[str, Counter[str]] = {sw.name: Counter() for sw in cluster.fabric.switches if sw.tier == lower}
    for link in cluster.fabric.links:
        for here, there in ((link.a[0], link.b[0]), (link.b[0], link.a[0])):
            if tier.get(here) == lower and tier.get(there) == upper:
                out[here][there] += 1
    return out


# DGX B200 SuperPOD, "Larger DGX SuperPOD component counts": SUs of 32 nodes, 8 NDR rails, 64-port switches
@pytest.mark.parametrize(
    ("units", "leaves", "spines", "cores"),
    [(2, 16, 8, 0), (4, 32, 16, 0), (8, 64, 32, 0), (16, 128, 128, 64), (32, 256, 256, 128), (64, 512, 512, 256)],
)
def test_superpod_counts(units: int, leaves: int, spines: int, cores: int) -> None:
    cluster = _cluster(units * 32, leafRadix=64, nodesPerScalableUnit=32)
    assert _tiers(cluster) == Counter({"leaf": leaves, "spine": spines, **({"core": cores} if cores else {})})
    endpoints = units * 32 * 8
    cables = _cables(cluster)  # non-blocking: every tier carries as many cables as there are endpoints
    assert cables[("hca", "leaf")] == cables[("leaf", "spine")] == endpoints
    assert cables[("core", "spine")] == (endpoints if cores else 0)


@pytest.mark.parametrize("units", [1, 2, 3, 5, 16])
def test_every_leaf_spreads_its_uplinks_evenly_and_every_spine_gets_as_many(units: int) -> None:
    cluster = _cluster(units * 32, leafRadix=64)
    for lower, upper in (("leaf", "spine"), ("spine", "core")):
        spread = _spread(cluster, lower, upper)
        if upper == "core" and not any(spread.values()):
            continue
        assert {len(set(counts.values())) for counts in spread.values()} == {1}, f"{lower}s spread unevenly"
        downlinks: Counter[str] = Counter()
        for counts in spread.values():
            downlinks.update(counts)
        assert len(set(downlinks.values())) == 1, f"{upper}s unevenly loaded"


def test_rail_optimized_planes_in_two_tiers() -> None:
    cluster = _cluster(4 * 32, leafRadix=64)
    for node in cluster.nodes[:64:7]:
        su = cluster.nodes.index(node) // 32 + 1
        for nic in node.nics:
            assert cluster.fabric.leaf_of(f"{node.name}/{nic.name}") == f"leaf-su{su}-r{nic.rail}"
    spread = _spread(cluster, "leaf", "spine")
    plane = {rail: set(spread[f"leaf-su1-r{rail}"]) for rail in range(8)}
    for rail in range(8):  # the leaves of one rail across the SUs share their spines, and no other rail does
        assert all(set(spread[f"leaf-su{su}-r{rail}"]) == plane[rail] for su in range(1, 5))
        assert all(not plane[rail] & plane[other] for other in range(8) if other != rail)


def test_one_scalable_unit_shares_spines_between_rails() -> None:
    cluster = build_cluster("su", load_cluster(EXAMPLES / "dgx-h100-su.yaml").spec)
    assert _tiers(cluster) == {"leaf": 8, "spine": 4}  # a rail's 32 uplinks half-fill a spine: rails share in pairs
    spread = _spread(cluster, "leaf", "spine")
    assert set(spread["leaf-su1-r0"]) == set(spread["leaf-su1-r1"]) != set(spread["leaf-su1-r2"])


def test_three_tiers_pods_and_core_planes() -> None:
    cluster = _cluster(16 * 32, leafRadix=64)
    spines = {sw.name: sw for sw in cluster.fabric.switches if sw.tier == "spine"}
    spread = _spread(cluster, "spine", "core")
    # pods of 32 leaves with 32 spines; spine j of every pod is cabled to core plane j, 16 cables to each core
    assert Counter(sw.group for sw in spines.values()) == {pod: 32 for pod in range(4)}
    planes: dict[int, set[str]] = {}
    for index, name in enumerate(sorted(spines, key=lambda n: int(n.split("-")[1]))):
        planes.setdefault(index % 32, set()).update(spread[name])
    assert len(planes) == 32 and all(len(cores) == 2 for cores in planes.values())
    assert all(set(counts.values()) == {16} for counts in spread.values())


def test_tiers_auto_forced_and_too_many() -> None:
    assert "core" in _tiers(_cluster(64, leafRadix=64, tiers=3))
    assert "core" not in _tiers(_cluster(8 * 32, leafRadix=64))
    with pytest.raises(UserError, match="do not fit under one tier") as err:
        _cluster(16 * 32, leafRadix=64, tiers=2)
    assert "tiers" in (err.value.fix or "")
    assert "core" in _tiers(_cluster(32, rails=4, leafRadix=8))  # 8-port switches: 32 leaves in three tiers
    with pytest.raises(UserError, match="36 leaves of radix 8 need more than three tiers"):
        _cluster(36, rails=4, leafRadix=8)


def test_oversubscription_gives_leaves_fewer_uplinks() -> None:
    three = _cluster(96, rails=1, leafRadix=64, oversubscription="3:1", topology="fat-tree")
    spread = _spread(three, "leaf", "spine")
    assert _tiers(three)["leaf"] == 2 and all(sum(c.values()) == 16 for c in spread.values())  # 48 down, 16 up
    two = _cluster(64, leafRadix=64, nodesPerScalableUnit=32, oversubscription="2:1")
    assert all(sum(c.values()) == 16 for c in _spread(two, "leaf", "spine").values())


def test_plain_fat_tree_fills_leaves_in_order() -> None:
    cluster = _cluster(8, rails=4, leafRadix=8, topology="fat-tree")
    assert _tiers(cluster) == {"leaf": 8, "spine": 4}
    assert cluster.fabric.leaf_of("dgx-000/mlx5_3") == "leaf-1" and cluster.fabric.leaf_of("dgx-001/mlx5_0") == "leaf-2"


def test_xdr_defaults() -> None:
    cluster = _cluster(72, leafRadix=None, linkSpeed="XDR")
    assert {sw.radix for sw in cluster.fabric.switches} == {128}  # Quantum-X800, as the designs count it
    assert {(link.width, link.speed, link.speed_gbps) for link in cluster.fabric.links} == {(4, "XDR", 800.0)}


def test_intended_graph_names_tiers_and_link_expectations() -> None:
    cluster = _cluster(64, leafRadix=64)
    graph = intended_graph(cluster)
    assert graph.source == "manifest"
    hca = graph.nodes["dgx-033/mlx5_5"]
    assert (hca.kind, hca.host, hca.rail, hca.description, hca.ports) == (
        NodeKind.hca,
        "dgx-033",
        5,
        "dgx-033 mlx5_5",
        1,
    )
    leaf = graph.nodes["leaf-su2-r5"]
    assert (leaf.tier, leaf.rail, leaf.group, leaf.ports) == ("leaf", 5, 1, 64)
    assert graph.peer(End("dgx-033/mlx5_5", 1)) == End("leaf-su2-r5", 2)
    assert {(link.width, link.speed, link.rate_gbps) for link in graph.links} == {(4, "NDR", 400.0)}
    assert len(graph.hcas()) == 512 and all(n.guid.startswith("0x") and len(n.guid) == 18 for n in graph.hcas())


def test_hostnames_name_the_nodes() -> None:
    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "gpu", "count": 2, "hostnames": ["dgx-a7", "dgx-b3"], "nics": {"count": 2}}],
         "fabric": {"leafRadix": 8}}
    )  # fmt: skip
    cluster = build_cluster("c", body)
    assert [n.name for n in cluster.nodes] == ["dgx-a7", "dgx-b3"]
    assert "dgx-b3/mlx5_1" in intended_graph(cluster).nodes


def test_the_explicit_ibsim_example() -> None:
    cluster = build_cluster("ibsim", load_cluster(EXAMPLES / "ibsim-fattree.yaml").spec)
    graph = intended_graph(cluster)
    assert (len(graph.switches()), len(graph.hcas()), len(graph.links)) == (6, 8, 20)
    assert {n.tier for n in graph.switches()} == {"leaf", "spine"}
    assert graph.peer(End("node05/mlx5_0", 2)) == End("leaf4", 1) and graph.nodes["node05/mlx5_0"].ports == 2
    assert {(link.width, link.speed) for link in graph.links} == {(4, "HDR")}
    # the digital twin runs on it as on any built cluster
    ports = PortArrays.from_cluster(cluster)
    assert ports.n == 40 and ports.leaf_of(ports.by_key[("node01/mlx5_0", 1)]) == "leaf1"


def test_explicit_tiers_are_found_when_not_given() -> None:
    spec = load_cluster(EXAMPLES / "ibsim-fattree.yaml").spec
    for switch in spec.fabric.switches:
        switch.tier = None
    cluster = build_cluster("ibsim", spec)
    assert {sw.name: sw.tier for sw in cluster.fabric.switches} == {
        "spine1": "spine", "spine2": "spine", "leaf1": "leaf", "leaf2": "leaf", "leaf3": "leaf", "leaf4": "leaf",
    }  # fmt: skip


def test_load_expected_reads_manifests_and_ibnetdiscover_dumps(tmp_path: Path) -> None:
    manifest = load_expected(EXAMPLES / "ibsim-fattree.yaml")
    dump = load_expected(CAPTURE)
    assert set(manifest.nodes) == set(dump.nodes)
    assert {link.key for link in dump.links} == {link.key for link in manifest.links} - {
        (End("leaf1", 35), End("spine1", 1))
    }
    assert isinstance(graph_from_ibnetdiscover(CAPTURE.read_text(), "x"), FabricGraph)


def test_load_expected_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no such file"):
        load_expected(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="not a regular file"):
        load_expected(tmp_path)
    empty = tmp_path / "none.yaml"
    empty.write_text(
        "apiVersion: gpufleet.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n"
        "  nodePools: [{name: a, count: 2}]\n  fabric: {topology: none}\n"
    )
    with pytest.raises(UserError, match="no fabric cabling"):
        load_expected(empty)
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: gpufleet.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec: {nodePools: []}\n")
    with pytest.raises(ManifestError):
        load_expected(broken)
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(CAPTURE.read_text().splitlines()[:40]) + "\n")
    with pytest.raises(ParseError, match="stops early"):
        load_expected(cut)
    last_cut = tmp_path / "last.txt"
    last_cut.write_text("\n".join(CAPTURE.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(ParseError, match=r"last record .*lacks port 1"):
        load_expected(last_cut)
