"""What a detector sees: one typed input per scope, handed to every detector of that scope (`detect(now, seen)`).

- `NodeSeen`: one collection on a node (in its agent): the MetricFrame, the kernel-log reports parsed since the last
  one, the inventories due for a check, what the BMC source read. A node-local detector also records there what it
  saw besides findings: the kernel reports it judged, the ports that went down or came up, the BMC's new event-log
  records.
- `FleetSeen`: one moment of the fleet (in the control plane): the training jobs and their ranks' GPUs, the jobs'
  own signals, the inference services' replicas, every node's inventory, the hosts' load. Its callables are read
  only by the detectors that need them, when they run.

An input that is not given is None, and a detector that needs it does not run (`Registered.needs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpufleet.model.bmc import BmcRead
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import BmcEvent, KernelReport, LinkEvent, NodeInventory, ServiceFact, TrainingSignals

if TYPE_CHECKING:
    from gpufleet.telemetry.frame import MetricFrame


@dataclass(frozen=True, slots=True)
class JobView:
    """A training job as the control plane sees it, joined from what every node hosting a rank reported."""

    name: str
    ranks: tuple[tuple[str, int], ...]  # (node, GPU index) of each rank, in rank order
    last_step_time: float
    step_seconds: float
    rank_compute: tuple[float, ...] = ()  # per rank, NaN where not reported


@dataclass(frozen=True, slots=True)
class HostLoad:
    """A host's CPU as a fraction of its time: busy, and waiting on I/O (None when unknown)."""

    cpu_busy: float | None = None
    io_wait: float | None = None


RankUtil = Callable[[JobView], np.ndarray]  # GPU utilization of each rank's GPU, NaN where the GPU reads nothing
HostLoads = Callable[[str], HostLoad | None]  # node name -> its load, or None when unknown
Inventories = Callable[[], Sequence[NodeInventory]]  # every node's latest inventory
JobSignals = Callable[[], dict[str, tuple[TrainingSignals, float]]]  # job -> its signals, when its node reported
ServiceReplicas = Callable[[], list[tuple[str, ServiceFact]]]  # every replica reported, with its node


@dataclass(slots=True)
class NodeSeen:
    """One collection as the node-local detectors see it, and what they record besides findings."""

    frame: MetricFrame | None = None
    kernel: Mapping[str, Sequence[KernelEvent]] | None = None  # node -> its kernel-log reports parsed since the last
    inventories: Sequence[NodeInventory] | None = None  # nodes whose inventory is new or due for its periodic check
    bmc: Mapping[str, BmcRead] | None = None  # node -> what its BMC source read since the last collection
    reports: list[KernelReport] = field(default_factory=list)  # recorded: each kernel report judged
    links: list[LinkEvent] = field(default_factory=list)  # recorded: each port that went down or came up
    bmc_events: list[BmcEvent] = field(default_factory=list)  # recorded: each new BMC event-log record


@dataclass(frozen=True, slots=True)
class FleetSeen:
    """One moment of the fleet as the fleet-wide detectors see it."""

    jobs: Sequence[JobView] = ()
    rank_util: RankUtil | None = None
    inventories: Inventories | None = None
    signals: JobSignals | None = None
    services: ServiceReplicas | None = None
    host_load: HostLoads | None = None  # read where given; None: the hosts' load is unknown
