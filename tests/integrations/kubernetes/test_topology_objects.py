"""Kueue, KAI and Volcano topology objects from the fabric, each valid against its released CRD."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import UserError
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import Topology, TopologyHost, TopologySwitch, topology_from_graph
from gpufleet.integrations.kubernetes.crds import problems
from gpufleet.integrations.kubernetes.topology import (
    CORE_LABEL,
    HOSTNAME_LABEL,
    LEAF_LABEL,
    NVLINK_DOMAIN_LABEL,
    SPINE_LABEL,
    node_labels,
)
from gpufleet.integrations.kubernetes.topology_objects import (
    hypernode_names,
    kai_topology,
    kueue_objects,
    volcano_hypernodes,
)
from tests.conftest import REPO_ROOT

IBSIM = REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml"
TWO_TIER = REPO_ROOT / "tests" / "integrations" / "slurm" / "data" / "two-tier-fabric.yaml"
THREE_TIER = REPO_ROOT / "tests" / "integrations" / "slurm" / "data" / "three-tier-fabric.yaml"
GB200 = REPO_ROOT / "examples" / "clusters" / "gb200-nvl72.yaml"


def _topology(path: Path) -> Topology:
    from gpufleet.spec.loader import load_cluster

    return topology_from_graph(load_expected(path), nvlink_domains=load_cluster(path).spec.nvlink_domains())


@pytest.mark.parametrize("path", [IBSIM, TWO_TIER, THREE_TIER, GB200], ids=lambda p: p.stem)
def test_every_object_is_valid_against_its_crd(path: Path) -> None:
    topology = _topology(path)
    for obj in [*kueue_objects(topology), kai_topology(topology), *volcano_hypernodes(topology)]:
        assert problems(obj) == [], obj


def test_kueue_topology_and_flavor() -> None:
    topology_object, flavor = kueue_objects(_topology(THREE_TIER), name="fabric")
    assert topology_object == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "fabric", "labels": {"app.kubernetes.io/managed-by": "gpufleet"}},
        "spec": {"levels": [{"nodeLabel": k} for k in (CORE_LABEL, SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL)]},
    }
    assert flavor["kind"] == "ResourceFlavor" and flavor["metadata"]["name"] == "fabric"
    assert flavor["spec"] == {"nodeLabels": {"nvidia.com/gpu.present": "true"}, "topologyName": "fabric"}
    _, custom = kueue_objects(_topology(THREE_TIER), flavor_labels={"pool": "h100"})
    assert custom["spec"]["nodeLabels"] == {"pool": "h100"}


def test_the_levels_name_the_labels_the_nodes_carry() -> None:
    topology = _topology(GB200)
    levels = [level["nodeLabel"] for level in kai_topology(topology)["spec"]["levels"]]
    assert levels[0] == NVLINK_DOMAIN_LABEL and levels[-1] == HOSTNAME_LABEL
    for labels in node_labels(topology).values():
        assert set(labels) | {HOSTNAME_LABEL} == set(levels)


def test_kai_topology() -> None:
    obj = kai_topology(_topology(IBSIM), name="cluster-topology")
    assert obj["apiVersion"] == "kai.scheduler/v1alpha1" and obj["kind"] == "Topology"
    assert obj["metadata"]["name"] == "cluster-topology"
    assert obj["spec"]["levels"] == [
        {"nodeLabel": SPINE_LABEL},
        {"nodeLabel": LEAF_LABEL},
        {"nodeLabel": HOSTNAME_LABEL},
    ]


def _members(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["type"], m["selector"]["exactMatch"]["name"]) for m in obj["spec"]["members"]]


def test_volcano_hypernodes_of_the_ibsim_fat_tree() -> None:
    objects = volcano_hypernodes(_topology(IBSIM))
    summary = [(o["metadata"]["name"], o["spec"]["tier"], o["spec"]["tierName"], _members(o)) for o in objects]
    assert summary == [
        ("leaf1", 1, "leaf", [("Node", "node01"), ("Node", "node02")]),
        ("leaf2", 1, "leaf", [("Node", "node03"), ("Node", "node04")]),
        ("leaf3", 1, "leaf", [("Node", f"node0{i}") for i in range(5, 9)]),
        # leaf4 is no host's home: no HyperNode. Both spines reach every leaf: one spine group.
        ("spine1", 2, "spine", [("HyperNode", "leaf1"), ("HyperNode", "leaf2"), ("HyperNode", "leaf3")]),
    ]


def test_volcano_hypernodes_form_a_tree_over_every_host() -> None:
    topology = _topology(THREE_TIER)
    objects = volcano_hypernodes(topology)
    by_name = {o["metadata"]["name"]: o for o in objects}
    assert len(by_name) == len(objects)
    parents: dict[tuple[str, str], list[str]] = {}
    for obj in objects:
        for member in _members(obj):
            parents.setdefault(member, []).append(obj["metadata"]["name"])
    assert all(len(p) == 1 for p in parents.values())  # one parent each: a tree
    assert {name for kind, name in parents if kind == "Node"} == set(topology.hosts)
    for (kind, name), (parent,) in parents.items():
        if kind == "HyperNode":  # a member is one tier below its parent
            assert by_name[name]["spec"]["tier"] == by_name[parent]["spec"]["tier"] - 1
    roots = [o for o in objects if ("HyperNode", o["metadata"]["name"]) not in parents]
    assert [(o["metadata"]["name"], o["spec"]["tier"]) for o in roots] == [("core-1", 3)]
    assert sorted({o["spec"]["tier"] for o in objects}) == [1, 2, 3]
    # A leaf HyperNode holds the hosts whose leaf label names it.
    labels = node_labels(topology)
    for obj in objects:
        if obj["spec"]["tier"] == 1:
            hosts = {name for _, name in _members(obj)}
            assert {labels[h][LEAF_LABEL].lower() for h in hosts} == {obj["metadata"]["name"]}


def _hand_built(switch_names: list[str]) -> Topology:
    topology = Topology()
    for i, name in enumerate(switch_names):
        topology.switches[name] = TopologySwitch(name, "leaf", hosts=(f"h{i}",))
        topology.hosts[f"h{i}"] = TopologyHost(f"h{i}", name, (name,), 1)
    return topology


def test_hypernode_names_are_object_names_and_one_to_one() -> None:
    names = ["MF0;Leaf-1:MQM9700/U1", "leaf-1", "LEAF_2", "leaf.3", "S-08c0eb03008cc87c"]
    got = hypernode_names(_hand_built(names))
    assert got["leaf-1"] == "leaf-1"
    assert got["S-08c0eb03008cc87c"] == "s-08c0eb03008cc87c"
    assert got["LEAF_2"] == "leaf-2" and got["leaf.3"] == "leaf-3"
    assert got["MF0;Leaf-1:MQM9700/U1"].startswith("leaf-1-")  # 'Leaf-1' lowered meets 'leaf-1'
    assert len(set(got.values())) == len(names)
    for obj in volcano_hypernodes(_hand_built(names)):
        assert problems(obj) == []


def test_a_host_name_no_node_can_have_is_refused_for_volcano() -> None:
    topology = _hand_built(["leaf-1"])
    topology.hosts["Node_A"] = TopologyHost("Node_A", "leaf-1", ("leaf-1",), 1)
    topology.switches["leaf-1"] = TopologySwitch("leaf-1", "leaf", hosts=("h0", "Node_A"))
    with pytest.raises(UserError, match="host 'Node_A' is not a valid Kubernetes object name") as caught:
        volcano_hypernodes(topology)
    assert caught.value.fix


def test_a_bad_object_name_is_refused() -> None:
    with pytest.raises(UserError, match="--name 'Fabric' is not a valid Kubernetes object name"):
        kueue_objects(_topology(IBSIM), name="Fabric")
    with pytest.raises(UserError, match="ResourceFlavor gpufleet-fabric is invalid: spec: at least one nodeLabel"):
        kueue_objects(_topology(IBSIM), flavor_labels={})


def test_a_rendered_object_broken_after_the_fact_is_caught() -> None:
    """The objects pass because they are right, not because nothing is checked."""
    hypernode = copy.deepcopy(volcano_hypernodes(_topology(IBSIM))[0])
    hypernode["spec"]["members"][0]["selector"]["regexMatch"] = {"pattern": "node0[12]"}
    assert problems(hypernode) == [
        "spec.members.0.selector: Only one of ExactMatch, RegexMatch, or LabelMatch can be specified"
    ]
    topology_object = copy.deepcopy(kueue_objects(_topology(IBSIM))[0])
    topology_object["spec"]["levels"].reverse()
    assert problems(topology_object) == [
        "spec.levels: the kubernetes.io/hostname label can only be used at the lowest level of topology"
    ]
