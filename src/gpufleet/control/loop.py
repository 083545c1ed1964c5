"""The main loop on the twin: observations -> health engine -> incidents (kept durably) -> remediation.

Remediation runs in one of three modes: off, dry-run (decide and audit, change nothing: the default, as peers
ship it) and on (act through the twin backend, within the safety budgets and the circuit breaker).
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from gpufleet.control.store import StateStore
from gpufleet.health.engine import HealthEngine
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.twin_feed import TwinFeed
from gpufleet.model import Incident
from gpufleet.sim.twin import Twin

log = logging.getLogger("gpufleet.control")
RemediationMode = Literal["off", "dry-run", "on"]


class HealthLoop:
    def __init__(self, twin: Twin, store: StateStore, remediation: RemediationMode, state_dir: object) -> None:
        from pathlib import Path

        self.store = store
        self.run = time.strftime("%Y%m%dT%H%M%S")
        self.feed = TwinFeed(twin)
        self.book = IncidentBook(on_change=lambda inc: store.upsert_incident(self.run, inc))
        self.engine = HealthEngine(self.feed.frame, book=self.book, port_speeds_gbps=self.feed.port_speeds())
        self.remediation = remediation
        self.remediator = None
        self._acted: set[str] = set()
        if remediation != "off":
            from gpufleet.remediate import RemediationPolicy, RemediationStore, Remediator, TwinBackend

            policy = RemediationPolicy.model_validate(
                {
                    "apiVersion": "gpufleet.io/v1",
                    "kind": "RemediationPolicy",
                    "metadata": {"name": "up"},
                    "spec": {"dryRun": remediation == "dry-run"},
                }
            )
            self.remediator = Remediator(
                TwinBackend(twin), RemediationStore(Path(str(state_dir)) / "remediate.db"), policy=policy
            )

    def tick(self) -> list[Incident]:
        changed = self.engine.observe(self.feed.observe())
        if self.remediator is not None:
            for inc in changed:
                if inc.id in self._acted:
                    continue
                self._acted.add(inc.id)
                try:
                    self.remediator.apply(inc)
                except Exception:  # a remediation bug must not stop detection; it is logged with its incident
                    log.exception("remediation of %s failed", inc.id)
        return changed

    def open_incidents(self) -> list[Incident]:
        return self.book.open_incidents()
