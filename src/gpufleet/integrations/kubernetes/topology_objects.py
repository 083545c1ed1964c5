"""The objects the Kubernetes schedulers read the fabric from, over the node labels of
gpufleet.integrations.kubernetes.topology:

- Kueue (v0.19.2, kueue.x-k8s.io/v1beta2): a `Topology` whose levels are the labels' levels, outermost first, and the
  `ResourceFlavor` that names it (`spec.topologyName`) and selects the GPU nodes (`spec.nodeLabels`, which Kueue
  requires with a topology; by default the GPU Operator's `nvidia.com/gpu.present: "true"`).
- KAI Scheduler (v0.13.0, kai.scheduler/v1alpha1): its `Topology`, the same levels.
- Volcano (v1.15.1, topology.volcano.sh/v1alpha1): a `HyperNode` per switch group, tiers numbered as Volcano's docs
  number them, from 1 at the bottom: tier 1 a leaf with its homed hosts as Node members (exactMatch), tier 2 a
  spine group with its leaves' HyperNodes as members, tier 3 a core group with its spine groups'. Volcano's
  hypernodes form a tree (a member has one parent), so the NVLink domain, which need not nest inside one leaf, is
  left to the labels (Kueue and KAI read it there).

Every object is checked against its vendored CRD before it is returned (gpufleet.integrations.kubernetes.crds).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpufleet.errors import UserError
from gpufleet.fabric.rails import natural
from gpufleet.fabric.topology import Topology
from gpufleet.integrations.kubernetes.crds import check
from gpufleet.integrations.kubernetes.topology import hashed_value, label_values, levels, switch_groups

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KAI_API = "kai.scheduler/v1alpha1"
VOLCANO_API = "topology.volcano.sh/v1alpha1"
DEFAULT_NAME = "gpufleet-fabric"
DEFAULT_FLAVOR_LABELS = {"nvidia.com/gpu.present": "true"}  # the GPU Operator's label on every GPU node
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
VOLCANO_TIER = {"leaf": 1, "spine": 2, "core": 3}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _check_name(name: str, what: str, fix: str) -> None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise UserError(
            f"{what} {name!r} is not a valid Kubernetes object name (a DNS subdomain: lowercase letters, digits, "
            "'-' and '.', starting and ending with a letter or digit, 253 at most)",
            fix=fix,
        )


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": dict(MANAGED_BY)}


def kueue_objects(
    topology: Topology, *, name: str = DEFAULT_NAME, flavor_labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Kueue's Topology `name` and the ResourceFlavor `name` that uses it."""
    _check_name(name, "--name", "e.g. --name gpufleet-fabric")
    topology_object = {
        "apiVersion": KUEUE_API,
        "kind": "Topology",
        "metadata": _meta(name),
        "spec": {"levels": [{"nodeLabel": key} for key in levels(topology)]},
    }
    flavor = {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": _meta(name),
        "spec": {"nodeLabels": dict(DEFAULT_FLAVOR_LABELS if flavor_labels is None else flavor_labels),
                 "topologyName": name},
    }  # fmt: skip
    for obj in (topology_object, flavor):
        check(obj)
    return [topology_object, flavor]


def kai_topology(topology: Topology, *, name: str = DEFAULT_NAME) -> dict[str, Any]:
    """KAI Scheduler's Topology `name`: the levels its workloads' topology annotations name."""
    _check_name(name, "--name", "e.g. --name gpufleet-fabric")
    obj = {
        "apiVersion": KAI_API,
        "kind": "Topology",
        "metadata": _meta(name),
        "spec": {"levels": [{"nodeLabel": key} for key in levels(topology)]},
    }
    check(obj)
    return obj


def hypernode_names(topology: Topology) -> dict[str, str]:
    """Each switch -> its HyperNode's name: its label value in lowercase with every run of other characters as
    '-'. A name that needed no change keeps it; a changed one that meets another gets the label values' hash
    suffix (names differing only in case), so a name never changes when another switch appears."""
    values = label_values(topology.switches)
    kept = {s: v for s, v in values.items() if _DNS_LABEL.match(v)}
    lowered = {s: re.sub(r"[^a-z0-9]+", "-", v.lower()).strip("-") for s, v in values.items() if s not in kept}
    count = Counter([*kept.values(), *lowered.values()])
    return {**kept, **{s: v if v and count[v] == 1 else hashed_value(v, s) for s, v in lowered.items()}}


def volcano_hypernodes(topology: Topology) -> list[dict[str, Any]]:
    """Volcano HyperNodes, tier 1 (leaves) first, each tier in natural order of its switches."""
    for host in topology.hosts:
        _check_name(host, "host", "Volcano's Node members name Kubernetes nodes: use the nodes' names as hosts")
    names = hypernode_names(topology)
    spine_of, core_of = switch_groups(topology)
    objects: list[dict[str, Any]] = []

    def hypernode(switch: str, tier: str, members: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": VOLCANO_API,
            "kind": "HyperNode",
            "metadata": _meta(names[switch]),
            "spec": {"tier": VOLCANO_TIER[tier], "tierName": tier, "members": members},
        }

    for leaf in topology.tier("leaf"):
        homed = topology.homed(leaf.name)
        if homed:  # a leaf that is no host's home has nothing a scheduler places under it
            objects.append(hypernode(leaf.name, "leaf", [_member("Node", h) for h in homed]))
    below = {host.home for host in topology.hosts.values()}  # the tier below's HyperNodes, by switch
    for upper, tier in ((spine_of, "spine"), (core_of, "core")):
        children: dict[str, list[str]] = {}
        for child in below:
            if child in upper:
                children.setdefault(upper[child], []).append(child)
        for group in sorted(children, key=natural):
            members = [_member("HyperNode", names[c]) for c in sorted(children[group], key=natural)]
            objects.append(hypernode(group, tier, members))
        below = set(children)
    for obj in objects:
        check(obj)
    return objects


def _member(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "selector": {"exactMatch": {"name": name}}}
