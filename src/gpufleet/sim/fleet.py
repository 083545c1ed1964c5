"""The twin's nodes as agents: the twin comes into the control plane through the same door as real nodes.

Each collection fills one frame with every simulated node's readings (as NVML and sysfs would), parses each node's
new kernel-log lines with the same streaming parser a real agent runs, runs the same node-local detectors, and
builds for every node the same `Batch` a real agent pushes: durable records under that node's sequence numbers,
its inventory, a metric snapshot and its training jobs. A transport takes the batches: in process (`gpufleet up`)
or over HTTP (the ingest benchmark). A rebooting node's agent is silent, as a real one would be.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import msgspec
import numpy as np

from gpufleet import __version__
from gpufleet.agent.app import read_signals
from gpufleet.agent.edge import InventoryCadence
from gpufleet.agent.services import ServiceWindows
from gpufleet.cost.config import CostConfig
from gpufleet.health.node_health import NodeHealth
from gpufleet.model import JobState
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import (
    SCHEMA_VERSION,
    Ack,
    Batch,
    GpuInfo,
    JobFact,
    MetricSnapshot,
    MigInfo,
    NodeInventory,
    PendingWork,
    PortInfo,
    QueueUse,
    RankFact,
    Record,
    SchedulerReport,
    ServiceFact,
    TrainingSignals,
)
from gpufleet.parsers.kernel.kmsg import KmsgParser
from gpufleet.sim.affinity import twin_affinity
from gpufleet.sim.clock import TwinClocks
from gpufleet.sim.fabric_report import TwinFabricWatch
from gpufleet.sim.fabric_settings import host_settings
from gpufleet.sim.node_actions import CAN, TwinNodeActions
from gpufleet.sim.source import RANK_EXPORT_S, GaugeKey, TwinSource
from gpufleet.sim.twin import Twin
from gpufleet.telemetry.frame import label_items

Transport = Callable[[Batch], Ack]


@dataclass(slots=True)
class SimAgent:
    """One simulated node's agent: its stream identity and what it has read so far."""

    node: str
    gpu_cols: np.ndarray | slice  # the node's columns of the fleet frame (a slice when they are contiguous)
    port_cols: np.ndarray | slice
    seq: int = 0
    kmsg_seen: int = 0
    parser: KmsgParser = field(init=False)
    inventory: InventoryCadence = field(default_factory=InventoryCadence)
    inventory_due: NodeInventory | None = None  # chosen to send; goes out with the next batch
    unsent: list[Record] = field(default_factory=list)  # records not yet acknowledged (the agent's spool)
    gpus: list[int] = field(default_factory=list)  # GPU index of each column
    ports: list[str] = field(default_factory=list)  # "mlx5_0/1" of each port column
    held: list[str] = field(default_factory=list)  # the workload holding each GPU column ("namespace/pod" or "")

    def __post_init__(self) -> None:
        self.parser = KmsgParser(host=self.node)


class SimFleet:
    def __init__(self, twin: Twin, incarnation: str | None = None, cost: CostConfig | None = None) -> None:
        """`cost`: the cost config the report reads, which prices the idle-cost series (default: the catalog's)."""
        self.twin = twin
        self.incarnation = incarnation or secrets.token_hex(8)
        self.source = TwinSource(twin, cost=cost)
        self.frame = self.source.new_frame()
        self.health = NodeHealth(self.frame)
        self.gpu_fields = [f.name for f in self.frame.gpu_fields]
        self.port_fields = [f.name for f in self.frame.ib_fields]
        self.port_names = [f"{p.hca}/{p.port}" for p in self.frame.ib_ports]
        gpu_host = np.array([e.hostname for e in self.frame.entities])
        port_host = np.array([p.hostname for p in self.frame.ib_ports])
        self.agents: dict[str, SimAgent] = {}
        for n in twin.cluster.nodes:
            if not n.gpus:
                continue
            gpu_cols, port_cols = np.flatnonzero(gpu_host == n.name), np.flatnonzero(port_host == n.name)
            agent = self.agents[n.name] = SimAgent(n.name, _as_slice(gpu_cols), _as_slice(port_cols))
            agent.gpus = [self.frame.entities[int(i)].gpu for i in gpu_cols]
            agent.ports = [self.port_names[int(i)] for i in port_cols]
        self._ranks: dict[tuple[str, int, tuple[str, ...]], dict[str, list[RankFact]]] = {}
        self._rank_layout: dict[tuple[str, int, tuple[str, ...]], dict[str, list[tuple[int, int, GaugeKey]]]] = {}
        self.services = ServiceWindows()
        self.node_actions: TwinNodeActions | None = None  # set when the control plane acts through the agents
        self._signals: dict[str, TrainingSignals] | None = None
        self.fabric_watch = TwinFabricWatch(twin)
        self.clocks = TwinClocks(twin.seed)
        self._labels_version = -1
        agents = list(self.agents.values())
        self._gpu_gather = _gather([a.gpu_cols for a in agents], len(self.frame.entities))
        self._port_gather = _gather([a.port_cols for a in agents], len(self.frame.ib_ports))
        self.batches = 0

    # --- a collection --------------------------------------------------------------------------------------------

    def collect(self) -> list[Batch]:
        """Every answering node's batch for the twin's current moment."""
        twin, frame = self.twin, self.frame
        if self.node_actions is not None:  # what the agents were handed at their last push
            self.node_actions.run_offered()
        now = twin.epoch + twin.time
        frame.clear_values()
        self.source.collect(frame)
        kernel: dict[str, list[KernelEvent]] = {}
        inventories = []
        for agent in self.agents.values():
            lines = twin.kmsg[agent.node]
            if len(lines) > agent.kmsg_seen:
                events: list[KernelEvent] = []
                for line in lines[agent.kmsg_seen :]:
                    events += agent.parser.feed_line(line)
                agent.kmsg_seen = len(lines)
                if events:
                    kernel[agent.node] = events
            due = agent.inventory.due(now, partial(self.inventory, agent.node))
            if due is not None:
                agent.inventory_due = due
                inventories.append(due)
        out = self.health.observe(now, frame, kernel, inventories)
        observations = out.by_node()
        jobs = self.job_facts()
        services = self.service_facts(now)
        scheduler: SchedulerReport | None = self.scheduler_report(now)
        fabric = [self.fabric_watch.report(twin.time, now)] if self.fabric_watch.due(twin.time) else None
        snapshots = self._snapshots(now)
        batches = []
        for k, agent in enumerate(self.agents.values()):
            for obs in observations.get(agent.node, ()):
                agent.seq += 1
                agent.unsent.append(Record(agent.seq, obs))
            if twin.rebooting(agent.node):
                continue  # its agent is down with it; the spool keeps what it had
            clock = self.clocks.fact(agent.node, now, self.batches + k)
            batches.append(
                Batch(
                    v=SCHEMA_VERSION,
                    agent=agent.node,
                    incarnation=self.incarnation,
                    node=agent.node,
                    sent=max(0.0, now + (clock.offset_s or 0.0)),  # stamped on the node's own clock
                    interval=twin.tick,
                    records=list(agent.unsent),
                    inventory=agent.inventory_due,
                    metrics=snapshots[k],
                    jobs=jobs.get(agent.node, []),
                    services=services.get(agent.node, []),
                    scheduler=scheduler,
                    fabric=fabric,
                    clock=clock,
                    can=list(CAN) if self.node_actions is not None else None,
                    results=self.node_actions.pending(agent.node) if self.node_actions is not None else [],
                )
            )
            scheduler = fabric = None  # one agent watches the workload manager, and one the fabric
            agent.inventory_due = None
        self.batches += len(batches)
        return batches

    def push(self, transport: Transport) -> int:
        """Collect and hand every batch to `transport`."""
        return self.deliver(self.collect(), transport)

    def deliver(self, batches: list[Batch], transport: Transport) -> int:
        """Hand batches to `transport`; acknowledged records leave the agents' spools."""
        for batch in batches:
            ack = transport(batch)
            agent = self.agents[batch.node]
            agent.unsent = [r for r in agent.unsent if r.seq > ack.acked]
            if self.node_actions is not None:
                self.node_actions.acknowledged(batch.node, ack.results)
                if ack.actions:
                    held = dict(zip(agent.gpus, agent.held, strict=False))
                    self.node_actions.offer(batch.node, ack.actions, held)
        return len(batches)

    def positions(self) -> dict[str, dict[str, int]]:
        """Each agent's stream position: the last sequence number used and the kernel-log lines read."""
        return {n: {"seq": a.seq, "kmsg": a.kmsg_seen} for n, a in self.agents.items()}

    # --- what a node's agent reads -------------------------------------------------------------------------------

    def _snapshots(self, now: float) -> list[MetricSnapshot]:
        """Every agent's metric snapshot, in agent order: the frame's values laid out node by node in one copy when
        every node's columns are a run of the same width (the twin's fleet), each node's own columns otherwise."""
        f = self.frame
        agents = list(self.agents.values())
        if self._labels_version != f.labels_version:  # who holds which GPU changes rarely
            self._labels_version = f.labels_version
            holders = ["" if a is None else f"{a.namespace}/{a.pod}" for a in f.attribution]
            for agent in agents:
                agent.held = [holders[i] for i in _columns(agent.gpu_cols, len(holders))]
        gpu_rows = _by_node(f.values, [a.gpu_cols for a in agents], self._gpu_gather)
        port_rows = _by_node(f.ib_values, [a.port_cols for a in agents], self._port_gather)
        up = (f.ib_up >= 0.5).tolist()
        return [
            MetricSnapshot(
                time=float(now),
                gpus=agent.gpus,
                gpu_fields=self.gpu_fields,
                gpu_values=gpu_rows[k],
                ports=agent.ports,
                port_fields=self.port_fields,
                port_values=port_rows[k],
                port_up=[up[i] for i in _columns(agent.port_cols, len(up))],
                held=agent.held,
            )
            for k, agent in enumerate(agents)
        ]

    def inventory(self, name: str) -> NodeInventory:
        return node_inventory(self.twin, name)

    def job_facts(self) -> dict[str, list[JobFact]]:
        """Per node, the training jobs with ranks there, as their framework exports them (per-rank compute times
        every few seconds, progress every step)."""
        twin, ts, gauges = self.twin, self.twin.training, self.frame.gauges
        exported = twin.time % RANK_EXPORT_S < twin.tick  # the twin's frameworks just exported rank times
        if exported or self._signals is None:  # the agent's own reading of the jobs' series, at their export pace
            self._signals = read_signals(gauges).jobs
        out: dict[str, list[JobFact]] = {}
        for j, job in enumerate(ts.jobs):
            if job.state not in (JobState.running, JobState.hung):
                continue
            key = (job.name, job.restarts, tuple(job.nodes))
            ranks = self._ranks.get(key)
            if ranks is None or exported:
                layout = self._rank_layout.get(key)
                if layout is None:
                    layout = self._rank_layout[key] = self._layout(j)
                ranks = self._ranks[key] = {
                    node: [RankFact(r, g, gauges.get(gauge)) for r, g, gauge in mine] for node, mine in layout.items()
                }
            for node, node_ranks in ranks.items():
                first = node_ranks[0].rank == 0 if node_ranks else False  # rank 0's node exports the job's values
                out.setdefault(node, []).append(
                    JobFact(
                        job=job.name,
                        ranks=node_ranks,
                        world_size=job.world_size,
                        last_step_time=twin.epoch + job.last_step_time,
                        step_seconds=job.step_time_s,
                        step=job.step,
                        restarts=job.restarts,
                        signals=self._signals.get(job.name) if first else None,
                    )
                )
        return out

    def service_facts(self, now: float) -> dict[str, list[ServiceFact]]:
        """Per node, the inference services with replicas there, from their request-duration histograms."""
        by_name = {st.service.name: st for st in self.twin.services}
        out: dict[str, list[ServiceFact]] = {}
        for fact in self.services.facts(self.frame, now):
            st = by_name.get(fact.service)
            if st is None:
                continue
            gpus = [int(self.twin.gpus.index_on_node[k]) for k in st.gpus]
            fact = msgspec.structs.replace(fact, gpus=gpus, slo_p99_s=st.service.slo_p99_s)
            out.setdefault(st.service.node, []).append(fact)
        return out

    def scheduler_report(self, now: float) -> SchedulerReport:
        """The twin's workload manager: jobs waiting for nodes, said as kube-scheduler says it, and its queues."""
        twin = self.twin
        gpu_nodes = [n for n in twin.cluster.nodes if n.gpus]
        busy = {n for j in twin.cluster.jobs if j.state in (JobState.running, JobState.hung) for n in j.nodes}
        busy |= {st.service.node for st in twin.services}
        cordoned = sum(1 for n in gpu_nodes if n.unschedulable)
        short = sum(1 for n in gpu_nodes if n.name in busy and not n.unschedulable)
        pending: list[PendingWork] = []
        queues: dict[str, QueueUse] = {}
        for job in twin.cluster.jobs:
            use = queues.setdefault(job.queue, QueueUse(name=job.queue))
            gpus = job.world_size
            if job.state is JobState.pending:
                use.pending += 1
                use.gpus_pending += gpus
                parts = [f"{short} Insufficient nvidia.com/gpu"] if short else []
                if cordoned:
                    parts.append(f"{cordoned} node(s) were unschedulable")
                if job.excluded_nodes:
                    parts.append(f"{len(job.excluded_nodes)} node(s) didn't match Pod's node affinity/selector")
                pending.append(
                    PendingWork(
                        name=job.name,
                        queue=job.queue,
                        namespace="training",
                        gpus=gpus,
                        reason="Unschedulable",
                        message=f"0/{len(gpu_nodes)} nodes are available: {', '.join(parts) or 'no spare nodes'}.",
                        priority=job.priority,
                    )
                )
            elif job.state in (JobState.running, JobState.hung):
                use.running += 1
                use.gpus_used += gpus
        return SchedulerReport(manager="twin", time=now, pending=pending, queues=list(queues.values()))

    def _layout(self, j: int) -> dict[str, list[tuple[int, int, GaugeKey]]]:
        """A job's ranks by node: (rank, GPU index, the gauge its compute time is exported under)."""
        twin, ts = self.twin, self.twin.training
        name = ts.jobs[j].name
        layout: dict[str, list[tuple[int, int, GaugeKey]]] = {}
        for rank, k in enumerate(ts.ranks_of(j)):
            node = twin.cluster.nodes[int(twin.gpus.node_of[k])].name
            gauge = ("training_rank_compute_seconds", label_items({"job": name, "rank": str(rank)}))
            layout.setdefault(node, []).append((rank, int(twin.gpus.index_on_node[k]), gauge))
        return layout


def node_inventory(twin: Twin, name: str) -> NodeInventory:
    """What an agent reads about its node: versions, GPUs (NVML), HCA ports (sysfs)."""
    node = twin.cluster.node(name)
    sw = node.software
    ports = []
    for nic in node.nics:
        p = twin.port_of(name, nic.rail)
        port = nic.ports[0] if nic.ports else None
        ports.append(
            PortInfo(
                hca=nic.name,
                port=port.number if port else 1,
                rail=str(nic.rail),
                guid=port.guid if port else nic.guid,
                lid=port.lid if port else None,
                rate_gbps=port.speed_gbps if port else None,
                link_layer="InfiniBand",
                netdev=nic.netdev or f"ib{nic.rail}",
                peer=twin.ports.leaf_of(p),
            )
        )
    return NodeInventory(
        hostname=name,
        driver=sw.driver_version,
        cuda=sw.cuda_version,
        kernel=sw.kernel,
        fabric_manager=sw.fabric_manager_version,
        agent_version=__version__,
        gpus=[
            GpuInfo(
                g.index,
                g.uuid,
                g.model.product_name,
                g.pci_bus_id,
                g.serial,
                mig_mode=g.mig_enabled if g.model.mig_capable else None,  # NVML answers NotSupported without MIG
                memory_mib=float(g.model.memory_mib),
                power_limit_w=float(twin.gpus.power_limit_w[twin.gpu(name, g.index)]),
                # the twin's GPU instances each hold one compute instance spanning it, CI 0 as NVML numbers it
                mig=[MigInfo(i.profile, i.gi_id, i.start, i.size, i.uuid, 0) for i in g.mig_instances]
                if g.mig_enabled
                else [],
                vendor=g.vendor,
            )
            for g in node.gpus
        ],
        ports=ports,
        labels={"pool": node.pool, "rack": node.rack},
        affinity=twin_affinity(node),
        fabric_settings=host_settings(twin, name),
    )


def _columns(cols: np.ndarray | slice, n: int) -> range | list[int]:
    return range(*cols.indices(n)) if isinstance(cols, slice) else cols.tolist()


Gather = tuple[np.ndarray | None, int]  # (the columns node after node, None when in order already; columns per node)


def _gather(cols: list[np.ndarray | slice], n: int) -> Gather:
    """How to lay `n` columns out node by node: width 0 when nodes have different numbers of columns."""
    widths = {len(range(*c.indices(n))) if isinstance(c, slice) else len(c) for c in cols}
    if len(widths) != 1:
        return None, 0
    order = np.concatenate([np.arange(n)[c] for c in cols])
    return (None if np.array_equal(order, np.arange(n)) else order), widths.pop()


def _by_node(values: np.ndarray, cols: list[np.ndarray | slice], gather: Gather) -> list[bytes]:
    """Each node's (fields x its columns) of `values` as little-endian float64 bytes, field-major as a snapshot
    carries them: cut from one node-major copy of the whole when every node has as many columns (the twin's fleet),
    otherwise copied node by node."""
    order, width = gather
    if not width or not values.shape[0]:
        return [np.ascontiguousarray(values[:, c], dtype="<f8").tobytes() for c in cols]
    gathered = values if order is None else values[:, order]
    node_major = gathered.reshape(values.shape[0], len(cols), width).transpose(1, 0, 2)
    return [row.tobytes() for row in np.ascontiguousarray(node_major, dtype="<f8")]


def _as_slice(columns: np.ndarray) -> np.ndarray | slice:
    """Contiguous columns as a slice: a view instead of a copy on every collection."""
    if columns.size and bool((np.diff(columns) == 1).all()):
        return slice(int(columns[0]), int(columns[-1]) + 1)
    return columns
