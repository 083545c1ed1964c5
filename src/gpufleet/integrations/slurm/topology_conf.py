"""Slurm's topology.conf for the topology/tree plugin, written from the fabric's topology model.

One `SwitchName=<leaf> Nodes=<hostlist>` line per leaf, then `SwitchName=<spine> Switches=<leaves>` per spine and
`SwitchName=<core> Switches=<spines>` per core: each switch with the children it is cabled to (slurmctld accepts a
switch under several parents, as every leaf of a fat tree is under every spine of its pod).

A host cabled to several leaves (8 rails on 8 leaves, a dual-port HCA on two): slurmctld (topology_tree.c,
_validate_switches) accepts a node under two leaf switches but logs "Multiple leaf switches contain nodes: ..."
("possibly due to bad configuration file") and puts the node in both leaves' node sets, so a job that asks for
`--switches=1` can be given nodes that Slurm counts under either leaf and the tree no longer says where a node is.
Here each host is listed once, under its home leaf (the topology model's rule: most of its rails, else its first
rail's); a leaf that is no host's home is left out with a comment naming it, as are spines and cores left with
nothing below them (slurmctld refuses a switch without children: "Switch configuration (%s) lacks children").

Switch names are the fabric's (node descriptions); characters Slurm's parser or hostlist syntax would split on are
written as "_". Host names must already be Slurm node names: a host that cannot be one is a UserError.
"""

from __future__ import annotations

import re

from gpufleet.errors import UserError
from gpufleet.fabric.topology import Topology
from gpufleet.integrations.slurm.hostlist import compress_hostlist

_NOT_SLURM = re.compile(r"[^A-Za-z0-9._:-]")


def slurm_switch_names(topology: Topology) -> dict[str, str]:
    """The name each switch goes by in topology.conf: the fabric's, with anything but letters, digits and . _ : -
    written as _, and a suffix where two would end up the same."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(topology.switches):
        slurm = _NOT_SLURM.sub("_", name) or "switch"
        if slurm in taken:
            n = 2
            while f"{slurm}_{n}" in taken:
                n += 1
            slurm = f"{slurm}_{n}"
        taken.add(slurm)
        out[name] = slurm
    return out


def render_topology_conf(topology: Topology) -> str:
    names = slurm_switch_names(topology)
    lines = [
        "# Slurm network topology for TopologyPlugin=topology/tree, written by `gpufleet fabric export`",
        f"# from {topology.source or 'the fabric'}: {len(topology.hosts)} hosts, "
        + ", ".join(f"{len(topology.tier(t))} {t}" for t in ("leaf", "spine", "core"))
        + " switches",
        "# A host cabled to several leaves is listed under one: the leaf with most of its rails, else its first",
        "# rail's (Slurm warns of, and double-counts, a node under two leaf switches).",
    ]
    written: set[str] = set()
    skipped: dict[str, list[str]] = {}  # why -> the switches' names in topology.conf
    for leaf in topology.tier("leaf"):
        hosts = topology.homed(leaf.name)
        if not hosts:
            skipped.setdefault("leaves that are no host's home leaf", []).append(names[leaf.name])
            continue
        lines.append(f"SwitchName={names[leaf.name]} Nodes={_hostlist(hosts)}")
        written.add(leaf.name)
    for tier in ("spine", "core"):
        for switch in topology.tier(tier):
            children = [c for c in switch.children if c in written]
            if not children:
                skipped.setdefault(f"{tier}s with nothing written below them", []).append(names[switch.name])
                continue
            hostlist = compress_hostlist([names[c] for c in children])
            lines.append(f"SwitchName={names[switch.name]} Switches={hostlist}")
            written.add(switch.name)
    lines.extend(f"# left out, {why}: {compress_hostlist(left)}" for why, left in skipped.items())
    lines.extend(f"# note: {note}" for note in topology.notes)
    return "\n".join(lines) + "\n"


def _hostlist(hosts: list[str]) -> str:
    try:
        return compress_hostlist(hosts)
    except ValueError as exc:
        raise UserError(
            f"{exc}: a Slurm node name cannot hold [ ] , # = or spaces",
            fix="name the host as slurm.conf's NodeName does (the HCA's node description is 'host device')",
        ) from None
