"""Remediation inside the control plane: every new incident goes once to the remediation engine, in the mode the
operator chose (off, dry-run, on), and paused runbooks are continued now and then.

Dry-run and on take the same path through the engine (same budgets, rate limits and breaker, each mode with its
own books), so what dry-run reports is what on would do. A runbook that acted and finished moves its incident to
mitigated.

A step that stops its runbook (refused by a budget or the breaker, deferred by a rate limit, waiting for a node) is
tried again on every pass until it can go ahead: its log line, with the reason, is written once per
`REPEAT_LOG_WINDOW_S` per (decision, action, target, reason), the next one saying how often it repeated meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.model import Incident, IncidentState
from gpufleet.remediate.incident_io import incident_from_dict, incident_to_dict

if TYPE_CHECKING:
    from gpufleet.control.store import StateStore
    from gpufleet.health.incidents import IncidentBook
    from gpufleet.remediate.backends.base import RemediationBackend
    from gpufleet.state import Database

log = logging.getLogger("gpufleet.remediate")


class Plane(Protocol):
    """What remediation needs of the control plane: its database and backend, the live incident book under its
    lock, the stored incidents, and a way to mark one mitigated."""

    db: Database
    backend: RemediationBackend
    book: IncidentBook
    lock: threading.RLock
    store: StateStore

    def mitigated(self, incident_id: str) -> None: ...

    def resolved(self, incident_id: str, evidence: str) -> None: ...


MODES = ("off", "dry-run", "on")
RESUME_EVERY_S = 30.0  # cluster-clock seconds between two passes over paused runbooks
REPEAT_LOG_WINDOW_S = 60.0  # wall seconds between two log lines about the same stopped step
# decisions a later pass meets again until things change
REPEATING = frozenset({"refused", "deferred", "waiting", "queued"})
MAX_REPEAT_KEYS = 4096


@dataclass
class _Said:
    at: float  # when the last line about it was written
    since: int = 0  # repeats not written since


class RepeatLog:
    """Which stopped steps were logged when, so a step refused on every pass is one line a window, with a count."""

    def __init__(self, window_s: float = REPEAT_LOG_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._said: dict[tuple[str, ...], _Said] = {}

    def admit(self, key: tuple[str, ...]) -> int | None:
        """None when a line about `key` was written within the window (this repeat is counted); otherwise how many
        repeats were not written since the last line, and the caller writes one now."""
        now = self.clock()
        said = self._said.get(key)
        if said is not None and now - said.at < self.window_s:
            said.since += 1
            return None
        if said is None and len(self._said) >= MAX_REPEAT_KEYS:  # forget what was last said longest ago
            self._said = {k: v for k, v in self._said.items() if now - v.at < self.window_s}
        repeats = said.since if said is not None else 0
        self._said[key] = _Said(now)
        return repeats


def default_remediator(plane: Plane, dry_run: bool) -> Any:
    """The engine the control plane runs: the policy it was given (`gpufleet server --policy`), else the defaults."""
    from gpufleet.remediate import RemediationStore, Remediator
    from gpufleet.remediate.in_force import in_force

    given = in_force(getattr(plane, "policy_file", None), plane.db.directory)
    policy = given.policy.model_copy(deep=True)
    policy.spec.dry_run = dry_run
    return Remediator(
        plane.backend,
        RemediationStore(plane.db),
        policy=policy,
        runbooks=given.runbooks,
        tickets=given.tickets,
        fabric=getattr(plane, "fabric", None),
        port_isolation=getattr(plane, "port_isolation", None),
        node_agents=getattr(plane, "node_actions", None),
        node_check=getattr(plane, "node_check", None),
    )


class RemediationDriver:
    def __init__(
        self, plane: Plane, mode: str, remediator: Any = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if mode not in MODES:
            from gpufleet.errors import UserError

            raise UserError(f"remediation mode {mode!r}", fix="use off, dry-run or on")
        self.plane = plane
        self.mode = mode
        self.remediator = None if mode == "off" else remediator or default_remediator(plane, mode == "dry-run")
        if self.remediator is not None:
            self.remediator.policy.spec.dry_run = mode == "dry-run"
        self._queue: dict[str, None] = {}
        self._acted: set[str] = set()
        self._resume_at = 0.0
        self.errors = 0
        self.reports = 0
        self.repeats = RepeatLog(clock=clock)
        # after a restart, open incidents pick up where their runbooks stopped (finished steps never run twice)
        for inc in plane.book.open_incidents():
            self.offer(inc)

    def offer(self, incident: Incident) -> None:
        if self.remediator is not None and incident.id not in self._acted:
            self._queue[incident.id] = None

    def wake(self, incident_id: str) -> None:
        """Take the incident's runbook up again at the next turn (a node action it waited on has finished)."""
        if self.remediator is not None:
            self._queue[incident_id] = None

    def run(self, now: float) -> None:
        if self.remediator is None:
            return
        queued, self._queue = list(self._queue), {}
        for incident_id in queued:
            self._acted.add(incident_id)
            self._apply(incident_id)
        if now >= self._resume_at:
            self._resume_at = now + RESUME_EVERY_S
            books = self.remediator.books()
            if books.breaker().tripped:
                return  # nothing can go ahead until a person resets it
            for incident_id in books.open_runs():
                if incident_id not in queued:
                    self._apply(incident_id)

    def _apply(self, incident_id: str) -> None:
        with self.plane.lock:  # a copy: ingest keeps changing the live incident while the runbook runs
            live = self.plane.book.incidents.get(incident_id)
            body = incident_to_dict(live) if live is not None else self.plane.store.incidents.get(incident_id)
        if body is None or body.get("state") == IncidentState.resolved.value:
            return
        incident = incident_from_dict(body, f"incident {incident_id}")
        try:
            report = self.remediator.apply(incident)  # type: ignore[union-attr]
        except Exception:
            self.errors += 1
            log.exception("remediation of %s (%s on %s) failed", incident_id, incident.cause.value, incident.entity)
            return
        self.reports += 1
        decided = [line for s in report.steps if s.decision != "done-earlier" and (line := self._line(s)) is not None]
        if decided:
            log.info("%s %s, runbook %s [%s]: %s", incident_id, incident.cause.value, report.runbook, report.mode,
                     "; ".join(decided))  # fmt: skip
        acted = any(s.decision == "done" for s in report.steps)
        proof = _returned_by_proof(report)
        if self.mode == "on" and proof is not None:
            self.plane.resolved(incident_id, proof)
        elif self.mode == "on" and acted and report.complete:
            self.plane.mitigated(incident_id)

    def _line(self, step: Any) -> str | None:
        """What the log says of a step: a stopped one with its reason, once a window (None: said lately)."""
        said = f"{step.decision} {step.action} {step.target}"
        if step.decision not in REPEATING:
            return said
        repeats = self.repeats.admit((step.decision, step.action, step.target, step.reason))
        if repeats is None:
            return None
        again = f" ({repeats} more times since the last line)" if repeats else ""
        return f"{said}: {step.reason}{again}"


def _returned_by_proof(report: Any) -> str | None:
    """The evidence when this pass returned the node to service after a diagnostic passed (a return to service by
    proof resolves the incident): the diagnostic's own words. None otherwise."""
    returned = any(s.action == "uncordon" and s.decision == "done" for s in report.steps)
    checks = [s for s in report.steps if s.action == "diag" and s.decision in ("passed", "done-earlier")]
    if not returned or not checks:
        return None
    return f"returned to service after {checks[-1].step} passed: {checks[-1].reason}"
