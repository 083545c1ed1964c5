"""Detect at the edge: after every collection the agent runs its node's detectors on the frame, spools what they
found with the kernel reports and port events, and sets the latest state (metric snapshot, inventory) for the
next push. Kernel reports do not wait for a collection: they are judged and spooled the moment they are parsed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from gpufleet.agent.app import read_signals, with_signals
from gpufleet.agent.pusher import NodeState
from gpufleet.agent.services import ServiceWindows
from gpufleet.agent.spool import RecordSpool
from gpufleet.health.node_health import NodeHealth
from gpufleet.model.bmc import BmcRead
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import JobFact, MetricSnapshot, NodeInventory, Observation, SchedulerReport
from gpufleet.telemetry.frame import MetricFrame

log = logging.getLogger("gpufleet.agent")

INVENTORY_EVERY_S = 300.0  # an agent resends its inventory this often (and whenever it changes)
INVENTORY_CHECK_S = 60.0  # how often an agent looks at its node's versions


class InventoryCadence:
    """When an agent reads its node's inventory and when it sends it: read every INVENTORY_CHECK_S, sent when it
    changed and every INVENTORY_EVERY_S regardless (a control plane that restarted learns the node again)."""

    def __init__(self) -> None:
        self.last: NodeInventory | None = None
        self._checked = -np.inf
        self._sent = -np.inf

    def recheck(self) -> None:
        """Read the inventory at the next collection: something it carries was read again (fabric settings)."""
        self._checked = -np.inf

    def due(self, now: float, read: Callable[[], NodeInventory]) -> NodeInventory | None:
        """The inventory to send now, or None."""
        if now - self._checked < INVENTORY_CHECK_S:
            return None
        self._checked = now
        inventory = read()
        if inventory != self.last or now - self._sent >= INVENTORY_EVERY_S:
            self.last, self._sent = inventory, now
            return inventory
        return None


_SUMMED_OVER_INSTANCES = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")


def gpu_columns(frame: MetricFrame) -> tuple[list[int], np.ndarray]:
    """One column per physical GPU, as the contract counts GPUs: a MIG GPU's instances (which repeat its
    device-wide readings) become the GPU, its memory the sum of theirs."""
    first: dict[int, int] = {}
    for i, e in enumerate(frame.entities):
        first.setdefault(e.gpu, i)
    columns = list(first.values())
    if len(columns) == len(frame.entities):
        return columns, frame.values
    values = frame.values[:, columns].copy()
    gpu_of = np.array([e.gpu for e in frame.entities])
    for name in _SUMMED_OVER_INSTANCES:
        if frame.has_gpu_field(name):
            row = frame.gpu(name)
            k = [f.name for f in frame.gpu_fields].index(name)
            values[k] = [np.nansum(row[gpu_of == frame.entities[c].gpu]) for c in columns]
    return columns, values


def snapshot(frame: MetricFrame, when: float) -> MetricSnapshot:
    """A frame as the contract carries it: one column per physical GPU."""
    up = frame.ib_up
    columns, values = gpu_columns(frame)
    return MetricSnapshot.of(
        when,
        [frame.entities[c].gpu for c in columns],
        [f.name for f in frame.gpu_fields],
        values,
        [f"{p.hca}/{p.port}" for p in frame.ib_ports],
        [f.name for f in frame.ib_fields],
        frame.ib_values,
        [bool(v >= 0.5) for v in up] if len(up) and not np.isnan(up).any() else [],
        ["" if (a := frame.attribution[c]) is None else f"{a.namespace}/{a.pod}" for c in columns],
        dict(frame.sources_down),
    )


LATCHED_KEY = "detectors.latched"


def _load_latched(spool: RecordSpool) -> dict[str, float]:
    stored = spool.get(LATCHED_KEY)
    try:
        loaded = json.loads(stored) if stored else {}
        return {str(k): float(v) for k, v in loaded.items()}
    except (ValueError, TypeError, AttributeError):
        log.warning("the detectors' saved state in the spool is unreadable; they start afresh")
        return {}


class EdgeAgent:
    def __init__(
        self,
        node: str,
        frame: MetricFrame,
        spool: RecordSpool,
        state: NodeState,
        inventory: Callable[[], NodeInventory],
        *,
        jobs: Callable[[], list[JobFact] | None] | None = None,
        scheduler: Callable[[], SchedulerReport | None] | None = None,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.node = node
        self.spool = spool
        self.state = state
        self.read_inventory = inventory
        self.read_jobs = jobs
        self.read_scheduler = scheduler  # on the agent that watches the workload manager
        self.services = ServiceWindows()
        self.wake = wake
        self.health = NodeHealth(frame)
        self._latched = _load_latched(spool)
        self.health.restore(self._latched)
        self._lock = threading.Lock()  # the kernel follower and the collector both spool
        self.inventory = InventoryCadence()
        self.records = 0
        self._said: set[str] = set()  # application-metric problems already logged

    def kernel_events(self, events: list[KernelEvent]) -> None:
        """Reports the kernel-log follower just parsed: judged and spooled now, pushed at once."""
        with self._lock:
            out = self.health.observe(time.time(), kernel={self.node: events})
            self._spool([*out.kernel, *out.findings])
        self.wake()

    def bmc_read(self, read: BmcRead) -> None:
        """A read of the node's BMC (its sensors, its new event-log records): judged and spooled now."""
        with self._lock:
            out = self.health.observe(read.time, bmc={self.node: read})
            self._spool([*out.bmc, *out.findings])
        if out.bmc or out.findings:
            self.wake()

    def after_collect(self, frame: MetricFrame) -> None:
        """Run once per collection, after the sources filled `frame`."""
        now = frame.timestamp or time.time()
        due = self.inventory.due(now, self.read_inventory)
        inventories = [due] if due is not None else []
        with self._lock:
            out = self.health.observe(now, frame, None, inventories)
            observations: list[Observation] = [*out.links, *out.findings]
            self._spool(observations)
            latched = self.health.latched()
            if latched != self._latched:  # kept with the spool: a restarted agent does not report it again
                self.spool.set(LATCHED_KEY, json.dumps(latched, sort_keys=True))
                self._latched = latched
        self.state.set(
            snapshot(frame, now),
            inventories[0] if inventories else None,
            self._jobs(frame),
            self.services.facts(frame, now) if frame.histograms else None,
            self.read_scheduler() if self.read_scheduler else None,
        )
        if observations:
            self.wake()

    def _jobs(self, frame: MetricFrame) -> list[JobFact] | None:
        """The jobs on this node: from the workload reader, with what the jobs' own series say."""
        read = read_signals(frame.gauges)
        for problem in read.problems:
            if problem not in self._said:
                self._said.add(problem)
                log.warning("application metrics: %s", problem)
        return with_signals(self.read_jobs() if self.read_jobs else None, read)

    def _spool(self, observations: list[Observation]) -> None:
        if observations:
            self.spool.append(observations)
            self.records += len(observations)
