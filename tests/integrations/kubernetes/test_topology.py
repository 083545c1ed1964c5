"""Kubernetes node labels from the fabric: keys, levels, values a label can hold, and the patch a change needs."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes import client

from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.topology import Topology, TopologyHost, TopologySwitch, topology_from_graph
from gpufleet.integrations.kubernetes.topology import (
    CORE_LABEL,
    HOSTNAME_LABEL,
    LEAF_LABEL,
    LEVELS,
    NVLINK_DOMAIN_LABEL,
    SPINE_LABEL,
    label_changes,
    label_value,
    label_values,
    levels,
    node_labels,
    sticky_groups,
    switch_groups,
    valid_value,
)
from tests.conftest import REPO_ROOT

IBSIM = REPO_ROOT / "examples" / "clusters" / "ibsim-fattree.yaml"
TWO_TIER = REPO_ROOT / "tests" / "integrations" / "slurm" / "data" / "two-tier-fabric.yaml"
THREE_TIER = REPO_ROOT / "tests" / "integrations" / "slurm" / "data" / "three-tier-fabric.yaml"
# Kubernetes' label value rule (apimachinery validation.IsValidLabelValue), written out independently of the module.
K8S_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def test_keys_are_topographs_and_levels_run_outermost_first() -> None:
    assert NVLINK_DOMAIN_LABEL == "accelerator.topograph.run/domain"
    assert tuple(f"fabric.topograph.run/tier-{n}" for n in range(3)) == (LEAF_LABEL, SPINE_LABEL, CORE_LABEL)
    assert LEVELS == (NVLINK_DOMAIN_LABEL, CORE_LABEL, SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL)


def test_the_ibsim_fat_tree() -> None:
    topology = topology_from_graph(load_expected(IBSIM))
    labels = node_labels(topology)
    assert list(labels) == [f"node{i:02d}" for i in range(1, 9)]
    # Every leaf reaches both spines: one spine group, named by its first spine.
    assert {h: (v[SPINE_LABEL], v[LEAF_LABEL]) for h, v in labels.items()} == {
        "node01": ("spine1", "leaf1"), "node02": ("spine1", "leaf1"),
        "node03": ("spine1", "leaf2"), "node04": ("spine1", "leaf2"),
        "node05": ("spine1", "leaf3"), "node06": ("spine1", "leaf3"),
        "node07": ("spine1", "leaf3"), "node08": ("spine1", "leaf3"),
    }  # fmt: skip
    assert levels(topology) == [SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL]  # no core, no NVLink domain known
    assert all(NVLINK_DOMAIN_LABEL not in v and CORE_LABEL not in v for v in labels.values())


def test_a_two_tier_fabric() -> None:
    topology = topology_from_graph(load_expected(TWO_TIER))
    labels = node_labels(topology)
    assert labels == {
        "gpu-01": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-1"},
        "gpu-02": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-1"},
        "gpu-03": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-2"},
        "gpu-04": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-2"},
    }


def test_a_three_tier_fabric_gives_each_pod_its_own_spine_group() -> None:
    topology = topology_from_graph(load_expected(THREE_TIER))
    labels = node_labels(topology)
    assert levels(topology) == [CORE_LABEL, SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL]
    pods = {v[SPINE_LABEL] for v in labels.values()}
    assert len(pods) == 2  # two pods of four leaves, each with its own spines
    assert {v[CORE_LABEL] for v in labels.values()} == {"core-1"}  # the cores join the pods
    by_leaf: dict[str, set[str]] = {}
    for v in labels.values():
        by_leaf.setdefault(v[LEAF_LABEL], set()).add(v[SPINE_LABEL])
    assert all(len(spines) == 1 for spines in by_leaf.values())  # a leaf is in one pod
    # The spine group is a real spine above the host's home leaf.
    spines = {s.name: set(s.children) for s in topology.tier("spine")}
    for host, v in labels.items():
        assert topology.hosts[host].home in spines[v[SPINE_LABEL]]
    spine_of, core_of = switch_groups(topology)
    assert set(core_of) == pods and set(spine_of.values()) == pods


def _host(name: str, home: str, domain: str | None = None) -> TopologyHost:
    return TopologyHost(name, home, (home,), 1, domain)


def _hand_built() -> Topology:
    """Two pods (leaf-a under spine-1/spine-2, leaf-b under spine-3), one core above both, and NVLink domains
    where two hosts are known to share one."""
    topology = Topology()
    topology.switches = {
        "leaf-a": TopologySwitch("leaf-a", "leaf", hosts=("h1", "h2")),
        "leaf-b": TopologySwitch("leaf-b", "leaf", hosts=("h3",)),
        "spine-2": TopologySwitch("spine-2", "spine", children=("leaf-a",)),
        "spine-1": TopologySwitch("spine-1", "spine", children=("leaf-a",)),
        "spine-3": TopologySwitch("spine-3", "spine", children=("leaf-b",)),
        "core": TopologySwitch("core", "core", children=("spine-1", "spine-2", "spine-3")),
    }
    topology.hosts = {
        "h1": _host("h1", "leaf-a", "7f0a1c52-0d2e-4b8e-9e6f-1a2b3c4d5e6f.32766"),
        "h2": _host("h2", "leaf-a", "7f0a1c52-0d2e-4b8e-9e6f-1a2b3c4d5e6f.32766"),
        "h3": _host("h3", "leaf-b"),
    }
    return topology


def test_a_host_with_an_nvlink_domain() -> None:
    topology = _hand_built()
    labels = node_labels(topology)
    domain = "7f0a1c52-0d2e-4b8e-9e6f-1a2b3c4d5e6f.32766"  # <cluster uuid>.<clique>: a valid value as it is
    assert labels["h1"] == {
        NVLINK_DOMAIN_LABEL: domain,
        CORE_LABEL: "core",
        SPINE_LABEL: "spine-1",
        LEAF_LABEL: "leaf-a",
    }
    assert labels["h2"][NVLINK_DOMAIN_LABEL] == domain
    assert NVLINK_DOMAIN_LABEL not in labels["h3"]  # only where known
    assert labels["h3"][SPINE_LABEL] == "spine-3"
    # h3 has no NVLink domain label, and Kueue would leave a node without a level's label out: no NVLink level.
    assert levels(topology) == [CORE_LABEL, SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL]
    topology.hosts["h3"] = _host("h3", "leaf-b", "rack-2")
    assert levels(topology) == list(LEVELS)


def test_a_level_some_hosts_lack_is_no_level() -> None:
    """A leaf cabled to no spine: its hosts have no spine label, so the spine is no level for anyone."""
    topology = _hand_built()
    topology.switches["leaf-c"] = TopologySwitch("leaf-c", "leaf", hosts=("h4",))
    topology.hosts["h4"] = _host("h4", "leaf-c")
    assert SPINE_LABEL not in node_labels(topology)["h4"]
    assert levels(topology) == [LEAF_LABEL, HOSTNAME_LABEL]


def test_the_nvlink_domains_of_the_gb200_example() -> None:
    from gpufleet.spec.loader import load_cluster

    path = REPO_ROOT / "examples" / "clusters" / "gb200-nvl72.yaml"
    domains = load_cluster(path).spec.nvlink_domains()
    labels = node_labels(topology_from_graph(load_expected(path), nvlink_domains=domains))
    assert {v[NVLINK_DOMAIN_LABEL] for v in labels.values()} == set(domains.values())
    assert all(labels[h][NVLINK_DOMAIN_LABEL] == d for h, d in domains.items())


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("leaf-07", "leaf-07"),  # valid: kept
        ("S-08c0eb03008cc87c", "S-08c0eb03008cc87c"),  # ibnetdiscover's switch GUID name: valid
        ("0x08c0eb03008cc87c", "0x08c0eb03008cc87c"),
        ("MF0;leaf-07:MQM9700/U1", "leaf-07"),  # an NVIDIA switch's description: its system name
        ("MF0;IB-ComputeSpine-03:MQM8700/U1", "IB-ComputeSpine-03"),
        ("Quantum Mellanox Technologies", "Quantum-Mellanox-Technologies"),
        ("-rack 4/leaf 2-", "rack-4-leaf-2"),  # runs of what a value cannot hold become one '-', none at the ends
        ("leaf_1.a", "leaf_1.a"),
    ],
)
def test_label_values_are_readable(name: str, value: str) -> None:
    assert label_value(name) == value
    assert valid_value(value) and K8S_VALUE.match(value)


def test_a_long_name_is_cut_and_hashed() -> None:
    long = "MF0;" + "superpod-7-scalable-unit-12-rail-3-leaf-switch-" * 3 + ":MQM9700/U1"
    value = label_value(long)
    assert len(value) == 63 and K8S_VALUE.match(value)
    assert re.fullmatch(r"superpod-7-scalable-unit-12-rail-3-leaf-switch-superpo-[0-9a-f]{8}", value)
    assert label_value(long) == value  # deterministic
    other = long.replace("leaf-switch-:", "leaf-switch-b:")
    assert label_value(other)[:54] == value[:54] and label_value(other) != value  # told apart by the hash


def test_names_that_would_collide_are_kept_apart_and_valid_names_never_change() -> None:
    names = ["MF0;leaf-1:MQM9700/U1", "MF0;leaf-1:MQM8700/U1", "leaf-1", "leaf 2", "leaf:2", "spine"]
    values = label_values(names)
    assert values["leaf-1"] == "leaf-1"  # already valid: kept as it is, whatever else appears
    assert values["spine"] == "spine"
    assert len(set(values.values())) == len(names)  # one to one
    for name in ("MF0;leaf-1:MQM9700/U1", "MF0;leaf-1:MQM8700/U1", "leaf 2", "leaf:2"):
        assert re.fullmatch(r"leaf-[12]-[0-9a-f]{8}", values[name]), values
    assert all(K8S_VALUE.match(v) and len(v) <= 63 for v in values.values())
    assert label_values(list(reversed(names))) == values  # order does not matter
    # Alone, a rewritten name needs no hash.
    assert label_values(["MF0;leaf-1:MQM9700/U1"]) == {"MF0;leaf-1:MQM9700/U1": "leaf-1"}


@pytest.mark.parametrize("name", ["", ";;;", "///", "-", "é"])
def test_a_name_with_nothing_a_value_can_hold(name: str) -> None:
    value = label_value(name)
    assert re.fullmatch(r"x[0-9a-f]{8}", value)
    assert value != label_value(name + "x")


def test_switch_names_reach_the_labels_rewritten() -> None:
    """From an ibnetdiscover-like fabric whose switches carry their node descriptions as names."""
    graph = FabricGraph(source="test")
    leaf, spine = "MF0;leaf-01:MQM9700/U1", "MF0;spine-01:MQM9700/U1"
    graph.add_node(Node(leaf, NodeKind.switch, tier="leaf"))
    graph.add_node(Node(spine, NodeKind.switch, tier="spine"))
    for host in ("gpu-01", "gpu-02"):
        graph.add_node(Node(f"{host} mlx5_0", NodeKind.hca, host=host))
        graph.add_link(Link(End(f"{host} mlx5_0", 1), End(leaf, int(host[-1]))))
    graph.add_link(Link(End(leaf, 33), End(spine, 1)))
    labels = node_labels(topology_from_graph(graph))
    assert labels["gpu-01"] == {SPINE_LABEL: "spine-01", LEAF_LABEL: "leaf-01"}


def test_labels_round_trip_through_the_official_clients_models() -> None:
    api = client.ApiClient()
    for path in (IBSIM, TWO_TIER, THREE_TIER):
        for host, labels in node_labels(topology_from_graph(load_expected(path))).items():
            node = client.V1Node(metadata=client.V1ObjectMeta(name=host, labels={**labels, HOSTNAME_LABEL: host}))
            wire = json.dumps(api.sanitize_for_serialization(node))
            back = api.deserialize(wire, "V1Node", "application/json")
            assert isinstance(back, client.V1Node)
            assert back.metadata.labels == {**labels, HOSTNAME_LABEL: host}
            for key, value in back.metadata.labels.items():
                assert K8S_VALUE.match(value) and len(value) <= 63, (key, value)


def test_label_changes_sets_what_moved_and_removes_what_went() -> None:
    old = {
        "h1": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-a"},
        "h2": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-a", NVLINK_DOMAIN_LABEL: "d1"},
        "h3": {LEAF_LABEL: "leaf-b"},
    }
    new = {
        "h1": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-a"},  # unchanged: no patch
        "h2": {SPINE_LABEL: "spine-1", LEAF_LABEL: "leaf-b"},  # moved leaf, lost its domain
        "h4": {LEAF_LABEL: "leaf-b"},  # new
    }
    assert label_changes(old, new) == {
        "h2": {LEAF_LABEL: "leaf-b", NVLINK_DOMAIN_LABEL: None},
        "h3": {LEAF_LABEL: None},
        "h4": {LEAF_LABEL: "leaf-b"},
    }
    assert label_changes(new, new) == {}


def _without(graph: FabricGraph, gone: str) -> FabricGraph:
    """The fabric once switch `gone` failed: it and its cables are no longer discovered."""
    return graph.restricted_to(graph.nodes.keys() - {gone})


def test_one_failed_leaf_changes_only_the_hosts_under_it() -> None:
    """The label churn when a leaf goes: its hosts move to their next leaf; nobody else's labels change."""
    graph = load_expected(THREE_TIER)
    before = node_labels(topology_from_graph(graph))
    gone = "leaf-su1-r0"
    failed = _without(graph, gone)
    after = node_labels(topology_from_graph(failed))
    changes = label_changes(before, after)
    under = {h for h, v in before.items() if v[LEAF_LABEL] == gone}
    assert set(changes) == under and under
    assert all(set(c) == {LEAF_LABEL} and c[LEAF_LABEL] != gone for c in changes.values())


def test_a_lost_spine_does_not_rename_its_pod_when_the_labels_in_force_are_given() -> None:
    graph = load_expected(THREE_TIER)
    before = node_labels(topology_from_graph(graph))
    first = min({v[SPINE_LABEL] for v in before.values()})  # the switch a pod's group is named after
    pod = {h for h, v in before.items() if v[SPINE_LABEL] == first}
    lost = topology_from_graph(_without(graph, first))
    # Named from scratch, the pod takes its next spine's name: every host of the pod would be relabelled.
    assert set(label_changes(before, node_labels(lost))) == pod
    # Given what the hosts carry, the pod keeps its name, and keeps it when the spine comes back.
    after = node_labels(lost, before)
    assert label_changes(before, after) == {}
    assert label_changes(after, node_labels(topology_from_graph(graph), after)) == {}


def test_a_sticky_name_never_joins_two_groups() -> None:
    labels = {"a": {SPINE_LABEL: "s2"}, "b": {SPINE_LABEL: "s2"}, "c": {SPINE_LABEL: "s1"}}
    # a and b carried s1 (their pod lost spine s1) while c, a new pod, is named s1 after its own switch
    previous = {"a": {SPINE_LABEL: "s1"}, "b": {SPINE_LABEL: "s1"}}
    sticky_groups(labels, previous, SPINE_LABEL)
    assert labels == {"a": {SPINE_LABEL: "s2"}, "b": {SPINE_LABEL: "s2"}, "c": {SPINE_LABEL: "s1"}}
    # a split pod: the larger part keeps the name, the other takes its own
    labels = {"a": {SPINE_LABEL: "s2"}, "b": {SPINE_LABEL: "s2"}, "c": {SPINE_LABEL: "s3"}}
    previous = {h: {SPINE_LABEL: "s1"} for h in "abc"}
    sticky_groups(labels, previous, SPINE_LABEL)
    assert labels == {"a": {SPINE_LABEL: "s1"}, "b": {SPINE_LABEL: "s1"}, "c": {SPINE_LABEL: "s3"}}
