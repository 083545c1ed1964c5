"""Whose cordon a node's is: the one rule every backend applies before it cordons or returns a node.

A backend keeps, with the node, the incidents that cordoned it (Kubernetes: the `gpufleet.io/cordoned-by`
annotation; Slurm: the drain reason `gpufleet[inc-1,inc-2]: ...`; the twin: its own book). Then:

- an incident cordons a node: it joins the node's holders; a node already unschedulable with no holders is someone
  else's cordon (an operator's `kubectl cordon`, a maintenance tool, an operator's Slurm drain with its own reason):
  it is left exactly as it is and the incident does not join, so it can never be the one to return it;
- an incident returns a node: it leaves the holders; the node comes back only when it was the last holder, and stays
  cordoned, saying why, while other incidents hold it or when someone else cordoned it;
- a person (incident None) cordons or returns a node whoever holds it: that is their call, and the control plane
  audits it. Their uncordon clears gpufleet's holders too, so no stale holder keeps a node out later.

NVSentinel's fault-quarantine returned nodes it had not cordoned (NVIDIA/NVSentinel#1424: a node cordoned for
maintenance became schedulable when its fault cleared); its fix, like this rule, records a cordon found in place and
keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

FOREIGN = "cordoned by someone else (no gpufleet annotation)"


@dataclass(frozen=True, slots=True)
class CordonChange:
    """What a backend writes: the node's schedulability and its holders after the change, and the step's detail.
    `write` is False when nothing changes on the node."""

    unschedulable: bool
    holders: tuple[str, ...]
    detail: str
    write: bool


def _names(holders: tuple[str, ...] | list[str]) -> str:
    return ", ".join(holders)


def on_cordon(
    node: str, unschedulable: bool, holders: tuple[str, ...], incident: str | None, *, foreign: str = FOREIGN
) -> CordonChange:
    """`unschedulable` and `holders` as the node is now; `foreign` says whose cordon an unowned one is."""
    if incident is None:
        return CordonChange(True, holders, f"node {node} cordoned", not unschedulable)
    if unschedulable and not holders:
        return CordonChange(
            True, holders, f"node {node} already {foreign}: left as is, not gpufleet's to return", False
        )
    if incident in holders:
        return CordonChange(True, holders, f"node {node} cordoned (held by {_names(holders)})", not unschedulable)
    after = (*holders, incident)
    return CordonChange(True, after, f"node {node} cordoned (held by {_names(after)})", True)


def on_uncordon(
    node: str, unschedulable: bool, holders: tuple[str, ...], incident: str | None, *, foreign: str = FOREIGN
) -> CordonChange:
    if incident is None:
        cleared = f"; cleared gpufleet's cordon for {_names(holders)}" if holders else ""
        return CordonChange(False, (), f"node {node} uncordoned by a person{cleared}", unschedulable or bool(holders))
    rest = tuple(h for h in holders if h != incident)
    if rest:
        return CordonChange(
            unschedulable, rest, f"node {node} kept cordoned: still held by {_names(rest)}", rest != holders
        )
    if incident in holders:
        if not unschedulable:  # someone returned it meanwhile; only the record is left to clear
            return CordonChange(False, (), f"node {node} already schedulable; {incident}'s cordon released", True)
        return CordonChange(False, (), f"node {node} uncordoned ({incident}'s cordon was the last)", True)
    if unschedulable:
        return CordonChange(True, holders, f"node {node} kept cordoned: {foreign}", False)
    return CordonChange(False, holders, f"node {node} in service: it was not cordoned", False)
