"""Slurm's topology.conf for the topology/tree plugin (and, below, topology/block), from the fabric's topology model.

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
from collections import Counter

from gpufleet.errors import UserError
from gpufleet.fabric.rails import natural
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


# topology/block: one `BlockName=<name> Nodes=<hostlist>` line per NVLink domain (an NVL72 rack), then the sizes the
# plugin may aggregate to. Rules as Slurm's sources enforce them (src/plugins/topology/block, tags slurm-23-11-1-1,
# slurm-24-05-1-1, slurm-24-11-1-1):
# - 23.11 reads `BlockLevels` (the aggregation levels, a bit list, default 0-4) and refuses a block whose node count
#   differs from the first block's ("children count no equal bblock_node_cnt").
# - 24.05 and later read `BlockSizes` instead: the base block size, then larger sizes, each the base times a power of
#   two (at most 16 levels); a block with fewer nodes than the base is refused ("children count lower than
#   bblock_node_cnt"); a larger one is accepted.
# - Every release: a block without nodes is refused, a node in no block is only warned about ("blocks lack access to
#   %d nodes"), and higher-level blocks pair blocks adjacent in the file, so blocks are written in fabric order
#   (under the same spine, then the same leaf, next to each other).
BLOCK_SIZES_SINCE = (24, 5)
MAX_BLOCK_LEVELS = 16


def render_block_conf(topology: Topology, *, slurm_version: tuple[int, int] = BLOCK_SIZES_SINCE) -> str:
    """topology.conf for TopologyPlugin=topology/block. The base block is the size most domains have (the design's:
    18 trays of an NVL72); a domain Slurm would refuse (smaller than the base; on 23.11 any other size) is left out
    with a comment naming its hosts, so one short rack does not stop slurmctld."""
    if slurm_version < (23, 11):
        raise UserError(
            f"Slurm {slurm_version[0]}.{slurm_version[1]:02d} has no topology/block plugin (it came with 23.11)",
            fix="export --format slurm-topology (topology/tree) for this release; --slurm-version 23.11 or later",
        )
    domains = topology.nvlink_domains()
    if not domains:
        raise UserError(
            f"{topology.source or 'the fabric'}: no host has a known NVLink domain, so there are no blocks to write",
            fix="name the domains in the cluster manifest (nodePools[].nvlinkDomainNodes, e.g. 18 for GB200 NVL72 "
            "trays), or export from a running control plane whose nodes report their NVLink clique",
        )
    sizes = Counter(len(hosts) for hosts in domains.values())
    base = max(sizes, key=lambda size: (sizes[size], -size))  # the design's size; of equals, the one that keeps more
    names = _block_names(domains)
    order = sorted(domains, key=lambda d: (*_fabric_position(topology, domains[d]), natural(d)))
    sized_by_levels = slurm_version < BLOCK_SIZES_SINCE
    kept = [d for d in order if len(domains[d]) == base or (not sized_by_levels and len(domains[d]) > base)]
    levels = [level for level in range(MAX_BLOCK_LEVELS) if 2**level <= len(kept)]
    lines = [
        "# Slurm network topology for TopologyPlugin=topology/block, written by `gpufleet fabric export`",
        f"# from {topology.source or 'the fabric'}: {len(kept)} NVLink domains of {base} nodes as blocks, in fabric "
        "order (Slurm pairs adjacent blocks); syntax of Slurm " + ("23.11" if sized_by_levels else "24.05 and later"),
    ]
    lines += [f"BlockName={names[d]} Nodes={_hostlist(domains[d])}" for d in kept]
    if sized_by_levels:
        lines.append(f"BlockLevels={compress_levels(levels)}")
    else:
        lines.append("BlockSizes=" + ",".join(str(base * 2**level) for level in levels))
    for d in order:
        if d not in kept:
            rule = "differs from" if sized_by_levels else "is below"
            lines.append(
                f"# left out, NVLink domain {d} has {len(domains[d])} nodes, which {rule} the base block of {base}: "
                f"{_hostlist(domains[d])}"
            )
    lines.extend(f"# note: {note}" for note in topology.notes)
    return "\n".join(lines) + "\n"


def compress_levels(levels: list[int]) -> str:
    """Slurm's bit-list syntax for BlockLevels: 0-4, or 0-1,3."""
    runs: list[str] = []
    for level in levels:
        if runs and runs[-1].split("-")[-1] == str(level - 1):
            runs[-1] = f"{runs[-1].split('-')[0]}-{level}"
        else:
            runs.append(str(level))
    return ",".join(runs)


def _block_names(domains: dict[str, list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    taken: set[str] = set()
    for domain in sorted(domains, key=natural):
        name = _NOT_SLURM.sub("_", domain) or "block"
        n = 2
        unique = name
        while unique in taken:
            unique, n = f"{name}_{n}", n + 1
        taken.add(unique)
        out[domain] = unique
    return out


def _fabric_position(topology: Topology, hosts: list[str]) -> tuple[object, ...]:
    """Where a domain's first host sits: its spine, then its home leaf (natural order), so that adjacent blocks
    share a leaf or a spine where they can."""
    leaf = topology.hosts[hosts[0]].home
    spine = next((s.name for s in topology.tier("spine") if leaf in s.children), "")
    return (natural(spine), natural(leaf))
