"""Push the agent's batches to the control plane: the spooled records (exactly once, in order) with the node's
latest state, after every collection and at once when a new record is spooled; backing off while it is down."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import httpx

from gpufleet.agent.actions import NodeActionRunner
from gpufleet.agent.spool import RecordSpool
from gpufleet.background import Background
from gpufleet.model.observe import (
    SCHEMA_VERSION,
    Batch,
    ClockFact,
    FabricReport,
    JobFact,
    MetricSnapshot,
    NodeInventory,
    SchedulerReport,
    ServiceFact,
)
from gpufleet.model.wire import JSON, WireError, decode_ack, encode

log = logging.getLogger("gpufleet.agent")


class NodeState:
    """The latest-value part of a push, replaced by each collection."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: MetricSnapshot | None = None
        self.inventory: NodeInventory | None = None
        self.inventory_due = False
        self.jobs: list[JobFact] | None = None
        self.services: list[ServiceFact] | None = None
        self.scheduler: SchedulerReport | None = None
        self.fabric: list[FabricReport] | None = None  # sent once: a topology is large, and it changes per poll
        self.read_clock: Callable[[], ClockFact | None] = lambda: None  # the node's clock, as last read

    def set(
        self,
        metrics: MetricSnapshot | None,
        inventory: NodeInventory | None = None,
        jobs: list[JobFact] | None = None,
        services: list[ServiceFact] | None = None,
        scheduler: SchedulerReport | None = None,
    ) -> None:
        with self.lock:
            self.metrics = metrics
            if inventory is not None:
                self.inventory, self.inventory_due = inventory, True
            self.jobs, self.services, self.scheduler = jobs, services, scheduler

    def put_fabric(self, reports: list[FabricReport]) -> None:
        """The fabric watch's latest poll; it replaces one not yet sent."""
        with self.lock:
            self.fabric = reports


class BatchPusher(Background):
    thread_name = "pusher"
    join_s = 5.0

    def __init__(
        self,
        spool: RecordSpool,
        state: NodeState,
        url: str,
        token: Callable[[], str | None],
        *,
        agent: str,
        node: str,
        interval: float,
        batch: int = 1000,
        actions: NodeActionRunner | None = None,
    ) -> None:
        self.spool = spool
        self.state = state
        self.url = url.rstrip("/") + "/api/v1/ingest"
        self.token = token  # read on every push: the token file may appear or rotate while the agent runs
        self.agent, self.node, self.interval, self.batch = agent, node, interval, batch
        self.actions = actions  # node actions the control plane hands out in its acknowledgements
        self.connected = False
        self.pushes = 0
        self.acked = 0
        self._warned = False
        self._foreign_said = False
        self._lost_said = False
        self._wake = threading.Event()
        super().__init__()
        self._client = httpx.Client(timeout=10.0)

    def push_once(self) -> bool:
        """Send one batch (the oldest spooled records and the latest state). True if it was acknowledged."""
        records = self.spool.peek(self.batch)
        actions = self.actions
        results = actions.results() if actions is not None else []
        with self.state.lock:
            inventory = self.state.inventory if self.state.inventory_due else None
            batch = Batch(
                v=SCHEMA_VERSION,
                agent=self.agent,
                incarnation=self.spool.incarnation,
                node=self.node,
                sent=time.time(),
                interval=self.interval,
                records=records,
                inventory=inventory,
                metrics=self.state.metrics,
                jobs=self.state.jobs,
                services=self.state.services,
                scheduler=self.state.scheduler,
                fabric=self.state.fabric,
                clock=self.state.read_clock(),
                can=list(actions.can) if actions is not None else None,
                results=results,
            )
        token = self.token()
        headers = {"Content-Type": JSON, **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            resp = self._client.post(self.url, content=encode(batch), headers=headers)
        except httpx.HTTPError as exc:
            self._down(f"control plane unreachable at {self.url}: {type(exc).__name__}")
            return False
        if resp.status_code >= 400:
            self._down(f"control plane refused the batch ({resp.status_code}): {resp.text[:300]}")
            return False
        try:
            ack = decode_ack(resp.content)
        except WireError as exc:
            self._down(exc.message)
            return False
        if ack.acked > self.spool.last_assigned():
            self._foreign_ack(ack.acked)
        if records:
            self.spool.ack(min(ack.acked, records[-1].seq))  # never records it has not sent
        self.acked = ack.acked
        if actions is not None:
            actions.acknowledged(ack.results)
            actions.offer(ack.actions)
        with self.state.lock:
            if inventory is not None and self.state.inventory is inventory:
                self.state.inventory_due = False
            if batch.fabric is not None and self.state.fabric is batch.fabric:
                self.state.fabric = None
        self.pushes += 1
        if self._warned:
            log.info("pushing to %s again; %d records waiting", self.url, len(self.spool))
        self.connected, self._warned = True, False
        return True

    def _foreign_ack(self, acked: int) -> None:
        if self._foreign_said:
            return
        self._foreign_said = True
        log.error(
            "the control plane has records up to %d of this agent's stream %s, but this agent has written only %d: "
            "something else pushes under this stream (a copy of this agent's --data-dir, or its token in other "
            "hands); this agent's next records would be dropped there as duplicates. Start it with an empty "
            "--data-dir (a new stream) and revoke the token if it leaked",
            acked,
            self.spool.incarnation,
            self.spool.last_assigned(),
        )

    def _down(self, message: str) -> None:
        if not self._warned:  # one line per outage, not one per retry
            log.warning("%s; records stay in the local spool (%d waiting)", message, len(self.spool))
        self.connected, self._warned = False, True

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._wake.set()
        super().stop()
        self._client.close()

    def check_spool(self) -> None:
        """Say once, loudly, when the spool's file goes from under the running agent."""
        why = self.spool.lost()
        if why is not None and not self._lost_said:
            self._lost_said = True
            log.error(
                "the agent's spool %s while the agent runs: records not yet pushed live only in the open file and "
                "go when the agent stops, and a restarted agent starts a new stream and reads its kernel log again "
                "(the control plane takes each line once). Keep --data-dir on storage that outlives the agent",
                why,
            )

    def run(self) -> None:
        backoff = 0.5
        while not self.stopping.is_set():
            self.check_spool()
            ok = self.push_once()
            if ok and len(self.spool) > 0:
                continue  # drain fast while it answers
            backoff = 0.5 if ok else min(backoff * 2, 30.0)
            self._wake.wait(self.interval if ok else backoff)
            self._wake.clear()
