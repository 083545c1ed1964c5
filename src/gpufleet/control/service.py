"""The control plane: ingest from every agent, fleet state, correlation into incidents, remediation through the
configured backend, and the views the API and CLI show. No cluster is read here except through what agents push
and what the backend answers; a simulated fleet comes in through the same `ingest`.

Threads: ingest runs on the API's threads (or the twin's, in process), `tick` on the control loop; both hold
`lock` only for in-memory work and the state database's own short transactions. Remediation runs on the control
loop outside the lock, so a slow backend (Slurm, Kubernetes) never stalls ingest or reads. Locks are taken in the
order of `gpufleet.locks`: this plane's lock before the database's, so a transaction that spans several ingests
(the twin's moment and its checkpoint) begins inside `atomically()`, never around it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.catalog.xid_actions import describe_action
from gpufleet.control.clock_skew import ClockComparison
from gpufleet.control.fabric import FabricService, parse_end
from gpufleet.control.fabric_topology import nvlink_domains
from gpufleet.control.fleet import FleetState
from gpufleet.control.gpu_use import GpuUseRecorder
from gpufleet.control.metrics import RESOLUTION_S, MetricRecorder
from gpufleet.control.node_actions import NodeActionQueue
from gpufleet.control.relabel import Relabeller
from gpufleet.control.remediation import RemediationDriver
from gpufleet.control.replicas import Replication
from gpufleet.control.scheduler_topology import TopologyOutputs, topology_keepers
from gpufleet.control.store import StateStore
from gpufleet.cost.service import FleetFacts
from gpufleet.errors import ForbiddenError, NotFoundError, UserError
from gpufleet.fabric.facts import hang_facts
from gpufleet.health.correlation import Correlator, collective_findings
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.preflight import preflight_finding
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.locks import ordered_lock
from gpufleet.model import Incident, IncidentState, Severity
from gpufleet.model.actions import NodeAction, NodeActionKind
from gpufleet.model.fabric_facts import FabricFacts
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.model.observe import Ack, Batch, Finding, KernelReport, Record
from gpufleet.remediate.backends.base import (
    Cordons,
    Drains,
    EvictsGpuWork,
    IsolatesFabricPorts,
    LabelsNodes,
    RemediationBackend,
    RequeuesJobs,
    ResetsGpus,
)
from gpufleet.remediate.incident_io import incident_from_dict, incident_to_dict
from gpufleet.state import Database
from gpufleet.state.node_actions import ActionRow
from gpufleet.state.tokens import Role, Token, TokenStore
from gpufleet.telemetry.monitoring.objectives import SloConfig
from gpufleet.telemetry.store import EmbeddedStore, RemoteStore
from gpufleet.telemetry.store.query import MetricStore

log = logging.getLogger("gpufleet.control")

Clock = Callable[[], float]
BACKEND_REFRESH_S = 5.0  # wall seconds between two reads of the backend's node states
METRICS_FLUSH_S = 60.0
SLOW_TURN_S = 3.0  # a turn this long is logged with where its time went: reads are shed past shedding.BEHIND_S
RECORD_EVERY_S = RESOLUTION_S  # the store's slot: one sample a slot
RECORD_GPUS_EVERY_S = 30.0  # per-GPU timelines: a point every 30 s of cluster time is 480 over the dashboard's 4 h
PRUNE_AFTER_S = 86_400.0  # resolved incidents leave memory (not the database) after a day
SYNC_EVERY_S = 2.0  # wall seconds between a replica's reloads of the incidents
# how far past its last delivered record a stream's next batch may start; an agent's spool numbers records one after
# another and never skips, so anything near this is not an agent's
MAX_SEQ_GAP = 1_000_000
KERNEL_REPORTS_LOADED = 20_000  # the newest kernel reports read back at a start, for the nodes' recent kernel log
KERNEL_SEEN_PER_NODE = 20_000  # kernel-log lines remembered per node (a node's log since boot holds far fewer)

# what the control plane records into the metric store: per node and for the fleet
NODE_SERIES = (
    ("gpufleet_node_gpu_utilization_avg", "DCGM_FI_DEV_GPU_UTIL", "avg"),
    ("gpufleet_node_gpu_temp_max", "DCGM_FI_DEV_GPU_TEMP", "max"),
    ("gpufleet_node_power_watts", "DCGM_FI_DEV_POWER_USAGE", "sum"),
)
FLEET_SERIES = (
    ("gpufleet_fleet_gpu_utilization_avg", "DCGM_FI_DEV_GPU_UTIL", "avg"),
    ("gpufleet_fleet_gpu_temp_max", "DCGM_FI_DEV_GPU_TEMP", "max"),
    ("gpufleet_fleet_power_watts", "DCGM_FI_DEV_POWER_USAGE", "sum"),
)
# per GPU, labelled node and gpu: what the GPU page draws
GPU_SERIES = (
    ("gpufleet_gpu_temp_c", "DCGM_FI_DEV_GPU_TEMP"),
    ("gpufleet_gpu_power_w", "DCGM_FI_DEV_POWER_USAGE"),
    ("gpufleet_gpu_sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK"),
    ("gpufleet_gpu_util_pct", "DCGM_FI_DEV_GPU_UTIL"),
    ("gpufleet_gpu_fb_used_mib", "DCGM_FI_DEV_FB_USED"),
    ("gpufleet_gpu_clock_events", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    ("gpufleet_gpu_ecc_dbe_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    ("gpufleet_gpu_ecc_sbe_volatile", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    ("gpufleet_gpu_pcie_replays", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
)
# per HCA port, labelled node and port (hca/port): a link's counters over time
PORT_SERIES = (
    ("gpufleet_port_symbol_errors", "infiniband_port_symbol_errors_total"),
    ("gpufleet_port_link_downed", "infiniband_port_link_downed_total"),
    ("gpufleet_port_rcv_errors", "infiniband_port_receive_errors_total"),
    ("gpufleet_port_xmit_discards", "infiniband_port_transmit_discards_total"),
)
# per inference service replica, labelled service and node: the jobs page's latency history
SERVICE_SERIES = (
    ("gpufleet_service_latency_p50_seconds", "p50_s"),
    ("gpufleet_service_latency_p95_seconds", "p95_s"),
    ("gpufleet_service_latency_p99_seconds", "p99_s"),
    ("gpufleet_service_requests_per_second", "requests_per_s"),
)
# per training job, labelled job, under the instrumentation's own names: the jobs page's loss and throughput history
JOB_SERIES = (
    ("training_loss", "loss"),
    ("training_validation_loss", "validation_loss"),
    ("training_samples_per_second", "samples_per_s"),
    ("training_tokens_per_second", "tokens_per_s"),
    ("training_gradient_norm", "grad_norm"),
)
_AGG = {"avg": lambda v: float(v.mean()), "max": lambda v: float(v.max()), "sum": lambda v: float(v.sum())}


@dataclass(slots=True)
class Health:
    healthy: bool
    problems: list[str]


class ControlPlane:
    def __init__(
        self,
        db: Database,
        backend: RemediationBackend,
        *,
        clock: Clock = time.time,
        remediation: str = "dry-run",
        thresholds: Thresholds | None = None,
        metrics: EmbeddedStore | RemoteStore | None = None,
        remediator: Any = None,
        replication: Replication | None = None,
        fabric: FabricService | None = None,
        port_isolation: IsolatesFabricPorts | None = None,
        slo: SloConfig | None = None,
        policy_file: Path | None = None,
        topology_outputs: TopologyOutputs | None = None,
    ) -> None:
        self.db = db
        self.policy_file = policy_file  # the RemediationPolicy the engine runs (None: the defaults)
        self.store = StateStore(db)
        self.backend = backend
        self.clock = clock
        self.thresholds = thresholds or load_thresholds()
        self.slo = slo or SloConfig()
        self.fabric = fabric or FabricService(self.thresholds)
        # switch-port isolation when the backend has none of its own (the real tools, where the operator allows it)
        self.port_isolation = port_isolation
        self.metrics = MetricRecorder(metrics) if metrics is not None else None
        self.gpu_use = GpuUseRecorder(self.metrics) if self.metrics is not None else None  # what cost reads
        self.lock = ordered_lock("control")
        self._fabric_facts: tuple[tuple[int, tuple[str, ...]], FabricFacts] | None = None
        self.fleet = FleetState()
        # the nodes' clocks, from their reports and this plane's receive times
        self.clocks = ClockComparison(self.thresholds.clock, self.thresholds.control.finding_repeat_s)
        self.fleet.load_inventory(self.store.inventories())
        self.fleet.load_kernel_log(self.store.recent_kernel_reports(KERNEL_REPORTS_LOADED))
        # the fabric's topology names each host's NVLink domain from its GPUs; a backend that labels nodes gets the
        # topology's labels, settled, written by the control loop (gpufleet.control.relabel)
        self.fabric.nvlink_domains = self._nvlink_domains
        self.relabeller: Relabeller | None = None
        if isinstance(backend, LabelsNodes):
            if self.fabric.topology.labels_of is None:
                self.fabric.topology.labels_of = backend.topology_labels
            self.relabeller = Relabeller(self.fabric, backend, remediation, clock=clock, audit=self.audit,
                                         add_event=self.store.add_event)  # fmt: skip
        # Volcano's HyperNodes and Slurm's topology.conf, from the settled labels (gpufleet.control.scheduler_topology)
        self.topology_keepers = topology_keepers(
            self.fabric, backend, topology_outputs, self.relabeller, remediation,
            clock=clock, audit=self.audit, add_event=self.store.add_event,
        )  # fmt: skip
        self.fabric.restore(self.store.fabric_subnets(), self.store.isolated_ports())
        for node, _agent, inventory in self.store.inventories():  # the nodes' own fabric settings, judged again
            if inventory.fabric_settings is not None:
                self.fabric.take_host_settings(node, inventory.fabric_settings)
        if isinstance(backend, EvictsGpuWork):  # a GPU-scoped drain evicts the pods the node's agent names
            backend.gpu_holders = self.gpu_holders
        self._dirty: dict[str, Incident] = {}
        self.replication = replication or Replication(db)
        self.leader = self.replication.leads()
        self._load_book()
        self._streams = {key: seq for key, (seq, _t, _n) in self.store.streams().items()}
        self._owners = self.store.stream_owners()  # stream -> the token that opened it
        self._replay_said: set[tuple[str, str]] = set()
        self.tokens = TokenStore(db)
        # node-local actions (GPU reset, reboot, ...) for the nodes' own agents, handed out with their acks
        self.node_actions = NodeActionQueue(db, clock=clock, backend=backend.name)
        self.node_actions.on_result.append(self._node_action_finished)
        self._remediation_mode, self._remediator = remediation, remediator
        self.remediation = RemediationDriver(self, remediation, remediator if self.leader else None)
        self._synced_at = -np.inf
        self._unavailable: set[str] = set()
        self._backend_read_at = -np.inf
        self._metrics_flushed = time.monotonic()
        self._metrics_flusher: threading.Thread | None = None
        self._pruned_at = -np.inf
        self._recorded_at = -np.inf
        self._gpus_recorded_at = -np.inf
        self.ticks = 0
        self.last_tick: float | None = None  # monotonic
        self.turn_gaps: deque[float] = deque(maxlen=600)  # seconds between the loop's last turns
        self.loop_error: str | None = None
        self.batches = 0

    def _load_book(self) -> None:
        """The unresolved incidents from the database (at start, on taking the lead, and on a replica that does not
        lead, which shows what the leader decided)."""
        book = IncidentBook(on_change=self._changed, first_number=self.store.incidents.next_number())
        active = self.store.incidents.list(limit=1_000_000, active_only=True)  # resolved ones stay in the database
        book.load(incident_from_dict(b, "stored incident") for b in active)
        book.job_resources = self.fleet.job_resources
        self._announced = set(book.incidents)
        self.book = book
        self.correlator = Correlator(book, self.thresholds, fabric=self.fabric_facts, slo=self.slo)
        if self.leader:  # only the leader correlates
            # the Xid escalations count over weeks (fall-offs per node, remaps per GPU): resolved incidents of that
            # window are history too
            since = self.clock() - self.correlator.history.window_s
            recent = self.store.incidents.list(state=IncidentState.resolved.value, limit=100_000)
            self.correlator.history.remember(
                incident_from_dict(b, "stored incident") for b in recent if b["last_seen"] >= since
            )

    def fabric_facts(self, hosts: Collection[str]) -> FabricFacts | None:
        """What the discovered fabric knows of a hung job's hosts, for the correlator to blame a bad cable: their
        rails, and the cables with an active finding with what the fabric service pushed for each. Kept until the
        next poll or other hosts, so a hang seen every turn does not walk the fabric every turn."""
        key = (self.fabric.reports, tuple(sorted(hosts)))
        if self._fabric_facts is not None and self._fabric_facts[0] == key:
            return self._fabric_facts[1]
        graph = self.fabric.graph()
        if graph is None:
            return None
        now = self.clock()
        found = [(f, self.fabric.finding(now, f)) for _subnet, f in self.fabric.findings() if f.severity != "info"]
        facts = hang_facts(graph, found, hosts)
        self._fabric_facts = (key, facts)
        return facts

    def _nvlink_domains(self) -> dict[str, str]:
        """Each node's NVLink domain from its GPUs' fabric info, lost nodes included (a node down has not moved)."""
        return nvlink_domains(
            (name, [(g.cluster_uuid, g.clique_id) for g in node.inventory.gpus])
            for name, node in self.fleet.nodes.items()
            if node.inventory is not None
        )

    # --- ingest: the one door ------------------------------------------------------------------------------------

    @contextmanager
    def atomically(self) -> Iterator[None]:
        """Several ingests and the caller's own writes in one transaction: all of them or none. Taken in the lock
        order, the plane before the database, as every ingest takes them."""
        with self.lock, self.db.transaction():
            yield

    def ingest(self, batch: Batch, pusher: Token | None = None) -> Ack:
        """Store a batch's new records exactly once, update the fleet, and correlate its findings (on the leader;
        another replica passes them to it through the feed). `pusher` is the token the batch came with (None for
        the twin's agents in this process); what it may push for is checked first (`_authorize`). A kernel-log line
        taken before, from whichever stream, is acknowledged and not taken again."""
        now = self.clock()
        key = (batch.agent, batch.incarnation)
        shared = self.replication.shared
        # with other replicas taking batches too, the stream's position is read (and locked) in the database, and
        # every batch is written: the others learn the node's state from the feed
        with self.lock, self.db.transaction() if shared else nullcontext():
            if shared:
                last, owner = self.store.stream_position(*key)
            else:
                last, owner = self._streams.get(key, 0), self._owners.get(key)
            new = [r for r in batch.records if r.seq > last]
            self._authorize(batch, pusher, new, last, owner)
            new, replayed = self._not_taken_before(batch.node, new)
            top = max(last, batch.records[-1].seq) if batch.records else last
            writes = shared or bool(new) or bool(replayed) or batch.inventory is not None or key not in self._streams
            opened_by = pusher.id if pusher is not None and pusher.role is not Role.admin else None
            # the batch and the incidents it changed, or none of it (a push with only state writes nothing)
            with self.db.transaction() if writes else nullcontext():
                if writes:
                    self.store.store_batch(batch, new, top, time.time(), opened_by)
                    self.store.remember_kernel(batch.node, _kernel_idents(new), now)
                    self.replication.publish(batch, new)
                self._take(batch, key, new, top, now)
            self.clocks.received(batch, now)  # here, not in _take: a batch another replica took has no receive time
            if owner is None and opened_by is not None:
                self._owners[key] = opened_by
            self.batches += 1
        if replayed:
            self._said_replayed(batch, replayed)
        taken, actions = self.node_actions.exchange(batch, pusher)
        return Ack(top, len(new), len(batch.records) - len(new), taken, actions)

    def _node_action_finished(self, row: ActionRow) -> None:
        """A node action's result came: the runbook that asked for it goes on at the next turn, not in 30 s."""
        if row.action.incident:
            self.remediation.wake(row.action.incident)

    def node_check(self, node: str) -> str | None:
        """Whether a node is back as its inventory has it, for a return to service: None when every GPU its
        inventory lists answers in its latest snapshot and no GPU source is down; otherwise what is missing."""
        with self.lock:
            state = self.fleet.nodes.get(node)
            if state is None or state.inventory is None:
                return f"the control plane has no inventory of {node}"
            if state.lost:
                return f"{node}'s agent has gone silent"
            listed = {g.index for g in state.inventory.gpus}
            metrics = state.metrics
            answering = set(metrics.gpus) if metrics is not None else set()
            down = dict(metrics.sources_down) if metrics is not None else {}
        missing = sorted(listed - answering)
        if missing:
            return f"{len(missing)} of {len(listed)} GPUs do not answer on {node} ({', '.join(map(str, missing))})"
        gpu_down = {s: why for s, why in down.items() if s in ("nvml", "amdsmi", "hlml")}
        if gpu_down:
            return "; ".join(f"{node}'s {s} source is down: {why}" for s, why in gpu_down.items())
        return None

    def _authorize(self, batch: Batch, pusher: Token | None, new: list[Record], last: int, owner: str | None) -> None:
        """Who may push what: an agent token bound to a node pushes for that node only; a node with a token of its
        own takes no other agent token's pushes; a stream takes pushes only from the token that opened it (admins
        may push anything). A stream's sequence numbers never jump far past what it delivered: an acknowledgement
        of a number the agent has not reached yet would drop all its records up to it as duplicates."""
        if pusher is not None and pusher.role is not Role.admin:
            self._authorize_agent(batch, pusher, owner)
        if new and last > 0 and new[0].seq > last + MAX_SEQ_GAP:
            raise UserError(
                f"stream {batch.agent}/{batch.incarnation} delivered up to record {last}; this batch starts at "
                f"{new[0].seq}, {new[0].seq - last - 1} records later",
                fix="an agent numbers its records one after another: this batch is not from that agent's spool",
            )

    def _authorize_agent(self, batch: Batch, pusher: Token, owner: str | None) -> None:
        if pusher.node is not None and batch.node != pusher.node:
            raise ForbiddenError(
                f"the agent token {pusher.name!r} is bound to node {pusher.node}; it may not push for {batch.node}",
                fix="run each node's agent with its own token (`gpufleet token create --role agent --node NODE`)",
            )
        if pusher.node is None and self.tokens.node_has_own_token(batch.node):
            raise ForbiddenError(
                f"node {batch.node} has an agent token of its own; the token {pusher.name!r} may not push for it",
                fix=f"give the agent on {batch.node} the token made for it (`gpufleet token list` shows it)",
            )
        if owner is not None and owner != pusher.id:
            raise ForbiddenError(
                f"stream {batch.agent}/{batch.incarnation} was opened with another token; {pusher.name!r} may not "
                "push to it",
                fix="each agent pushes to the stream it opened: an agent with a copied --data-dir needs an empty "
                "one of its own",
            )

    def _not_taken_before(self, node: str, new: list[Record]) -> tuple[list[Record], list[Record]]:
        """(records to take, kernel-log reports and their findings already taken from some stream)."""
        idents = _kernel_idents(new)
        seen = self.store.kernel_seen(node, idents) if idents else set()
        if not seen:
            return new, []
        kept: list[Record] = []
        replayed: list[Record] = []
        for record in new:
            ident = getattr(record.body, "ident", "")
            (replayed if ident and ident in seen else kept).append(record)
        return kept, replayed

    def _said_replayed(self, batch: Batch, replayed: list[Record]) -> None:
        """Once per stream: its agent re-sent kernel-log lines another stream had delivered (an agent that lost its
        spool reads the log again under a new incarnation)."""
        key = (batch.agent, batch.incarnation)
        if key in self._replay_said:
            return
        self._replay_said.add(key)
        log.warning(
            "%s (stream %s) sent %d kernel-log report(s) taken before from another stream; they open nothing again "
            "(its agent started without its spool?)",
            batch.node,
            batch.incarnation,
            len(replayed),
        )

    def _take(self, batch: Batch, key: tuple[str, str], new: list[Record], top: int, now: float) -> None:
        """What the batch tells about the node, and the incidents its findings open or change."""
        self.fleet.update(batch, now, new)
        self.clocks.reported(batch, now)
        self.node_actions.heard(batch.node, batch.can, now)  # the leader learns it through the feed too
        findings = [r.body for r in new if isinstance(r.body, Finding)] if self.leader else []
        if batch.inventory is not None:  # the node's own fabric settings, judged with every other host's
            self.fabric.take_host_settings(batch.node, batch.inventory.fabric_settings)
        for report in batch.fabric or ():
            fabric_findings = self.fabric.take(report)
            if self.leader:
                findings += fabric_findings
            kept = self.fabric.snapshot(report.subnet)
            if kept is not None:
                self.store.save_fabric(report.subnet, *kept)
        if batch.fabric:
            for event in self.fabric.drain_events():
                if event.kind in ("poll-error", "relabel", "scheduler-topology"):  # those writers log their own
                    continue
                if event.kind.startswith("host-") and len(event.ends) == 1:
                    self.store.add_event(event.time, "fabric", f"node/{event.ends[0]}", event.message, event.ends[0])
                else:
                    self.store.add_event(event.time, "fabric", " <-> ".join(event.ends[:2]) or event.subnet,
                                         event.message, "")  # fmt: skip
        if findings:
            self._correlated(self.correlator.add(findings, self.fleet.owner))
        self._flush()
        self._streams[key] = top  # only once it is durable: a failed batch is taken again when re-sent

    def _changed(self, incident: Incident) -> None:
        self._dirty[incident.id] = incident

    def _correlated(self, changed: Iterable[Incident]) -> None:
        for inc in changed:
            if inc.id not in self._announced:
                self._announced.add(inc.id)
                self.store.add_event(
                    inc.first_seen, "incident", str(inc.entity), f"{inc.id} opened: {inc.summary}", inc.node
                )
                log.info("%s opened: %s (%s, %s)", inc.id, inc.summary, inc.cause.value, inc.severity.value)
            self.remediation.offer(inc)

    def _flush(self) -> None:
        if self._dirty:
            self.store.incidents.save([self.row(inc) for inc in self._dirty.values()], counter=self.book.next_number)
            self._dirty.clear()

    # --- the control loop ----------------------------------------------------------------------------------------

    def tick(self) -> None:
        """One turn: lost agents, cross-node correlation, cleared conditions, then remediation (outside the lock).
        With replicas: first what the others took in; a replica that does not lead only keeps its view fresh."""
        now = self.clock()
        began = time.monotonic()
        phases: list[tuple[str, float]] = []  # where a slow turn's time went, for the log

        def done(phase: str) -> None:
            phases.append((phase, time.monotonic()))

        try:
            if self.replication.shared:
                self._follow(now)
                if not self.leader:
                    self._refresh_backend()
                    self.loop_error = None
                    return
            with self.lock:
                done("waiting for ingest")
                for node in self.fleet.mark_lost(now, self.thresholds.control.agent_lost_intervals):
                    self.store.add_event(
                        now,
                        "agent",
                        f"node/{node.name}",
                        f"agent {node.agent} silent; {node.name} is AgentLost",
                        node.name,
                    )
                changed = self.correlator.tick(
                    now,
                    self.fleet.jobs(),
                    self.fleet.rank_util,
                    self.fleet.inventories,
                    self.fleet.owner,
                    signals=self.fleet.job_signals,
                    services=self.fleet.service_facts,
                )
                changed += self.correlator.add(self.clocks.findings(now, self.fleet.jobs()), self.fleet.owner)
                # settings findings on hosts no fabric watcher polls stay open while the nodes' settings show them
                unwatched = self.fabric.settings_findings(now, unwatched_only=True)
                if unwatched:
                    changed += self.correlator.add(unwatched, self.fleet.owner)
                done("correlation")
                self._correlated(changed)
                self._flush()
                done("incidents saved")
                self._record_fleet(now)
                if self.gpu_use is not None:
                    self.gpu_use.record(now, self.fleet)
                done("fleet series")
                if now - self._pruned_at > 3600.0:
                    self._prune(now)
                    done("pruning")
            self._refresh_backend()
            done("backend")
            self.remediation.run(now)
            done("remediation")
            if self.relabeller is not None:
                self.relabeller.run()
                done("relabels")
            for keeper in self.topology_keepers:
                keeper.run()
                done(keeper.action)
            self._flush_metrics()
            self.loop_error = None
        except Exception as exc:  # a bug must be visible in /healthz and the log, and the loop must go on
            self.loop_error = f"{type(exc).__name__}: {exc}"
            log.exception("control loop turn failed")
        self.ticks += 1
        turned = time.monotonic()
        if turned - began > SLOW_TURN_S:
            spent, last = [], began
            for phase, at in phases:
                spent.append(f"{phase} {at - last:.1f} s")
                last = at
            log.warning("control loop turn took %.1f s (%s)", turned - began, ", ".join(spent) or "before its phases")
        if self.last_tick is not None:
            self.turn_gaps.append(turned - self.last_tick)
        self.last_tick = turned

    def _follow(self, now: float) -> None:
        leading = self.replication.leads()
        with self.lock:
            if leading != self.leader:
                self.leader = leading
                self._load_book()  # what the last leader decided, and everything people changed since
                remediator = self._remediator if leading else None
                self.remediation = RemediationDriver(self, self._remediation_mode, remediator)
                log.info("this replica %s", "leads now" if leading else "no longer leads")
            for batch in self.replication.others():
                key = (batch.agent, batch.incarnation)
                top = max(self._streams.get(key, 0), batch.records[-1].seq if batch.records else 0)
                self._take(batch, key, list(batch.records), top, now)
            if time.monotonic() - self._synced_at >= SYNC_EVERY_S:
                self._synced_at = time.monotonic()
                if leading:
                    self._merge_people_changes()
                else:
                    self._load_book()
                    self.fleet.mark_lost(now, self.thresholds.control.agent_lost_intervals)
        self.replication.heartbeat(leading)

    def _merge_people_changes(self) -> None:
        """Incidents people moved on through another replica: states only go forward, so the later one wins."""
        live = self.book.open_incidents()
        stored = self.store.incidents.states([i.id for i in live])
        order = list(IncidentState)
        for inc in live:
            state = stored.get(inc.id)
            if state is not None and order.index(IncidentState(state)) > order.index(inc.state):
                self.book.transition(inc.id, IncidentState(state))
        self._flush()

    def _refresh_backend(self, force: bool = False) -> None:
        wall = time.monotonic()
        if not force and wall - self._backend_read_at < BACKEND_REFRESH_S:
            return
        self._backend_read_at = wall
        try:
            self._unavailable = set(self.backend.unavailable())
        except Exception as exc:
            log.warning("cannot read node states from the %s backend: %s", self.backend.name, exc)

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for inc_id, inc in list(self.book.incidents.items()):
            if inc.state is IncidentState.resolved and now - inc.last_seen > PRUNE_AFTER_S:
                del self.book.incidents[inc_id]
                self._announced.discard(inc_id)
        self.store.prune_kernel_seen(KERNEL_SEEN_PER_NODE)

    def health(self, max_tick_age_s: float = 30.0) -> Health:
        problems = []
        if self.loop_error:
            problems.append(f"control loop: {self.loop_error}")
        if self.last_tick is not None and time.monotonic() - self.last_tick > max_tick_age_s:
            problems.append(f"control loop has not run for {time.monotonic() - self.last_tick:.0f} s")
        return Health(not problems, problems)

    # --- metrics the control plane records ---------------------------------------------------------------------

    def _record_fleet(self, now: float) -> None:
        """Per-node and fleet aggregates of the latest snapshots, every few seconds (the history is drawn at one
        point a minute)."""
        if self.metrics is None or now - self._recorded_at < RECORD_EVERY_S:
            return
        self._recorded_at = now
        samples: list[tuple[dict[str, str], float]] = []
        fleet_rows: dict[str, list[np.ndarray]] = {field: [] for _, field, _ in NODE_SERIES}
        for job, (signals, _) in self.fleet.job_signals().items():
            for series, attr in JOB_SERIES:
                value = getattr(signals, attr)
                if value is not None:
                    samples.append(({"__name__": series, "job": job}, value))
        for node in self.fleet.nodes.values():
            if node.lost:
                continue
            for fact in node.services:
                for series, attr in SERVICE_SERIES:
                    value = getattr(fact, attr)
                    if value is not None:
                        samples.append(({"__name__": series, "service": fact.service, "node": node.name}, value))
            if node.gpu_matrix is None:
                continue
            for series, field, op in NODE_SERIES:
                row = node.gpu_row(field)
                fleet_rows[field].append(row)
                finite = row[~np.isnan(row)]
                if finite.size:
                    samples.append(({"__name__": series, "node": node.name}, _AGG[op](finite)))
        for name, field, op in FLEET_SERIES:
            rows = np.concatenate(fleet_rows[field]) if fleet_rows[field] else np.empty(0)
            finite = rows[~np.isnan(rows)]
            if finite.size:
                samples.append(({"__name__": name}, _AGG[op](finite)))
        self.metrics.record(now, samples)
        if now - self._gpus_recorded_at >= RECORD_GPUS_EVERY_S:
            self._gpus_recorded_at = now
            for node in self.fleet.nodes.values():
                if node.lost or node.gpu_matrix is None or node.metrics is None:
                    continue
                width = int(node.gpu_matrix.shape[1])
                rows = np.full((len(GPU_SERIES), width), np.nan)
                for i, (_, field) in enumerate(GPU_SERIES):
                    row = node.gpu_row(field)
                    if row.size == width:
                        rows[i] = row
                gpus = [str(g) for g in node.metrics.gpus]
                self.metrics.record_matrix(now, [name for name, _ in GPU_SERIES], node.name, gpus, rows)
                if node.port_matrix is not None and node.metrics.ports:
                    ports = list(node.metrics.ports)
                    counters = np.full((len(PORT_SERIES), len(ports)), np.nan)
                    for i, (_, field) in enumerate(PORT_SERIES):
                        at = node.port_field_index.get(field)
                        if at is not None:
                            counters[i] = node.port_matrix[at, : len(ports)]
                    names = [name for name, _ in PORT_SERIES]
                    self.metrics.record_matrix(now, names, node.name, ports, counters, label="port")

    def _flush_metrics(self) -> None:
        """The metric store made durable every minute, on a thread of its own: at a thousand nodes a chunk's series
        take seconds to write, and the loop turns every second."""
        if self.metrics is None or time.monotonic() - self._metrics_flushed <= METRICS_FLUSH_S:
            return
        if self._metrics_flusher is not None and self._metrics_flusher.is_alive():
            return  # the last flush is still writing
        self._metrics_flushed = time.monotonic()
        self._metrics_flusher = threading.Thread(target=self._flush_metric_store, name="metric-flush", daemon=True)
        self._metrics_flusher.start()

    def _flush_metric_store(self) -> None:
        assert self.metrics is not None
        try:
            self.metrics.flush()
        except Exception:  # the next minute tries again; the ring still holds everything
            log.exception("metric store flush failed")

    # -- what a cost report reads (gpufleet.cost.service.CostSource) ----------------------------------------------
    def metric_store(self) -> MetricStore | None:
        return self.metrics.store if self.metrics is not None else None

    def fleet_facts(self) -> FleetFacts:
        """Which workloads are jobs and services, each node's labels and first GPU model, as agents reported them."""
        with self.lock:
            kinds = {job.name: "job" for job in self.fleet.jobs()}
            labels: dict[str, dict[str, str]] = {}
            models: dict[str, str] = {}
            for node in self.fleet.nodes.values():
                kinds.update({fact.service: "service" for fact in node.services})
                inventory = node.inventory
                if inventory is None:
                    continue
                labels[node.name] = dict(inventory.labels)
                models[node.name] = inventory.gpus[0].model if inventory.gpus else ""
            out = self.out_of_service()
        return FleetFacts(kinds, labels, models, out)

    def out_of_service(self) -> dict[str, str]:
        """Nodes that are not capacity to give back, each with why: cordoned or draining (the backend holds them
        unschedulable), or faulty (an open critical incident on the node or one of its GPUs, which is what a node
        awaiting repair or RMA has)."""
        with self.lock:
            why: dict[str, list[str]] = {name: ["cordoned or draining"] for name in sorted(self._unavailable)}
            for inc in sorted(self.book.open_incidents(), key=lambda i: i.id):
                if inc.node and inc.severity is Severity.critical:
                    why.setdefault(inc.node, []).append(f"faulty: {inc.id} {inc.cause.value}")
        return {node: ", ".join(reasons) for node, reasons in why.items()}

    def close(self) -> None:
        self.replication.close()
        if self._metrics_flusher is not None:
            self._metrics_flusher.join()
        with self.lock:
            self._flush()
            if self.metrics is not None:
                self.metrics.close()

    # --- incidents -----------------------------------------------------------------------------------------------

    def row(self, inc: Incident) -> dict[str, Any]:
        """An incident as the API and `get incidents -o json` give it (and `remediate --incident` reads back)."""
        body = incident_to_dict(inc)
        body["node"] = inc.node
        return body

    def incident(self, incident_id: str) -> dict[str, Any]:
        body = self.store.incidents.get(incident_id)
        if body is None:
            raise NotFoundError(f"no incident {incident_id}", fix="list them with `gpufleet get incidents`")
        return self.aged(body)

    def incidents(self, state: str | None = None, node: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        if state is not None and state not in {s.value for s in IncidentState}:
            raise UserError(f"unknown state {state!r}", fix=f"use one of: {', '.join(s.value for s in IncidentState)}")
        return [self.aged(b) for b in self.store.incidents.list(state, node, limit)]

    def aged(self, body: dict[str, Any]) -> dict[str, Any]:
        """An incident row with its age and how long since it was last seen, on the control plane's clock."""
        now = self.clock()
        entity = body.get("entity")
        if isinstance(entity, dict):  # its name as the agent knows it: index, else PCI address or UUID
            entity["text"] = entity_text(entity)
        body["age_s"] = round(max(0.0, now - float(body["first_seen"])), 1)
        body["last_seen_ago_s"] = round(max(0.0, now - float(body["last_seen"])), 1)
        body.update(describe_action(str(body.get("action") or ""), body.get("xid")))  # the action in words
        return body

    def transition(self, incident_id: str, state: IncidentState, actor: str, request: str = "") -> Incident:
        target = f"incident/{incident_id}"
        try:
            with self.lock:
                if incident_id not in self.book.incidents and self.store.incidents.get(incident_id) is not None:
                    raise UserError(f"{incident_id} is resolved; it cannot change any more")
                inc = self.book.transition(incident_id, state)
                self._flush()
        except Exception as exc:
            self.audit(actor, state.value, target, f"failed: {exc}", request)
            raise
        self.audit(actor, state.value, target, inc.state.value, request)
        return inc

    def mitigated(self, incident_id: str) -> None:
        """Remediation finished a runbook that acted: the incident, if still open or acknowledged, is mitigated."""
        with self.lock:
            live = self.book.incidents.get(incident_id)
            if live is not None and live.state in (IncidentState.open, IncidentState.acknowledged):
                self.book.transition(incident_id, IncidentState.mitigated)
                self._flush()

    def resolved(self, incident_id: str, evidence: str) -> None:
        """Remediation returned the incident's node to service on passed checks: the incident is resolved, with the
        checks' words in the audit log."""
        with self.lock:
            live = self.book.incidents.get(incident_id)
            if live is None or live.state is IncidentState.resolved:
                return
            self.book.transition(incident_id, IncidentState.resolved)
            self._flush()
        self.store.audit_log.append(
            time_=self.clock(), actor="remediation", action="resolved", target=f"incident/{incident_id}",
            decision="resolved", reason=evidence, incident=incident_id, backend=self.backend.name,
        )  # fmt: skip

    def report_collective(self, findings: list[Any], source: str, actor: str) -> list[str]:
        """`gpufleet nccl compare --report`: findings of a slow collective become incidents."""
        if not self.leader:
            leaders = [r["address"] for r in self.replication.replicas() if r["leader"]]
            raise UserError(
                "this control-plane replica does not lead; the leader opens incidents",
                fix=f"send the report to the leader ({leaders[0] if leaders else 'see /healthz of each replica'})",
            )
        with self.lock:
            changed = self.correlator.add(collective_findings(self.clock(), findings, source), self.fleet.owner)
            self._correlated(changed)
            self._flush()
        self.audit(actor, "nccl-findings", source, f"{len(findings)} finding(s)")
        return sorted({inc.id for inc in changed})

    def report_preflight(self, node: str, check: str, output: str, actor: str, pod: str = "", gang: str = "") -> str:
        """A GPU pod's preflight (`gpufleet preflight` in its init container) failed on `node`: the incident on the
        node, through the same book as the agents' findings. Returns its id."""
        if not self.leader:
            leaders = [r["address"] for r in self.replication.replicas() if r["leader"]]
            raise UserError(
                "this control-plane replica does not lead; the leader opens incidents",
                fix=f"send the report again (the Service picks another replica), or to the leader "
                f"({leaders[0] if leaders else 'see /healthz of each replica'})",
            )
        with self.lock:
            changed = self.correlator.add(
                [preflight_finding(self.clock(), node, check, output, pod, gang)], self.fleet.owner
            )
            self._correlated(changed)
            self._flush()
        ids = sorted({inc.id for inc in changed})
        self.audit(actor, "preflight-failure", f"node/{node}", f"{check} failed: {', '.join(ids) or 'no incident'}")
        return ids[0] if ids else ""

    def gpu_holders(self, node: str) -> dict[int, str] | None:
        """GPU index -> the pod holding it whole ("namespace/pod", "" for none), as `node`'s agent last reported
        (MetricSnapshot.held); None when it has not."""
        with self.lock:
            state = self.fleet.nodes.get(node)
            metrics = state.metrics if state is not None and not state.lost else None
            if metrics is None or not metrics.held:
                return None
            return dict(zip(metrics.gpus, metrics.held, strict=True))

    # --- node actions (people, through the API) -------------------------------------------------------------------

    def node_action(
        self,
        actor: str,
        verb: str,
        node: str,
        reason: str = "",
        *,
        gpu: int | None = None,
        dry_run: bool = False,
        request: str = "",
    ) -> str:
        """A person's action on a node (cordon, uncordon, drain) or one of its GPUs (reset), through the backend.
        With `dry_run`, everything is checked (the node, the GPU, that the backend can) and nothing is done."""
        state = self.fleet.node(node)  # a node never heard of is a clear 404, not a backend error
        target = f"node/{node}" if gpu is None else f"gpu/{node}/{gpu}"
        if verb == "reset":
            if gpu is None:
                raise UserError("reset needs a GPU index", fix="POST /api/v1/nodes/NODE/gpus/INDEX/reset")
            known = {g.index for g in state.inventory.gpus} if state.inventory else set()
            if gpu not in known:
                raise NotFoundError(f"{node} has no GPU {gpu}", fix=f"its GPUs: {sorted(known)}")
        why = reason or f"{verb} by {actor}"
        backend = self.backend
        act: Callable[[], str] | None = None
        if verb == "cordon" and isinstance(backend, Cordons):
            act = lambda: backend.cordon(node, why, None)  # noqa: E731
        elif verb == "uncordon" and isinstance(backend, Cordons):
            # a person returns the node whoever cordoned it (gpufleet's incidents included): their call, audited
            act = lambda: backend.uncordon(node, None)  # noqa: E731
        elif verb == "drain" and isinstance(backend, Drains):
            act = lambda: backend.drain(node, why, None)  # noqa: E731
        elif verb == "reset" and isinstance(backend, ResetsGpus):
            act = lambda: backend.reset_gpu(node, gpu)  # type: ignore[arg-type]  # noqa: E731
        elif verb == "reset" and self.node_actions.serves(node, NodeActionKind.reset_gpu) is None:
            # the backend cannot reach the GPU (Kubernetes): the node's own agent can
            return self.agent_action(
                actor, node, NodeActionKind.reset_gpu, gpu=gpu, reason=why, dry_run=dry_run, request=request
            )["result"]
        elif verb not in ("cordon", "uncordon", "drain", "reset"):
            raise UserError(f"unknown action {verb!r}", fix="use cordon, uncordon, drain or reset")
        return self._act(actor, verb, target, node, act, dry_run, request)

    def agent_action(
        self,
        actor: str,
        node: str,
        kind: NodeActionKind,
        *,
        gpu: int | None = None,
        fraction: float | None = None,
        level: int | None = None,
        service: str | None = None,
        reason: str = "",
        deadline_s: float = 900.0,
        dry_run: bool = False,
        request: str = "",
    ) -> dict[str, Any]:
        """A person's node action for the node's own agent (model/actions.py): checked (the node, its GPU, that its
        agent takes the kind), queued, and carried out when the agent next pushes. Returns its row."""
        state = self.fleet.node(node)
        if gpu is not None:
            known = {g.index for g in state.inventory.gpus} if state.inventory else set()
            if gpu not in known:
                raise NotFoundError(f"{node} has no GPU {gpu}", fix=f"its GPUs: {sorted(known)}")
        why = self.node_actions.serves(node, kind)
        if why is not None:
            raise UserError(f"cannot ask {node} to {kind}: {why}", fix="start or upgrade the node's agent")
        now = self.clock()
        action = NodeAction(
            id=f"manual-{secrets.token_hex(6)}", kind=kind, node=node, deadline=now + deadline_s, gpu=gpu,
            fraction=fraction, level=level, service=service, reason=reason or f"{kind} by {actor}",  # type: ignore[arg-type]
        )  # fmt: skip
        if dry_run:
            self.audit(actor, f"agent-{kind}", node, f"would queue: {action.describe()}", request, dry_run=True)
            return {"id": action.id, "state": "would", "result": f"would queue {action.describe()}"}
        self.node_actions.request(action, actor)
        self.store.add_event(now, "action", f"node/{node}", f"{actor}: queued {action.describe()}", node)
        return {"id": action.id, "state": "queued", "result": f"queued {action.describe()} as {action.id}"}

    def job_action(
        self, actor: str, verb: str, job: str, exclude: list[str], *, dry_run: bool = False, request: str = ""
    ) -> str:
        """Requeue a job (away from `exclude` nodes) through the backend."""
        if verb != "requeue":
            raise UserError(f"unknown action {verb!r}", fix="use requeue")
        if not any(j.name == job for j in self.fleet.jobs()):
            raise NotFoundError(f"no job {job}", fix="list them with `gpufleet get jobs`")
        for name in exclude:
            self.fleet.node(name)
        backend = self.backend
        act = (lambda: backend.requeue_job(job, exclude)) if isinstance(backend, RequeuesJobs) else None
        return self._act(actor, verb, f"job/{job}", None, act, dry_run, request)

    def port_action(
        self, actor: str, verb: str, port: str, reason: str = "", *, dry_run: bool = False, request: str = ""
    ) -> str:
        """Isolate a port or cable (disable the switch port that faces it) or return it to service."""
        if verb not in ("isolate", "restore"):
            raise UserError(f"unknown port action {verb!r}", fix="use isolate or restore")
        end = parse_end(port)
        if end is None:
            raise UserError(f"{port!r} is not a port", fix="name it as SWITCH/PORT or HOST/HCA/PORT (e.g. leaf1/35)")
        found = self.fabric.switch_port_of(end)
        if found is None:
            raise NotFoundError(
                f"no switch port faces {port} in the discovered fabric",
                fix="list the ports with `GET /api/v1/fabric/ports`; the fabric needs a watcher (`gpufleet agent "
                "--fabric`) reporting",
            )
        switch_port, lid = found
        backend = self.backend
        isolation = backend if isinstance(backend, IsolatesFabricPorts) else self.port_isolation
        act: Callable[[], str] | None = None
        if isolation is not None:
            act = lambda: isolation.set_switch_port(  # noqa: E731
                switch_port.node, switch_port.port, lid, enable=verb == "restore"
            )
        result = self._act(actor, f"{verb}-port", f"port/{switch_port}", None, act, dry_run, request)
        if not dry_run:
            since = self.clock() if verb == "isolate" else None
            with self.fabric.lock:
                if since is not None:
                    self.fabric.isolated[switch_port] = since
                else:
                    self.fabric.isolated.pop(switch_port, None)
            self.store.set_isolated(str(switch_port), since)
        return result

    def _act(
        self,
        actor: str,
        verb: str,
        target: str,
        node: str | None,
        act: Callable[[], str] | None,
        dry_run: bool,
        request: str,
    ) -> str:
        try:
            if act is None:
                raise self.backend.cannot(verb, node or target, "do it in the cluster's scheduler by hand")
            result = f"would {verb} {target}" if dry_run else act()
        except Exception as exc:
            self.audit(actor, verb, target, f"failed: {exc}", request, dry_run=dry_run)
            raise
        self.audit(actor, verb, target, result, request, dry_run=dry_run)
        if not dry_run:
            self.store.add_event(self.clock(), "action", target, f"{actor}: {result}", node or "")
            self._refresh_backend(force=True)
        return result

    def audit(
        self, actor: str, action: str, target: str, result: str, request: str = "", *, dry_run: bool = False
    ) -> None:
        self.store.audit_log.append(
            time_=self.clock(), actor=actor, action=action, target=target, decision=result, request=request,
            backend=self.backend.name, dry_run=dry_run,
        )  # fmt: skip

    @property
    def unavailable(self) -> set[str]:
        return self._unavailable


def entity_text(entity: dict[str, Any]) -> str:
    """An incident's entity as a path (`gpu/n-001/5`; a GPU NVML does not list, by what its agent knows of it:
    `gpu/n-001/0000:3b:00.0`), from the stored form `incident_to_dict` writes."""
    try:
        kind = EntityKind(entity.get("kind", ""))
    except ValueError:
        return "/".join(str(v) for v in (entity.get("kind"), entity.get("node"), entity.get("name")) if v)
    index = entity.get("index")
    return str(Entity(kind, str(entity.get("node") or ""), index if isinstance(index, int) else None,
                      str(entity.get("name") or "")))  # fmt: skip


def _kernel_idents(records: list[Record]) -> list[str]:
    """The kernel-log identities the records carry (a report and the findings judged from it share one)."""
    return sorted({r.body.ident for r in records if isinstance(r.body, (KernelReport, Finding)) and r.body.ident})
