"""The cluster: node pools, nodes, fabric and workloads, with lookups."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from gpufleet.errors import NotFoundError
from gpufleet.model.fabric import Fabric, Transport
from gpufleet.model.gpu import Gpu
from gpufleet.model.node import Node
from gpufleet.model.workload import Gang, InferenceService, Pod, TrainingJob


@dataclass(slots=True)
class NodePool:
    name: str
    node_names: list[str]
    gpu_model: str | None
    gpus_per_node: int
    nics_per_node: int
    nic_speed_gbps: float


@dataclass(slots=True)
class Cluster:
    name: str
    pools: list[NodePool] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    fabric: Fabric = field(default_factory=lambda: Fabric(Transport.ib))
    pods: list[Pod] = field(default_factory=list)
    gangs: list[Gang] = field(default_factory=list)
    jobs: list[TrainingJob] = field(default_factory=list)
    services: list[InferenceService] = field(default_factory=list)
    _by_name: dict[str, Node] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        self._by_name = {n.name: n for n in self.nodes}

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFoundError(f"no node named {name!r}", fix="list nodes with `gpufleet get nodes`") from None

    def job(self, name: str) -> TrainingJob:
        for job in self.jobs:
            if job.name == name:
                return job
        raise NotFoundError(f"no job named {name!r}", fix="list jobs with `gpufleet get jobs`")

    def iter_gpus(self) -> Iterator[tuple[Node, Gpu]]:
        for node in self.nodes:
            for gpu in node.gpus:
                yield node, gpu

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)
