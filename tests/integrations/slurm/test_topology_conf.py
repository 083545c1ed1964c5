"""topology.conf as written for topology/tree (the real slurmctld reads it in test_topology_conf_real.py)."""

from __future__ import annotations

import pytest

from gpufleet.errors import UserError
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import topology_from_graph
from gpufleet.integrations.slurm.topology_conf import render_topology_conf, slurm_switch_names
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
