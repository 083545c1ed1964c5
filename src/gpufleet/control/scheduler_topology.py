"""The schedulers' own topology inputs kept by the control plane, beside the node labels: Volcano's HyperNodes
(`gpufleet server --volcano-hypernodes`, a backend that KeepsHyperNodes) and Slurm's topology.conf
(`--slurm-topology-conf PATH`, a backend that WritesTopologyConf).

Both are made from the settled view, never from the latest poll: the labels each host carries as the relabeller
applied them (gpufleet.control.fabric_topology.LabelSettler.applied), which change only once a host's new place held
for the settle polls. A flapping cable therefore changes no HyperNode and no topology.conf, and a failed leaf
changes them once, after its hosts' moves settled. The view is read as a Topology (`settled_topology`): a leaf per
leaf label value with the hosts carrying it, a spine per spine group, a core per core group, the NVLink domain from
its label. So the HyperNodes are `fabric export --format volcano`'s for a settled fabric, and topology.conf has a
line per leaf, per spine group and per core group (a pod's spines are one switch to Slurm's tree, which asks only
which leaves share a parent). With Kubernetes, the view is written only once the labels caught up (no host waiting
for its relabel but those whose writes failed), so a first labelling of many hosts, PER_TURN a turn, is one write of
the HyperNodes, not one per turn. With Slurm, there are no labels to write: hosts whose place settled are taken
into the view as they settle.

A write is an action like a relabel: audited (actor `fabric`), an event in the control plane's log and the
fabric's, a dry run under `--remediate dry-run` (said, not done; the HyperNodes' dry run reads what is there to say
what would change), nothing under `off`; one that fails is tried again after RETRY_S, doubling up to MAX_RETRY_S,
and audited when it first fails. The last view written is remembered, so an unchanged view costs no API call and no
file write, but for a check every RESYNC_S that what was written is still there (a HyperNode deleted by hand is made
again, a topology.conf edited by hand is written again; a dry run does not check, or it would say it all again).
After a restart the first settled view is written once (what is already as wanted is left alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufleet.control.fabric import FabricService
from gpufleet.control.relabel import ACTOR, MAX_RETRY_S, RETRY_S, Audit, Event, Relabeller
from gpufleet.errors import UserError
from gpufleet.fabric.rails import natural
from gpufleet.fabric.topology import Topology, TopologyHost, TopologySwitch
from gpufleet.integrations.kubernetes.topology import (
    CORE_LABEL,
    LEAF_LABEL,
    NVLINK_DOMAIN_LABEL,
    SPINE_LABEL,
    node_labels,
)
from gpufleet.integrations.kubernetes.topology_objects import volcano_hypernodes
from gpufleet.integrations.slurm.topology_conf import render_block_conf, render_topology_conf
from gpufleet.remediate.backends.base import (
    KeepsHyperNodes,
    LabelsNodes,
    RemediationBackend,
    WritesTopologyConf,
)

log = logging.getLogger("gpufleet.control.scheduler_topology")

View = dict[str, dict[str, str]]  # host -> its settled topology labels
SLURM_FORMATS = ("tree", "block")
MOVES_SAID = 6  # hosts named in an audit line; the rest are counted
RESYNC_S = 3600.0  # an unchanged view is checked against what is there this often


@dataclass(frozen=True, slots=True)
class TopologyOutputs:
    """Which schedulers' topology inputs the control plane keeps besides the node labels."""

    hypernodes: bool = False  # Volcano's HyperNodes (Kubernetes backend)
    slurm_conf: Path | None = None  # Slurm's topology.conf (Slurm backend)
    slurm_format: str = "tree"  # tree (topology/tree) or block (topology/block, NVLink domains)

    def __post_init__(self) -> None:
        if self.slurm_format not in SLURM_FORMATS:
            raise UserError(f"--slurm-topology-format {self.slurm_format!r}", fix="use tree or block")
        if self.slurm_format != "tree" and self.slurm_conf is None:
            raise UserError(
                f"--slurm-topology-format {self.slurm_format} without a file to write",
                fix="add --slurm-topology-conf PATH (e.g. /etc/slurm/topology.conf)",
            )


def settled_topology(view: Mapping[str, Mapping[str, str]], source: str = "the settled fabric") -> Topology:
    """The topology the labels tell: each host under the leaf its label names, each leaf under its hosts' spine
    group, each spine group under its hosts' core group. Hosts without a leaf label are not in it."""
    topology = Topology(source=source)
    leaves: dict[str, list[str]] = {}
    spines: dict[str, set[str]] = {}
    cores: dict[str, set[str]] = {}
    for host in sorted(view, key=natural):
        labels = view[host]
        leaf = labels.get(LEAF_LABEL)
        if not leaf:
            continue
        leaves.setdefault(leaf, []).append(host)
        spine = labels.get(SPINE_LABEL)
        if spine:
            spines.setdefault(spine, set()).add(leaf)
            core = labels.get(CORE_LABEL)
            if core:
                cores.setdefault(core, set()).add(spine)
        topology.hosts[host] = TopologyHost(host, home=leaf, leaves=(leaf,), rails=0,
                                            nvlink_domain=labels.get(NVLINK_DOMAIN_LABEL))  # fmt: skip
    for leaf in sorted(leaves, key=natural):
        topology.switches[leaf] = TopologySwitch(leaf, "leaf", hosts=tuple(leaves[leaf]))
    for tier, groups in (("spine", spines), ("core", cores)):
        for name in sorted(groups, key=natural):
            topology.switches[name] = TopologySwitch(name, tier, children=tuple(sorted(groups[name], key=natural)))
    return topology


def moves(before: Mapping[str, Mapping[str, str]] | None, after: Mapping[str, Mapping[str, str]]) -> str:
    """The hosts whose leaf differs between two views, said briefly ("" when none, or when there was no view)."""
    if not before:
        return ""
    moved = sorted(
        (h for h, labels in after.items() if h in before and before[h].get(LEAF_LABEL) != labels.get(LEAF_LABEL)),
        key=natural,
    )
    if not moved:
        return ""
    said = ", ".join(f"{h} to {after[h].get(LEAF_LABEL)}" for h in moved[:MOVES_SAID])
    more = f" and {len(moved) - MOVES_SAID} more" if len(moved) > MOVES_SAID else ""
    return f" ({len(moved)} host{'s' if len(moved) > 1 else ''} moved: {said}{more})"


class TopologyKeeper:
    """One scheduler input made from the settled view, written when the view changes."""

    action = ""  # the audit's action
    target = ""  # the audit's target

    def __init__(self, fabric: FabricService, mode: str, *, clock: Callable[[], float], audit: Audit,
                 add_event: Event) -> None:  # fmt: skip
        self.fabric = fabric
        self.mode = mode  # off, dry-run, on (the control plane's remediation mode)
        self.clock = clock
        self.audit = audit
        self.add_event = add_event
        self.written_view: View | None = None  # the view last written (or, in a dry run, said)
        self.retry_at = 0.0
        self.synced_at: float | None = None  # when the view was last written (or found as written)
        self.failures = 0  # writes failed in a row
        self.writes = 0  # writes carried out (or said)

    def view(self) -> View | None:
        """The settled view now, under the fabric's lock; None while it is not ready to be written."""
        raise NotImplementedError

    def write(self, topology: Topology, view: View, *, dry_run: bool) -> list[str]:
        """Write the topology; what was done, one line each (empty: nothing differed)."""
        raise NotImplementedError

    def run(self) -> int:
        """Write the settled view if it changed since the last write; how many things were written."""
        if self.mode == "off":
            return 0
        now = self.clock()
        if now < self.retry_at:
            return 0
        dry_run = self.mode == "dry-run"
        check = not dry_run and self.synced_at is not None and now - self.synced_at >= RESYNC_S
        with self.fabric.lock:
            view = self.view()
            if not view or (view == self.written_view and not check):
                return 0
            view = {host: dict(labels) for host, labels in view.items()}
        try:
            said = self.write(settled_topology(view), view, dry_run=dry_run)
        except Exception as exc:  # the API or the file system refused, or the scheduler is away: tried again later
            wait = min(RETRY_S * 2**self.failures, MAX_RETRY_S)
            if not self.failures:
                self.audit(ACTOR, self.action, self.target, f"failed: {exc}", "", dry_run=dry_run)
            (log.debug if self.failures else log.warning)(
                "%s failed (%d in a row; tried again in %.0f s): %s", self.action, self.failures + 1, wait, exc
            )
            self.failures += 1
            self.retry_at = now + wait
            return 0
        self.failures, self.retry_at, self.synced_at = 0, 0.0, now
        self.written_view = view
        for line in said:
            self.audit(ACTOR, self.action, self.target, line, "", dry_run=dry_run)
            self.fabric.scheduler_topology_written(now, line)
            self.add_event(now, "fabric", self.target, line, "")
        self.writes += len(said)
        return len(said)


class HyperNodeKeeper(TopologyKeeper):
    """Volcano's HyperNodes from the labels the relabeller applied, once it caught up."""

    action = "hypernodes"
    target = "volcano/hypernodes"

    def __init__(self, fabric: FabricService, backend: KeepsHyperNodes, relabeller: Relabeller, mode: str, *,
                 clock: Callable[[], float], audit: Audit, add_event: Event) -> None:  # fmt: skip
        super().__init__(fabric, mode, clock=clock, audit=audit, add_event=add_event)
        self.backend = backend
        self.relabeller = relabeller

    def view(self) -> View | None:
        settler = self.fabric.topology.settler
        if any(host not in self.relabeller.retry_at for host in settler.due()):
            return None  # labels still to write: the HyperNodes follow once they are
        return settler.applied

    def write(self, topology: Topology, view: View, *, dry_run: bool) -> list[str]:
        done = self.backend.sync_hypernodes(volcano_hypernodes(topology), dry_run=dry_run)
        moved = moves(self.written_view, view)
        return [line + moved for line in done[:1]] + done[1:] if done else []


class SlurmTopologyKeeper(TopologyKeeper):
    """Slurm's topology.conf from the hosts' settled places."""

    action = "topology-conf"

    def __init__(self, fabric: FabricService, backend: WritesTopologyConf, path: Path, style: str, mode: str, *,
                 clock: Callable[[], float], audit: Audit, add_event: Event) -> None:  # fmt: skip
        super().__init__(fabric, mode, clock=clock, audit=audit, add_event=add_event)
        self.backend = backend
        self.path = path
        self.style = style  # tree or block
        self.target = f"slurm/{path.name}"

    def view(self) -> View | None:
        settler = self.fabric.topology.settler
        for host in settler.due():  # no label to write: a host whose place settled is in the view at once
            settler.written(host, settler.wanted[host])
        return settler.applied

    def write(self, topology: Topology, view: View, *, dry_run: bool) -> list[str]:
        text = render_topology_conf(topology) if self.style == "tree" else render_block_conf(topology)
        text = text.replace("written by `gpufleet fabric export`", "written by the gpufleet control plane", 1)
        moved = moves(self.written_view, view)
        if dry_run:
            lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
            return [f"would write {self.path} ({lines} lines) and reconfigure slurmctld{moved}"]
        done = self.backend.write_topology_conf(self.path, text, retry=self.failures > 0)
        return [done + moved] if done else []


def topology_keepers(
    fabric: FabricService,
    backend: RemediationBackend,
    outputs: TopologyOutputs | None,
    relabeller: Relabeller | None,
    mode: str,
    *,
    clock: Callable[[], float],
    audit: Audit,
    add_event: Event,
) -> list[TopologyKeeper]:
    """The keepers `outputs` asks for, on `backend`; a backend that cannot keep one is a UserError with the fix."""
    if outputs is None:
        return []
    out: list[TopologyKeeper] = []
    if outputs.hypernodes:
        if not isinstance(backend, KeepsHyperNodes) or not isinstance(backend, LabelsNodes) or relabeller is None:
            raise UserError(
                f"--volcano-hypernodes needs the kubernetes backend (this is {backend.name or 'none'})",
                fix="add --backend kubernetes, or drop --volcano-hypernodes",
            )
        out.append(HyperNodeKeeper(fabric, backend, relabeller, mode, clock=clock, audit=audit, add_event=add_event))
    if outputs.slurm_conf is not None:
        if not isinstance(backend, WritesTopologyConf):
            raise UserError(
                f"--slurm-topology-conf needs the slurm backend (this is {backend.name or 'none'})",
                fix="add --backend slurm, or drop --slurm-topology-conf",
            )
        if not outputs.slurm_conf.parent.is_dir():
            raise UserError(
                f"--slurm-topology-conf {outputs.slurm_conf}: no folder {outputs.slurm_conf.parent}",
                fix="name topology.conf beside slurm.conf (e.g. /etc/slurm/topology.conf)",
            )
        if fabric.topology.labels_of is None:  # the hosts' places settle as labels do, though none is written
            fabric.topology.labels_of = node_labels
        out.append(SlurmTopologyKeeper(fabric, backend, outputs.slurm_conf, outputs.slurm_format, mode, clock=clock,
                                       audit=audit, add_event=add_event))  # fmt: skip
    return out
