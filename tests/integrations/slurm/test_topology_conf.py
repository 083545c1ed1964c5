"""topology.conf as written for topology/tree (the real slurmctld reads it in test_topology_conf_real.py)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import Topology, TopologyHost, TopologySwitch, topology_from_graph
from gpufleet.integrations.slurm.client import expand_hostlist
from gpufleet.integrations.slurm.topology_conf import (
    compress_levels,
    render_block_conf,
    render_topology_conf,
    slurm_switch_names,
)
from tests.conftest import REPO_ROOT

IBSIM = REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml"


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_the_ibsim_fat_tree() -> None:
    text = render_topology_conf(topology_from_graph(load_expected(IBSIM)))
    assert _lines(text) == [
        "SwitchName=leaf1 Nodes=node[01-02]",
        "SwitchName=leaf2 Nodes=node[03-04]",
        "SwitchName=leaf3 Nodes=node[05-08]",
        "SwitchName=spine1 Switches=leaf[1-3]",
        "SwitchName=spine2 Switches=leaf[1-3]",
    ]
    assert "# left out, leaves that are no host's home leaf: leaf4" in text.splitlines()


def _fabric(switch_names: list[str], host: str = "h1") -> FabricGraph:
    graph = FabricGraph(source="test")
    graph.add_node(Node(f"{host}/mlx5_0", NodeKind.hca, host=host))
    for i, name in enumerate(switch_names):
        graph.add_node(Node(name, NodeKind.switch, tier="leaf" if i == 0 else "spine"))
    graph.add_link(Link(End(f"{host}/mlx5_0", 1), End(switch_names[0], 1)))
    for i, name in enumerate(switch_names[1:], start=2):
        graph.add_link(Link(End(switch_names[0], i), End(name, 1)))
    return graph


def test_switch_names_slurm_cannot_parse_are_rewritten_and_kept_apart() -> None:
    topology = topology_from_graph(_fabric(["MF0;leaf 1:MQM8700/U1", "spine#1", "spine=1"]))
    names = slurm_switch_names(topology)
    assert names["MF0;leaf 1:MQM8700/U1"] == "MF0_leaf_1:MQM8700_U1"
    assert sorted([names["spine#1"], names["spine=1"]]) == ["spine_1", "spine_1_2"]
    lines = _lines(render_topology_conf(topology))
    assert lines[0] == "SwitchName=MF0_leaf_1:MQM8700_U1 Nodes=h1"
    assert lines[1:] == ["SwitchName=spine_1 Switches=MF0_leaf_1:MQM8700_U1",
                         "SwitchName=spine_1_2 Switches=MF0_leaf_1:MQM8700_U1"]  # fmt: skip


def test_a_host_name_slurm_cannot_hold_is_a_clear_error() -> None:
    topology = topology_from_graph(_fabric(["leaf1"], host="bad[1]"))
    with pytest.raises(UserError, match=r"'bad\[1\]' cannot be written") as caught:
        render_topology_conf(topology)
    assert "NodeName" in (caught.value.fix or "")


# topology/block -------------------------------------------------------------------------------------------------


def _nvl_topology(domain_sizes: list[int]) -> Topology:
    """Hosts gb001.. in NVLink domains of the given sizes; each domain under its own leaf, two leaves per spine."""
    topology = Topology(source="test")
    host_no = 1
    for d, size in enumerate(domain_sizes):
        leaf = f"leaf{d + 1}"
        hosts = [f"gb{host_no + i:03d}" for i in range(size)]
        host_no += size
        topology.switches[leaf] = TopologySwitch(leaf, "leaf", tuple(hosts))
        for h in hosts:
            topology.hosts[h] = TopologyHost(h, leaf, (leaf,), 4, f"rack-{chr(ord('a') + d)}")
    for s in range(0, len(domain_sizes), 2):
        spine = f"spine{s // 2 + 1}"
        leaves = tuple(f"leaf{i + 1}" for i in range(s, min(s + 2, len(domain_sizes))))
        topology.switches[spine] = TopologySwitch(spine, "spine", children=leaves)
    return topology


def _slurm_accepts(text: str, version: tuple[int, int]) -> list[str]:
    """What slurmctld's topology/block plugin checks when it reads the file (block_record.c / topology_block.c of
    the release): names unique, every block with nodes, sizes per the release's rule. Returns its fatal errors."""
    errors: list[str] = []
    blocks: dict[str, int] = {}
    sizes: list[int] = []
    for line in _lines(text):
        key, _, rest = line.partition("=")
        if key == "BlockName":
            name, _, nodes = rest.partition(" Nodes=")
            if name in blocks:
                errors.append(f"Block ({name}) has already been defined")
            blocks[name] = len(expand_hostlist(nodes))
        elif key == "BlockSizes" and version >= (24, 5):
            sizes = [int(s) for s in rest.split(",")]
        elif key == "BlockLevels" and version < (24, 5):
            assert re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", rest), rest
        else:
            errors.append(f"unknown key {key}")
    base = sizes[0] if sizes else next(iter(blocks.values()))
    for size in sizes:
        level = size // base
        if size % base or level & (level - 1) or level.bit_length() > 16:
            errors.append(f"Invalid BlockSizes value: {size}")
    for name, count in blocks.items():
        if count == 0:
            errors.append(f"Block configuration ({name}) lacks children")
        elif version < (24, 5) and count != base:
            errors.append(f"Block configuration ({name}) children count no equal bblock_node_cnt")
        elif count < base:
            errors.append(f"Block configuration ({name}) children count lower than bblock_node_cnt")
    return errors


def test_blocks_are_nvlink_domains_in_fabric_order() -> None:
    text = render_block_conf(_nvl_topology([18, 18, 18, 18]))
    assert _lines(text) == [
        "BlockName=rack-a Nodes=gb[001-018]",
        "BlockName=rack-b Nodes=gb[019-036]",
        "BlockName=rack-c Nodes=gb[037-054]",
        "BlockName=rack-d Nodes=gb[055-072]",
        "BlockSizes=18,36,72",
    ]
    assert _slurm_accepts(text, (24, 11)) == []


def test_a_short_rack_is_left_out_rather_than_stopping_slurmctld() -> None:
    topology = _nvl_topology([18, 17, 18])
    text = render_block_conf(topology)
    assert "BlockName=rack-b" not in text
    assert "# left out, NVLink domain rack-b has 17 nodes, which is below the base block of 18: gb[019-035]" in text
    assert _slurm_accepts(text, (24, 11)) == []
    # a larger domain is a valid block from 24.05 on, but 23.11 wants every block the same size
    wide = _nvl_topology([18, 20])
    assert "BlockName=rack-b" in render_block_conf(wide)
    old = render_block_conf(wide, slurm_version=(23, 11))
    assert "BlockName=rack-b" not in old and "BlockName=rack-a" in old and "BlockLevels=0" in old
    assert _slurm_accepts(old, (23, 11)) == []


def test_23_11_writes_block_levels() -> None:
    text = render_block_conf(_nvl_topology([18] * 5), slurm_version=(23, 11))
    assert _lines(text)[-1] == "BlockLevels=0-2"
    assert _slurm_accepts(text, (23, 11)) == []
    assert compress_levels([0, 1, 3, 4, 6]) == "0-1,3-4,6"


def test_the_checker_catches_what_slurm_refuses() -> None:
    bad = "BlockName=a Nodes=n[1-4]\nBlockName=b Nodes=n[5-6]\nBlockSizes=4,12\n"
    assert _slurm_accepts(bad, (24, 11)) == [
        "Invalid BlockSizes value: 12",
        "Block configuration (b) children count lower than bblock_node_cnt",
    ]


def test_no_block_without_a_domain_or_before_23_11() -> None:
    topology = topology_from_graph(load_expected(IBSIM))
    with pytest.raises(UserError, match="no host has a known NVLink domain"):
        render_block_conf(topology)
    with pytest.raises(UserError, match=r"came with 23\.11"):
        render_block_conf(_nvl_topology([18]), slurm_version=(22, 5))


def test_manifest_nvlink_domains_reach_the_blocks() -> None:
    from gpufleet.spec.cluster_spec import ClusterBody

    body = ClusterBody.model_validate(
        {"nodePools": [{"name": "gb", "count": 36, "nvlinkDomainNodes": 18}, {"name": "cpu", "count": 2}]}
    )
    domains = body.nvlink_domains()
    assert domains["gb-000"] == "gb-nvl00" and domains["gb-035"] == "gb-nvl01" and "cpu-000" not in domains
    assert sorted(Counter(domains.values()).values()) == [18, 18]
