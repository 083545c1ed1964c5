"""How much a runbook's drain takes away: the work on one GPU, or the whole node. Decided here and nowhere else.

The rule: a drain is GPU-scoped when the incident is on one GPU (its entity is a GPU with an index) and no step of
its runbook that can run for this incident acts on the whole node (NODE_WIDE: a reboot). Otherwise the node is
drained. So an uncorrectable ECC error (Xid 48: reset the GPU, re-test it) evicts only the pods holding that GPU and
the node's other GPUs keep their work, while a GPU that fell off the bus (Xid 79: only a reboot brings it back) drains
the node, since the reboot would end every pod on it anyway. A step whose guard names announced actions or entity
kinds that exclude this incident cannot run and does not count; one that waits on another step's result might, so it
counts.

NVSentinel learnt the second half the hard way: a partial drain followed by a reboot remediation reboots a node with
pods still running on it (NVIDIA/NVSentinel#768); its node-drainer drains partially only for a reset, and so do we.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.incident import Incident
from gpufleet.model.observation import EntityKind
from gpufleet.remediate.runbook import ActionKind, RunbookManifest, Step

# Steps that act on the whole node: whatever a drain left running there ends with them.
NODE_WIDE = frozenset({ActionKind.reboot_node})


@dataclass(frozen=True, slots=True)
class DrainScope:
    gpu: int | None  # the GPU whose work is evicted; None: the whole node
    why: str

    def describe(self, node: str) -> str:
        if self.gpu is None:
            return f"whole node {node}: {self.why}"
        return f"GPU {self.gpu} of {node} only: {self.why}"


def _may_run(step: Step, incident: Incident) -> bool:
    g = step.when
    if g.entity_kind and incident.entity.kind not in g.entity_kind:
        return False
    return not (g.incident_action and incident.action.upper() not in {a.upper() for a in g.incident_action})


def drain_scope(incident: Incident, runbook: RunbookManifest) -> DrainScope:
    e = incident.entity
    if e.kind is not EntityKind.gpu or e.index is None:
        return DrainScope(None, f"the incident is on a {e.kind.value}, not one GPU")
    wide = [s for s in runbook.spec.steps if s.action in NODE_WIDE and _may_run(s, incident)]
    if wide:
        return DrainScope(None, f"runbook {runbook.name} takes a node-wide step ({wide[0].id}: {wide[0].action.value})")
    return DrainScope(e.index, f"the fault is on GPU {e.index} and runbook {runbook.name} takes no node-wide step")
