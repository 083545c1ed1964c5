"""What the scheduling framework passes between its parts: the unit it schedules (a pod or a gang's pending
members) and what a plan decides (placements, failures, evictions). Plain data, so gang placement, preemption,
queues and backfill share it without importing the scheduler that drives them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gpufleet.sched.framework.snapshot import PodInfo
from gpufleet.sched.framework.topology import Landing

if TYPE_CHECKING:
    import numpy as np

    from gpufleet.sched.framework.state import ClusterState

EvictPredicate = Callable[[PodInfo, PodInfo], bool]  # (victim, preemptor): may the victim go?


@dataclass(slots=True)
class Unit:
    """What is scheduled at once: one pod, or the pending members of a gang."""

    name: str
    pods: list[PodInfo]
    min_member: int
    priority: int
    queue: str
    gang: bool = False

    def request(self, resource: str) -> int:
        return sum(p.requests.get(resource, 0) for p in self.pods)


@dataclass(slots=True)
class Placement:
    pod: str
    node: str
    gpus: tuple[int, ...] = ()
    score: float = 0.0
    nics: tuple[str, ...] = ()  # the RDMA NICs its GPUs use, where the node's affinity is known
    alignment: str = ""  # "aligned: ..." or why not ("GPUs 4,5 share no PCIe switch with a free NIC; ...")


@dataclass(slots=True)
class Failure:
    pod: str
    message: str
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Eviction:
    pod: str
    node: str
    reason: str  # "preempted by ns/pod" or "reclaimed by queue q"


@dataclass(slots=True)
class PlanResult:
    placements: list[Placement] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    landings: dict[str, Landing] = field(default_factory=dict)  # gang -> where its placed members sit

    def node_of(self, pod: str) -> str | None:
        return next((p.node for p in self.placements if p.pod == pod), None)


@dataclass(slots=True)
class Explanation:
    pod: str
    feasible: list[tuple[str, float]]  # (node, score), best first
    reasons: dict[str, int]
    message: str | None
    alignment: dict[str, str] = field(default_factory=dict)  # feasible node -> how its GPUs would sit with NICs


class Placer(Protocol):
    """What gang placement, preemption and backfill need of the scheduler that drives them: its cluster state, and
    choosing and taking a node for one pod."""

    state: ClusterState

    def select_node(
        self, pod: PodInfo, restrict: np.ndarray | None = None, gang_groups: set[int] | None = None
    ) -> tuple[int, float] | None:
        """The best node for the pod, among `restrict` (a boolean mask over the nodes, or the sorted indices of
        the nodes allowed) when given, with its score."""
        ...

    def place(self, pod: PodInfo, node: int, score_: float = 0.0) -> Placement: ...

    def by_class(self, pod: PodInfo) -> bool: ...

    def fits_somewhere(self, pod: PodInfo) -> bool: ...

    def feasible_classes(self, pod: PodInfo) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the node classes where the pod passes every filter (for a pod `by_class`), and how many such pods
        each node of them holds by its free resources."""
        ...
