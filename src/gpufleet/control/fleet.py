"""What the control plane knows about the fleet, learnt only from what agents report: nodes from their inventory,
their latest metric snapshot, the jobs their ranks belong to, recent kernel reports and port states.

Nothing here reads a cluster directly: a real node and a simulated one look the same.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.errors import NotFoundError
from gpufleet.health.detectors.seen import JobView
from gpufleet.model.observe import (
    Batch,
    JobFact,
    KernelReport,
    LinkEvent,
    MetricSnapshot,
    NodeInventory,
    Record,
    SchedulerReport,
    ServiceFact,
    TrainingSignals,
)

KERNEL_LOG = 50  # recent kernel reports kept per node for `describe node`
UTIL = "DCGM_FI_DEV_GPU_UTIL"


@dataclass(slots=True)
class NodeState:
    name: str
    agent: str
    inventory: NodeInventory | None = None
    last_seen: float = 0.0  # control-plane clock of the last push
    interval: float = 1.0
    metrics: MetricSnapshot | None = None
    gpu_matrix: np.ndarray | None = None  # (fields, gpus) of `metrics`
    port_matrix: np.ndarray | None = None
    gpu_field_index: dict[str, int] = field(default_factory=dict)
    port_field_index: dict[str, int] = field(default_factory=dict)
    gpu_column: dict[int, int] = field(default_factory=dict)  # GPU index -> column
    column_of: np.ndarray = field(default_factory=lambda: np.full(0, -1, dtype=np.int64))  # the same, as an array
    jobs: list[JobFact] = field(default_factory=list)
    services: list[ServiceFact] = field(default_factory=list)
    kernel_log: deque[KernelReport] = field(default_factory=lambda: deque(maxlen=KERNEL_LOG))
    ports_up: dict[str, bool] = field(default_factory=dict)  # "mlx5_0/1" -> up
    lost: bool = False  # the agent fell silent

    def gpu_value(self, name: str, gpu: int) -> float:
        if self.gpu_matrix is None or self.lost:
            return float("nan")
        row, col = self.gpu_field_index.get(name), self.gpu_column.get(gpu)
        return float("nan") if row is None or col is None else float(self.gpu_matrix[row, col])

    def gpu_row(self, name: str) -> np.ndarray:
        """One field for every GPU of the last snapshot, in its column order (empty when not read)."""
        row = self.gpu_field_index.get(name)
        if self.gpu_matrix is None or self.lost or row is None:
            return np.empty(0)
        return self.gpu_matrix[row]

    def port_value(self, name: str, port: str) -> float:
        if self.port_matrix is None or self.metrics is None:
            return float("nan")
        row = self.port_field_index.get(name)
        if row is None or port not in self.metrics.ports:
            return float("nan")
        return float(self.port_matrix[row, self.metrics.ports.index(port)])


@dataclass(slots=True)
class _JobParts:
    """A job's ranks as the nodes hosting them report them, joined."""

    ranks: dict[int, tuple[str, int, float]] = field(default_factory=dict)  # rank -> (node, GPU, compute s)
    last_step: float = 0.0
    step_seconds: float = 0.0

    def view(self, name: str) -> JobView:
        ordered = [self.ranks[k] for k in sorted(self.ranks)]
        return JobView(
            name,
            tuple((n, g) for n, g, _ in ordered),
            self.last_step,
            self.step_seconds,
            tuple(c for _, _, c in ordered),
        )


class FleetState:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self._jobs: list[JobView] | None = None
        self._owner: dict[tuple[str, int], str] | None = None
        self._rank_indices: dict[str, tuple[JobView, int, np.ndarray]] = {}
        self._flat: tuple[np.ndarray, dict[str, int]] | None = None  # the utilization of every GPU, end to end
        self._layout = 0  # bumps when a node appears or its GPU columns change
        self.scheduler: dict[str, tuple[str, SchedulerReport]] = {}  # manager -> (reporting node, its last report)

    def node(self, name: str) -> NodeState:
        """A node that has reported, or a NotFoundError that says where to look."""
        node = self.nodes.get(name)
        if node is None:
            raise NotFoundError(f"no node {name!r} has reported to this control plane", fix="see `gpufleet get nodes`")
        return node

    # --- ingest --------------------------------------------------------------------------------------------------

    def update(self, batch: Batch, now: float, new: list[Record]) -> NodeState:
        """Take a push: its state replaces the node's, its new records (not re-sent ones) are added."""
        node = self.nodes.get(batch.node)
        if node is None:
            node = self.nodes[batch.node] = NodeState(batch.node, batch.agent)
            self._layout += 1
        node.agent, node.last_seen, node.interval, node.lost = batch.agent, now, batch.interval, False
        self._flat = None
        if batch.inventory is not None:
            node.inventory = batch.inventory
        if batch.metrics is not None:
            self._metrics(node, batch.metrics)
        if batch.jobs is not None and batch.jobs != node.jobs:
            node.jobs = batch.jobs
            self._jobs = self._owner = None
        if batch.services is not None:
            node.services = batch.services
        if batch.scheduler is not None:
            self.scheduler[batch.scheduler.manager] = (node.name, batch.scheduler)
        for record in new:
            body = record.body
            if isinstance(body, KernelReport):
                node.kernel_log.append(body)
            elif isinstance(body, LinkEvent):
                node.ports_up[f"{body.hca}/{body.port}"] = body.up
        return node

    def _metrics(self, node: NodeState, m: MetricSnapshot) -> None:
        old = node.metrics
        if old is None or old.gpu_fields != m.gpu_fields:
            node.gpu_field_index = {name: i for i, name in enumerate(m.gpu_fields)}
        if old is None or old.port_fields != m.port_fields:
            node.port_field_index = {name: i for i, name in enumerate(m.port_fields)}
        if old is None or old.gpus != m.gpus:
            node.gpu_column = {g: i for i, g in enumerate(m.gpus)}
            node.column_of = np.full(max(m.gpus, default=-1) + 1, -1, dtype=np.int64)
            node.column_of[m.gpus] = np.arange(len(m.gpus))
            self._layout += 1
        node.metrics, node.gpu_matrix, node.port_matrix = m, m.gpu_matrix(), m.port_matrix()
        if m.port_up:
            node.ports_up.update(zip(m.ports, m.port_up, strict=True))

    def load_inventory(self, inventories: Iterable[tuple[str, str, NodeInventory]]) -> None:
        """Nodes known before a restart: listed (as not yet heard from) until their agents push again."""
        for name, agent, inv in inventories:
            node = self.nodes.setdefault(name, NodeState(name, agent))
            node.inventory, node.lost = inv, True

    def load_kernel_log(self, reports: Iterable[KernelReport]) -> None:
        """Kernel reports stored before a restart, oldest first, for the nodes' recent kernel log."""
        for report in reports:
            node = self.nodes.get(report.node)
            if node is not None:
                node.kernel_log.append(report)

    def mark_lost(self, now: float, intervals: float) -> list[NodeState]:
        """Nodes whose agent has been silent for `intervals` of its own collection intervals (newly lost)."""
        newly = []
        for node in self.nodes.values():
            silent = now - node.last_seen > intervals * node.interval
            if silent and not node.lost:
                node.lost = True
                newly.append(node)
                self._flat = None
        return newly

    # --- what correlation needs ---------------------------------------------------------------------------------

    def jobs(self) -> list[JobView]:
        """Training jobs joined across the nodes that host their ranks."""
        if self._jobs is None:
            merged: dict[str, _JobParts] = {}
            for node in self.nodes.values():
                for fact in node.jobs:
                    parts = merged.setdefault(fact.job, _JobParts())
                    for r in fact.ranks:
                        parts.ranks[r.rank] = (node.name, r.gpu, float("nan") if r.compute_s is None else r.compute_s)
                    parts.last_step = max(parts.last_step, fact.last_step_time)
                    parts.step_seconds = max(parts.step_seconds, fact.step_seconds)
            self._jobs = [parts.view(name) for name, parts in merged.items()]
        return self._jobs

    def job_signals(self) -> dict[str, tuple[TrainingSignals, float]]:
        """Each job's own signals, from the node exporting them (rank 0's), with when that node last pushed."""
        out: dict[str, tuple[TrainingSignals, float]] = {}
        for node in self.nodes.values():
            if node.lost:
                continue  # a silent node's last values are not the job's present
            for fact in node.jobs:
                if fact.signals is not None and (fact.job not in out or out[fact.job][1] < node.last_seen):
                    out[fact.job] = (fact.signals, node.last_seen)
        return out

    def service_facts(self) -> list[tuple[str, ServiceFact]]:
        """Every service replica the answering nodes report, with its node: a silent node's replicas go stale."""
        return [(node.name, fact) for node in self.nodes.values() if not node.lost for fact in node.services]

    def rank_util(self, job: JobView) -> np.ndarray:
        """Each rank's GPU utilization (NaN where its GPU or its node's agent reports nothing)."""
        flat, offsets = self._util_flat()
        cached = self._rank_indices.get(job.name)
        # where each rank's GPU sits moves only with the job's placement or a node's columns, not with its progress
        if cached is None or cached[1] != self._layout or (cached[0] is not job and cached[0].ranks != job.ranks):
            idx = np.full(len(job.ranks), -1, dtype=np.int64)
            for k, (name, gpu) in enumerate(job.ranks):
                node = self.nodes.get(name)
                if node is not None and name in offsets and gpu < node.column_of.size and node.column_of[gpu] >= 0:
                    idx[k] = offsets[name] + node.column_of[gpu]
            cached = self._rank_indices[job.name] = (job, self._layout, idx)
        idx = cached[2]
        return np.where(idx >= 0, flat[np.maximum(idx, 0)] if flat.size else np.nan, np.nan)

    def _util_flat(self) -> tuple[np.ndarray, dict[str, int]]:
        """Every node's latest GPU utilization end to end (NaN for a lost agent), and where each node starts."""
        if self._flat is None:
            parts, offsets, at = [], {}, 0
            for node in self.nodes.values():
                width = len(node.metrics.gpus) if node.metrics is not None else 0
                row = node.gpu_row(UTIL)
                parts.append(row if row.size == width else np.full(width, np.nan))
                offsets[node.name] = at
                at += width
            self._flat = (np.concatenate(parts) if parts else np.empty(0), offsets)
        return self._flat

    def owner(self, node: str, gpu: int | None) -> str | None:
        if gpu is None:
            return None
        if self._owner is None:
            self._owner = {(n, g): job.name for job in self.jobs() for n, g in job.ranks}
        return self._owner.get((node, gpu))

    def job_resources(self, job: str) -> list[str]:
        for view in self.jobs():
            if view.name == job:
                return sorted({f"gpu/{n}/{g}" for n, g in view.ranks} | {f"node/{n}" for n, _ in view.ranks})
        return []

    def inventories(self) -> list[NodeInventory]:
        return [n.inventory for n in self.nodes.values() if n.inventory is not None and not n.lost]
