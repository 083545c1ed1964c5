"""The fabric part of the `kind: Cluster` manifest: tiers, oversubscription, link width and speed, hostnames, and
a fabric cabled by hand, each mistake one clear error naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.errors import ManifestError
from gpufleet.spec.cluster_spec import ClusterBody, FabricSpec
from gpufleet.spec.loader import load_cluster

EXAMPLE = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


def _load(tmp_path: Path, fabric: dict[str, object], pools: list[dict[str, object]] | None = None) -> ClusterBody:
    body = {
        "apiVersion": "gpufleet.io/v1",
        "kind": "Cluster",
        "metadata": {"name": "c"},
        "spec": {"nodePools": pools or [{"name": "a", "count": 2, "nics": {"count": 2}}], "fabric": fabric},
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(body))
    return load_cluster(path).spec


def _error(tmp_path: Path, fabric: dict[str, object], pools: list[dict[str, object]] | None = None) -> str:
    with pytest.raises(ManifestError) as err:
        _load(tmp_path, fabric, pools)
    text = str(err.value)
    assert str(tmp_path / "cluster.yaml") in text
    return text


def _spec(**fields: object) -> FabricSpec:
    return FabricSpec.model_validate(fields)


def test_defaults_and_derived_speeds() -> None:
    spec = _spec()
    assert (spec.radix, spec.link_width, spec.link_speed, spec.link_speed_gbps) == (64, 4, "NDR", 400.0)
    assert (spec.oversubscription, spec.tiers, spec.nodes_per_su, spec.uplinks_per_leaf) == ("1:1", "auto", 32, 32)
    assert _spec(linkSpeedGbps=200).link_speed == "HDR"
    assert _spec(linkSpeedGbps=800).link_speed == "XDR" and _spec(linkSpeedGbps=800).radix == 128
    hdr = _spec(linkSpeed="hdr")  # as people write it
    assert (hdr.link_speed, hdr.link_speed_gbps) == ("HDR", 200.0)
    assert _spec(linkWidth=8, linkSpeed="NDR").link_speed_gbps == 800.0
    assert _spec(transport="roce", linkSpeedGbps=450).link_speed is None  # not InfiniBand: no generation


def test_oversubscription_splits_the_leaf_ports() -> None:
    assert (_spec(oversubscription="3:1").nodes_per_su, _spec(oversubscription="3:1").uplinks_per_leaf) == (
        48,
        16,
    )
    two = _spec(oversubscription="2:1", nodesPerScalableUnit=32)
    assert (two.nodes_per_su, two.uplinks_per_leaf, two.ratio) == (32, 16, 2.0)


def test_new_fields_in_a_manifest(tmp_path: Path) -> None:
    body = _load(
        tmp_path,
        {"oversubscription": "2:1", "tiers": 3, "linkWidth": 4, "linkSpeed": "NDR", "leafRadix": 64},
        [{"name": "a", "count": 2, "hostnames": ["gpu-a", "gpu-b"], "nics": {"count": 1, "ports": 2}}],
    )
    assert body.fabric.tiers == 3 and body.fabric.ratio == 2.0
    assert body.node_pools[0].node_names() == ["gpu-a", "gpu-b"] and body.node_pools[0].nics.ports == 2


@pytest.mark.parametrize(
    ("fabric", "words"),
    [
        ({"oversubscription": "fast"}, "is not a ratio like '1:1'"),
        ({"oversubscription": "1:2"}, "at least 1:1"),
        ({"tiers": 4}, "fabric.tiers"),
        ({"linkWidth": 3}, "fabric.linkWidth"),
        ({"linkSpeed": "ZDR"}, "fabric.linkSpeed"),
        ({"linkSpeed": "HDR", "linkSpeedGbps": 400}, "is 200 Gb/s, but linkSpeedGbps is 400"),
        ({"linkSpeedGbps": 450}, "no InfiniBand generation runs at"),
        ({"nodesPerScalableUnit": 40, "leafRadix": 64}, "needs 40 downlinks and 40 uplinks"),
        ({"switches": [{"name": "leaf1", "ports": 36}]}, "set topology: explicit"),
        ({"topology": "explicit"}, "needs `switches` and `links`"),
    ],
)
def test_fabric_mistakes(tmp_path: Path, fabric: dict[str, object], words: str) -> None:
    assert words in _error(tmp_path, fabric)


def test_hostname_mistakes(tmp_path: Path) -> None:
    short = [{"name": "a", "count": 3, "hostnames": ["n1", "n2"]}]
    assert "lists 2 hostnames for count 3" in _error(tmp_path, {}, short)
    twice = [{"name": "a", "count": 1, "hostnames": ["n1"]}, {"name": "b", "count": 1, "hostnames": ["n1"]}]
    assert "node 'n1' is in both pool 'a' and pool 'b'" in _error(tmp_path, {}, twice)
    slash = [{"name": "a", "count": 1, "hostnames": ["rack1/n1"]}]
    assert "hostnames[0]" in _error(tmp_path, {}, slash)


def _explicit(links: list[dict[str, object]]) -> dict[str, object]:
    return {
        "topology": "explicit",
        "switches": [{"name": "leaf1", "ports": 8}, {"name": "spine1", "ports": 8, "tier": "spine"}],
        "links": links,
    }


POOLS = [{"name": "a", "count": 2, "hostnames": ["n1", "n2"], "nics": {"count": 1}}]


def test_an_explicit_fabric(tmp_path: Path) -> None:
    body = _load(
        tmp_path,
        _explicit(
            [{"a": "n1/mlx5_0/1", "b": "leaf1/1"}, {"a": "leaf1/8", "b": "spine1/1", "width": 2, "speed": "ndr"}]
        ),
        POOLS,
    )
    assert [(link.a, link.b, link.width, link.speed) for link in body.fabric.links] == [
        ("n1/mlx5_0/1", "leaf1/1", None, None),
        ("leaf1/8", "spine1/1", 2, "NDR"),
    ]


@pytest.mark.parametrize(
    ("links", "words"),
    [
        ([{"a": "leaf1/9", "b": "spine1/1"}], "links[0].a 'leaf1/9': leaf1 has ports 1-8"),
        ([{"a": "leaf2/1", "b": "spine1/1"}], "no switch 'leaf2' in `switches` (known: leaf1, spine1)"),
        ([{"a": "leaf1", "b": "spine1/1"}], "is not switch/port or host/device/port"),
        ([{"a": "leaf1/1", "b": "spine1/1"}, {"a": "leaf1/1", "b": "spine1/2"}], "port leaf1/1 is cabled twice"),
        ([{"a": "leaf1/1", "b": "leaf1/2"}], "cables leaf1 to itself"),
        ([{"a": "n3/mlx5_0/1", "b": "leaf1/1"}], "no host 'n3' in any node pool"),
        ([{"a": "n1/mlx5_1/1", "b": "leaf1/1"}], "n1 has only mlx5_0"),
        ([{"a": "n1/mlx5_0/2", "b": "leaf1/1"}], "mlx5_0 has 1 port(s)"),
        ([{"a": "n1/mlx5_0/1", "b": "leaf1/1", "width": 3}], "fabric.links[0].width"),
    ],
)
def test_explicit_fabric_mistakes(tmp_path: Path, links: list[dict[str, object]], words: str) -> None:
    assert words in _error(tmp_path, _explicit(links), POOLS)


def test_the_shipped_ibsim_example() -> None:
    spec = load_cluster(EXAMPLE).spec
    assert spec.fabric.topology == "explicit" and len(spec.fabric.links) == 20
    assert spec.fabric.link_speed == "HDR" and spec.fabric.link_speed_gbps == 200.0
    assert [p.node_names() for p in spec.node_pools] == [
        ["node01", "node02", "node03", "node04"],
        ["node05", "node06", "node07", "node08"],
    ]
