"""The control plane writes the fabric topology's node labels through a backend that can (LabelsNodes): each host
whose labels settled (gpufleet.control.fabric_topology.LabelSettler) on something it does not carry, once per turn
of the control loop, outside the plane's lock (an API call may be slow).

A relabel is an action like a cordon: audited (actor `fabric`, action `relabel`, the node, what was written), an
event in the control plane's log and in the fabric's, and a dry run under `--remediate dry-run` (it is audited as
what it would write, and nothing is written); `--remediate off` writes nothing and records nothing. A write that
fails is tried again after RETRY_S, doubling while it keeps failing (up to MAX_RETRY_S), and audited when it first
fails: a host of the fabric that is no Kubernetes node (a storage server, a node of another scheduler) costs one
audit row, not one a minute. At most PER_TURN hosts are written per turn, so labelling a large cluster for the first
time does not hold the control loop for minutes (50 a turn: 16,384 nodes in under six minutes at a turn a second).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpufleet.control.fabric import FabricService
from gpufleet.remediate.backends.base import LabelsNodes

log = logging.getLogger("gpufleet.control.relabel")

RETRY_S = 60.0
MAX_RETRY_S = 3600.0
PER_TURN = 50
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
        self.failures: dict[str, int] = {}  # hosts whose writes keep failing: how many times in a row
        self.per_turn = PER_TURN
        self.written = 0  # relabels carried out (or, in a dry run, said)

    def run(self) -> int:
        """Write every settled host's labels; how many hosts were relabelled."""
        if self.mode == "off":
            return 0
        now = self.clock()
        settler = self.fabric.topology.settler
        with self.fabric.lock:
            settled = settler.due()
            ready = sorted(h for h in settled if self.retry_at.get(h, now) <= now)[: self.per_turn]
            due = {h: settled[h] for h in ready}
            wanted = {h: dict(settler.wanted[h]) for h in due}
        dry_run = self.mode == "dry-run"
        done = 0
        for host, change in sorted(due.items()):
            target = f"node/{host}"
            said = ", ".join(f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(change.items()))
            try:
                result = f"would label {host}: {said}" if dry_run else self.backend.label_node(host, change)
            except Exception as exc:  # the API refused or is away: said once, and tried again later
                failed = self.failures.get(host, 0)
                wait = min(RETRY_S * 2**failed, MAX_RETRY_S)
                self.failures[host], self.retry_at[host] = failed + 1, now + wait
                if not failed:
                    self.audit(ACTOR, "relabel", target, f"failed: {exc}", "", dry_run=dry_run)
                (log.debug if failed else log.warning)(
                    "relabelling %s failed (%d in a row; tried again in %.0f s): %s", host, failed + 1, wait, exc
                )
                continue
            self.retry_at.pop(host, None)
            self.failures.pop(host, None)
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
