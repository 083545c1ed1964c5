"""The vendored CRDs: where each came from, and that checking against them refuses what the API server refuses."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from gpufleet.errors import UserError
from gpufleet.integrations.kubernetes import crds
from gpufleet.integrations.kubernetes.crds import CRDS, check, crd, crd_schema, crd_text, problems

SOURCES = {
    "kueue.x-k8s.io_topologies.yaml": (
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/config/components/crd/bases/kueue.x-k8s.io_topologies.yaml",
        "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb",
    ),
    "kueue.x-k8s.io_resourceflavors.yaml": (
        "https://github.com/kubernetes-sigs/kueue/blob/v0.19.2/config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
        "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb",
    ),
    "topology.volcano.sh_hypernodes.yaml": (
        "https://github.com/volcano-sh/volcano/blob/v1.15.1/config/crd/volcano/bases/topology.volcano.sh_hypernodes.yaml",
        "0a56ed331897f5455916a44d3075671376d731d6",
    ),
    "kai.scheduler_topologies.yaml": (
        "https://github.com/NVIDIA/KAI-Scheduler/blob/v0.13.0/deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml",
        "5d35ecab74e693d6f40309d2e23a68b8ac138571",
    ),
}


@pytest.mark.parametrize("file", sorted(SOURCES))
def test_each_vendored_crd_records_its_source(file: str) -> None:
    url, commit = SOURCES[file]
    header = crd_text(file).split("\n---", 1)[0]
    assert f"# Source:   {url}" in header
    assert f"commit {commit}" in header and "Vendored: " in header and "License: Apache-2.0" in header
    sources = crd_text("SOURCES.md")
    assert any(file in row and commit in row for row in sources.splitlines())


@pytest.mark.parametrize(("group", "kind"), sorted(CRDS))
def test_the_table_matches_the_files(group: str, kind: str) -> None:
    definition = crd(CRDS[(group, kind)].file)
    assert definition["kind"] == "CustomResourceDefinition"
    assert (definition["spec"]["group"], definition["spec"]["names"]["kind"]) == (group, kind)
    assert definition["spec"]["scope"] == "Cluster"


def _topology(levels: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "fabric"},
        "spec": {"levels": [{"nodeLabel": key} for key in levels]},
    }


VALID_TOPOLOGY = _topology(["fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0", "kubernetes.io/hostname"])
KAI_TOPOLOGY = {**VALID_TOPOLOGY, "apiVersion": "kai.scheduler/v1alpha1"}
VALID_HYPERNODE = {
    "apiVersion": "topology.volcano.sh/v1alpha1",
    "kind": "HyperNode",
    "metadata": {"name": "leaf-1"},
    "spec": {"tier": 1, "tierName": "leaf", "members": [{"type": "Node", "selector": {"exactMatch": {"name": "a"}}}]},
}
VALID_FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {"name": "fabric"},
    "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true"}, "topologyName": "fabric"},
}


def edited(obj: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node = out
    for part in path[:-1]:
        node = node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


DELETE = object()


@pytest.mark.parametrize("obj", [VALID_TOPOLOGY, KAI_TOPOLOGY, VALID_HYPERNODE, VALID_FLAVOR])
def test_valid_objects_pass(obj: dict[str, Any]) -> None:
    assert problems(obj) == []
    check(obj)


@pytest.mark.parametrize(
    ("obj", "found"),
    [
        # the structural schema, strict
        (edited(VALID_TOPOLOGY, ["spec", "level"], []), "unknown field 'spec.level' (did you mean 'levels'?)"),
        (edited(VALID_TOPOLOGY, ["spec", "levels"], []), "spec.levels: [] should be non-empty"),
        (_topology([f"l{i}" for i in range(17)]), "is too long"),  # maxItems 16
        (_topology(["Bad Label/x"]), "does not match"),
        (edited(KAI_TOPOLOGY, ["spec"], DELETE), "'spec' is a required property"),  # Kueue's does not require it
        (edited(VALID_HYPERNODE, ["spec", "tier"], -1), "spec.tier: -1 is less than the minimum of 0"),
        (edited(VALID_HYPERNODE, ["spec", "tier"], "1"), "spec.tier: '1' is not of type 'integer'"),
        (edited(VALID_HYPERNODE, ["spec", "members", 0, "type"], "Pod"), "'Pod' is not one of ['Node', 'HyperNode']"),
        (edited(VALID_HYPERNODE, ["spec", "members", 0, "selector", "exactMatch", "name"], "A_B"), "does not match"),
        (edited(VALID_FLAVOR, ["spec", "nodeLabels"], {f"k{i}": "v" for i in range(9)}), "has too many properties"),
        # metadata, as the API server checks it
        (edited(VALID_TOPOLOGY, ["metadata", "name"], "Fabric_1"), "metadata.name: 'Fabric_1' is not a DNS subdomain"),
        (edited(VALID_TOPOLOGY, ["metadata", "nmae"], "x"), "unknown field 'metadata.nmae' (did you mean 'name'?)"),
        (edited(VALID_TOPOLOGY, ["metadata", "labels"], {"a": "x" * 64}), "is not a valid label value"),
        # the CEL rules
        (
            _topology(["kubernetes.io/hostname", "fabric.topograph.run/tier-0"]),
            "spec.levels: the kubernetes.io/hostname label can only be used at the lowest level of topology",
        ),
        (_topology(["a", "b", "a"]), "spec.levels: must be unique"),
        (edited(VALID_FLAVOR, ["spec", "nodeLabels"], {}), "spec: at least one nodeLabel is required when topology"),
        (
            edited(VALID_HYPERNODE, ["spec", "members", 0, "selector"], {}),
            "spec.members.0.selector: Either ExactMatch or RegexMatch or LabelMatch must be specified",
        ),
        (
            edited(VALID_HYPERNODE, ["spec", "members", 0, "selector", "regexMatch"], {"pattern": "a.*"}),
            "spec.members.0.selector: Only one of ExactMatch, RegexMatch, or LabelMatch can be specified",
        ),
    ],
)
def test_a_broken_object_is_refused(obj: dict[str, Any], found: str) -> None:
    found_problems = problems(obj)
    assert any(found in p for p in found_problems), found_problems
    with pytest.raises(UserError, match=f"{obj['kind']} .* is invalid") as caught:
        check(obj)
    assert caught.value.fix and re.search(r"\((Kueue|Volcano|KAI Scheduler) v\d", caught.value.fix)


def test_the_kai_topology_has_kueues_rules() -> None:
    kai = {**_topology(["kubernetes.io/hostname", "a"]), "apiVersion": "kai.scheduler/v1alpha1"}
    assert problems(kai) == [
        "spec.levels: the kubernetes.io/hostname label can only be used at the lowest level of topology"
    ]


def test_transition_rules_are_left_to_updates() -> None:
    schema = crd_schema("kueue.x-k8s.io/v1beta2", "Topology")
    rules = [v["rule"] for v in schema["properties"]["spec"]["properties"]["levels"]["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules  # immutable levels: a rule of updates, not of a created object
    assert problems(VALID_TOPOLOGY) == []


def test_an_unknown_kind_or_version_is_named() -> None:
    with pytest.raises(UserError, match="no vendored CRD for Queue"):
        problems({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Queue"})
    with pytest.raises(UserError, match="serves no version 'v2'") as caught:
        problems({**VALID_TOPOLOGY, "apiVersion": "kueue.x-k8s.io/v2"})
    assert "v1beta1, v1beta2" in caught.value.fix


SELECTORS = [
    {"exactMatch": {"name": "a"}},
    {"regexMatch": {"pattern": "a.*"}},
    {"labelMatch": {"matchLabels": {"k": "v"}}},
    {},
    {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "a.*"}},
    {"exactMatch": {"name": "a"}, "labelMatch": {}, "regexMatch": {"pattern": "b"}},
]


@pytest.mark.parametrize("selector", SELECTORS)
def test_rules_that_read_only_which_fields_are_set_give_the_full_evaluations_verdict(selector: dict[str, Any]) -> None:
    import celpy

    schema = crd_schema("topology.volcano.sh/v1alpha1", "HyperNode")
    rules = schema["properties"]["spec"]["properties"]["members"]["items"]["properties"]["selector"]
    for validation in rules["x-kubernetes-validations"]:
        rule = validation["rule"]
        assert crds._presence_fields(rule) == {"exactMatch", "regexMatch", "labelMatch"}
        full = crds._cel_program(rule).evaluate({"self": celpy.json_to_cel(selector)})
        assert bool(crds._evaluate(rule, selector)) == bool(full)
    assert crds._presence_fields("self.size() >= 1") is None
    assert crds._presence_fields("has(self.a) && self.a.size() > 0") is None
    assert crds._presence_fields("has(self.a.b)") is None


def test_a_hypernodes_node_members_cost_one_evaluation_per_rule() -> None:
    hypernode = edited(VALID_HYPERNODE, ["spec", "members"], [
        {"type": "Node", "selector": {"exactMatch": {"name": f"node-{i:04d}"}}} for i in range(2000)
    ])  # fmt: skip
    crds._cel_result.cache_clear()
    assert problems(hypernode) == []
    assert crds._cel_result.cache_info().misses == 2  # the selector's two rules, once each
    broken = edited(hypernode, ["spec", "members", 1500, "selector", "regexMatch"], {"pattern": "x"})
    assert problems(broken) == [
        "spec.members.1500.selector: Only one of ExactMatch, RegexMatch, or LabelMatch can be specified"
    ]
