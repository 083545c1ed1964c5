"""The control plane writes the fabric topology's node labels through a backend that can (LabelsNodes): each host
whose labels settled (gpufleet.control.fabric_topology.LabelSettler) on something it does not carry, once per turn
of the control loop, outside the plane's lock (an API call may be slow).

A relabel is an action like a cordon: audited (actor `fabric`, action `relabel`, the node, what was written), an
event in the control plane's log and in the fabric's, and a dry run under `--remediate dry-run` (it is audited as
what it would write, and nothing is written); `--remediate off` writes nothing and records nothing. A write that
fails is audited, logged and tried again after RETRY_S.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpufleet.control.fabric import FabricService
from gpufleet.remediate.backends.base import LabelsNodes

log = logging.getLogger("gpufleet.control.relabel")

RETRY_S = 60.0
ACTOR = "fabric"

# (actor, action, target, result, request, dry_run=...) as ControlPlane.audit takes them
Audit = Callable[..., None]
Event = Callable[[float, str, str, str, str], None]  # (time, kind, target, message, node) as StateStore.add_event


class Relabeller:
    def __init__(
        self,
        fabric: FabricService,
        backend: LabelsNodes,
        mode: str,
        *,
        clock: Callable[[], float],
        audit: Audit,
        add_event: Event,
    ) -> None:
        self.fabric = fabric
        self.backend = backend
        self.mode = mode  # off, dry-run, on (the control plane's remediation mode)
        self.clock = clock
        self.audit = audit
        self.add_event = add_event
        self.retry_at: dict[str, float] = {}  # hosts whose last write failed: not before then
        self.written = 0  # relabels carried out (or, in a dry run, said)

    def run(self) -> int:
        """Write every settled host's labels; how many hosts were relabelled."""
        if self.mode == "off":
            return 0
        now = self.clock()
        settler = self.fabric.topology.settler
        with self.fabric.lock:
            due = {h: c for h, c in settler.due().items() if self.retry_at.get(h, now) <= now}
            wanted = {h: dict(settler.wanted[h]) for h in due}
        dry_run = self.mode == "dry-run"
        done = 0
        for host, change in sorted(due.items()):
            target = f"node/{host}"
            said = ", ".join(f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(change.items()))
            try:
                result = f"would label {host}: {said}" if dry_run else self.backend.label_node(host, change)
            except Exception as exc:  # the API refused or is away: said, and tried again later
                self.retry_at[host] = now + RETRY_S
                self.audit(ACTOR, "relabel", target, f"failed: {exc}", "", dry_run=dry_run)
                log.warning("relabelling %s failed (tried again in %.0f s): %s", host, RETRY_S, exc)
                continue
            self.retry_at.pop(host, None)
            with self.fabric.lock:
                settler.written(host, wanted[host])
            if not result:
                continue  # the node carried them already (after a restart, or written by hand)
            done += 1
            self.audit(ACTOR, "relabel", target, result, "", dry_run=dry_run)
            self.fabric.relabelled(now, host, result)
            self.add_event(now, "fabric", target, result, host)
        self.written += done
        return done
