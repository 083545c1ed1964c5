"""The fabric as Kubernetes node labels: per host, its NVLink domain (where one is known), core, spine and leaf, the
labels that Kueue's Topology-Aware Scheduling, KAI Scheduler's topology and Volcano's network topology read.

Label keys are NVIDIA Topograph's (v1.0.0, docs/reference/node-labels.md): `accelerator.topograph.run/domain` for
the accelerator (NVLink) domain, and `fabric.topograph.run/tier-N` for the switch tiers, tier 0 the switch closest
to the node (the leaf), tier 1 the spine, tier 2 the core. A cluster labelled by Topograph and one labelled by
gpufleet therefore read the same to KAI, Kueue and NVSentinel; `kubernetes.io/hostname` is the innermost level, as
in Kueue's Topology-Aware Scheduling example (v0.19.2, site/static/examples/tas/sample-gpu-queues.yaml).

Levels, outermost first (Kueue's `spec.levels` and KAI's `spec.levels` order): NVLink domain, core, spine, leaf,
host. The NVLink domain is outermost, as Slurm's topology/block takes NVLink domains as its blocks: a domain whose
trays are cabled to two leaves stays one domain, and within it the fabric tiers still tell the hosts apart. Only
the levels every host has are used (no NVLink level unless every host's domain is known, no core level in a
two-tier fabric): Kueue leaves out of its topology any node that lacks one of the levels' labels.

A host's leaf is its home leaf (see gpufleet.fabric.topology). Its spine is the spine group of that leaf: the
leaves and spines cabled together without going through a core (a fat tree's pod, or the whole two-tier fabric),
named by its first spine in natural order; its core likewise the group of spine groups cabled through cores. A
leaf's uplinks to several spines of one pod therefore give one value, the same for every host of the pod. The
name follows the group's membership: should its first spine fail for good, the pod's hosts take the next spine's
name (a leaf's failure moves only the hosts homed on it).

Label values follow Kubernetes' rules (at most 63 characters of `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`).
A switch name that breaks them is rewritten: an NVIDIA managed switch's description `MF0;leaf-07:MQM9700/U1`
becomes its system name `leaf-07`; any other run of characters a value cannot hold becomes `-`; and a value that
had to be cut to 63 characters, or that two rewritten names would share, ends in `-` and 8 hex digits of the
name's SHA-256. A name already valid is kept as it is, so it never changes when another switch appears.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from gpufleet.fabric.rails import natural
from gpufleet.fabric.topology import Topology

NVLINK_DOMAIN_LABEL = "accelerator.topograph.run/domain"
LEAF_LABEL = "fabric.topograph.run/tier-0"
SPINE_LABEL = "fabric.topograph.run/tier-1"
CORE_LABEL = "fabric.topograph.run/tier-2"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Every level gpufleet labels, outermost first; `levels(topology)` is the part of it one fabric uses.
LEVELS = (NVLINK_DOMAIN_LABEL, CORE_LABEL, SPINE_LABEL, LEAF_LABEL, HOSTNAME_LABEL)
# The labels gpufleet owns on a node (the hostname label is the kubelet's): what a relabel may set or remove.
MANAGED_LABELS = (NVLINK_DOMAIN_LABEL, CORE_LABEL, SPINE_LABEL, LEAF_LABEL)
TIER_LABEL = {"leaf": LEAF_LABEL, "spine": SPINE_LABEL, "core": CORE_LABEL}

MAX_VALUE = 63
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_MANAGED_NAME = re.compile(r"^MF0;(?P<name>[^:]+):")  # an NVIDIA switch's description: "MF0;leaf-07:MQM9700/U1"
_NOT_VALUE = re.compile(r"[^-A-Za-z0-9_.]+")
_HASH = 8


def valid_value(value: str) -> bool:
    """Whether `value` is a valid Kubernetes label value."""
    return len(value) <= MAX_VALUE and _VALUE.match(value) is not None


def hashed_value(base: str, name: str) -> str:
    """`base` cut to leave room for `-` and 8 hex digits of `name`'s SHA-256, which it then ends in."""
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH]
    base = base[: MAX_VALUE - _HASH - 1].rstrip("-_.")
    return f"{base}-{digest}" if base else f"x{digest}"


def _rewritten(name: str) -> tuple[str, bool]:
    """`name` as a label value, and whether it had to be cut (so that only a hash keeps it apart)."""
    managed = _MANAGED_NAME.match(name)
    readable = managed.group("name") if managed is not None else name
    value = _NOT_VALUE.sub("-", readable).strip("-_.")
    if len(value) > MAX_VALUE or not value:
        return hashed_value(value, name), True
    return value, False


def label_values(names: Iterable[str]) -> dict[str, str]:
    """Each name -> a valid label value, deterministic, and one to one over `names` (see the module's note)."""
    out: dict[str, str] = {}
    rewritten: dict[str, str] = {}
    for name in names:
        if name and valid_value(name):  # an empty value is valid, but names nothing
            out[name] = name
        else:
            value, cut = _rewritten(name)
            if cut:
                out[name] = value
            else:
                rewritten[name] = value
    taken: dict[str, int] = {}
    for value in [*out.values(), *rewritten.values()]:
        taken[value] = taken.get(value, 0) + 1
    for name, value in rewritten.items():
        out[name] = hashed_value(value, name) if taken[value] > 1 else value
    return out


def label_value(name: str) -> str:
    """One name as a label value, as `label_values` gives it when no other name shares its rewriting."""
    return label_values([name])[name]


def _groups(children_of: Mapping[str, Iterable[str]], members: Iterable[str]) -> dict[str, str]:
    """Each member -> its group's name: the connected components of the parent/child cables between `members` and
    the parents in `children_of`, each named by its first parent in natural order. A member no parent reaches has
    no group."""
    parent_of: dict[str, str] = {}

    def root(x: str) -> str:
        while parent_of.get(x, x) != x:
            parent_of[x] = parent_of.get(parent_of[x], parent_of[x])
            x = parent_of[x]
        return x

    wanted = set(members)
    for parent, children in children_of.items():
        for child in children:
            if child in wanted:
                a, b = root(parent), root(child)
                if a != b:
                    parent_of[a] = b
    first: dict[str, str] = {}
    for parent in sorted(children_of, key=natural):
        first.setdefault(root(parent), parent)
    return {m: first[root(m)] for m in wanted if root(m) in first}


def switch_groups(topology: Topology) -> tuple[dict[str, str], dict[str, str]]:
    """leaf -> its spine group's name, and spine group name -> its core group's name (see the module's note)."""
    spines = {s.name: s.children for s in topology.tier("spine")}
    leaves = [s.name for s in topology.tier("leaf")]
    spine_of = _groups(spines, leaves)
    # A core's children are spines; each stands for its group (a spine always has a leaf below it, or it would
    # not be in the topology).
    group = {spine: spine_of[children[0]] for spine, children in spines.items() if children and children[0] in spine_of}
    cores = {s.name: {group[c] for c in s.children if c in group} for s in topology.tier("core")}
    core_of = _groups(cores, set(spine_of.values()))
    return spine_of, core_of


def levels(topology: Topology) -> list[str]:
    """The label keys every host of this fabric carries, outermost first, ending with the hostname. A key some
    host lacks is no level: Kueue leaves a node without every level's label out of the flavor's topology
    (NodeMatchesFlavor, pkg/util/tas/node.go, v0.19.2), so a level only some hosts have would hide the others."""
    carried = [set(labels) for labels in node_labels(topology).values()]
    return [key for key in LEVELS if key == HOSTNAME_LABEL or (carried and all(key in c for c in carried))]


def node_labels(
    topology: Topology, previous: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, dict[str, str]]:
    """host -> label key -> value: its NVLink domain (where known), core, spine and leaf (its home leaf), each
    where the fabric has it. Hosts in natural order.

    `previous`: the labels the hosts carry now. A spine or core group is named after one of its switches, so a
    lost switch would rename its whole group (every host of a pod relabelled for one failed spine, and again when
    it returns). Given the labels in force, a group keeps the name most of its hosts already carry (see
    `sticky_groups`); a new group, or one split or merged so that no name holds a majority, takes its own."""
    spine_of, core_of = switch_groups(topology)
    values = label_values(
        [*topology.switches, *(h.nvlink_domain for h in topology.hosts.values() if h.nvlink_domain is not None)]
    )
    out: dict[str, dict[str, str]] = {}
    for host in sorted(topology.hosts.values(), key=lambda h: natural(h.name)):
        labels: dict[str, str] = {}
        if host.nvlink_domain is not None:
            labels[NVLINK_DOMAIN_LABEL] = values[host.nvlink_domain]
        spine = spine_of.get(host.home)
        core = core_of.get(spine) if spine is not None else None
        if core is not None:
            labels[CORE_LABEL] = values[core]
        if spine is not None:
            labels[SPINE_LABEL] = values[spine]
        labels[LEAF_LABEL] = values[host.home]
        out[host.name] = labels
    if previous:
        for key in (SPINE_LABEL, CORE_LABEL):
            sticky_groups(out, previous, key)
    return out


def sticky_groups(labels: dict[str, dict[str, str]], previous: Mapping[str, Mapping[str, str]], key: str) -> None:
    """Rename, in place, each group of hosts sharing a value of `key` to the value most of them carried before,
    where more than half did and no larger group claimed that value first."""
    groups: dict[str, list[str]] = {}
    for host, own in labels.items():
        if key in own:
            groups.setdefault(own[key], []).append(host)
    renamed: dict[str, str] = {}
    claimed: set[str] = set()
    for value, hosts in sorted(groups.items(), key=lambda g: (-len(g[1]), natural(g[0]))):
        before: dict[str, int] = {}
        for host in hosts:
            old = previous.get(host, {}).get(key)
            if old is not None:
                before[old] = before.get(old, 0) + 1
        if not before:
            continue
        old, count = max(before.items(), key=lambda item: (item[1], item[0] == value))
        if 2 * count > len(hosts) and old not in claimed:
            renamed[value] = old
            claimed.add(old)
    while True:  # two groups under one name would be one group to the schedulers: such a rename is undone
        final: dict[str, list[str]] = {}
        for value in groups:
            final.setdefault(renamed.get(value, value), []).append(value)
        clashes = [value for names in final.values() if len(names) > 1 for value in names if value in renamed]
        if not clashes:
            break
        for value in clashes:
            del renamed[value]
    for own in labels.values():
        if key in own and own[key] in renamed:
            own[key] = renamed[own[key]]


def label_changes(
    old: Mapping[str, Mapping[str, str]], new: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str | None]]:
    """What a patch must do to take the nodes from `old` to `new` labels: host -> key -> the value to set, or None
    to remove it (a strategic-merge or JSON merge patch removes a label given null). Hosts and keys that do not
    change are left out, so an unchanged fabric patches nothing. A host only in `old` has its labels removed."""
    out: dict[str, dict[str, str | None]] = {}
    for host in sorted({*old, *new}, key=natural):
        before, after = old.get(host, {}), new.get(host, {})
        change: dict[str, str | None] = {k: v for k, v in after.items() if before.get(k) != v}
        change.update({k: None for k in before if k not in after})
        if change:
            out[host] = dict(sorted(change.items()))
    return out
