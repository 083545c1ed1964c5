"""What a fault changes: the twin as the fault handlers see it (`inject` and `vendor_faults` both act on it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from gpufleet.model import Cluster, TrainingJob
from gpufleet.sim.fabric_state import PortArrays
from gpufleet.sim.gpu_state import GpuArrays
from gpufleet.sim.serving import ServiceState
from gpufleet.sim.workloads import TrainingSet


class FaultTarget(Protocol):
    """What a fault changes: the twin's state arrays and the public methods that keep them consistent."""

    cluster: Cluster
    gpus: GpuArrays
    ports: PortArrays
    training: TrainingSet
    services: list[ServiceState]
    idle_override: np.ndarray

    def gpu(self, node: str, index: int) -> int: ...
    def port_of(self, node: str, rail: int) -> int: ...
    def boot_seconds(self, node: str) -> float: ...
    def write_kernel(self, node: str, lines: list[str], gpu: int | None = None, **attrs: object) -> None: ...
    def emit_xid(self, i: int, code: int) -> None: ...
    def lose_gpu(self, i: int, *, thermal: bool = False) -> None: ...
    def set_link(self, port: int, node: str, rail: int, *, up: bool) -> None: ...
    def add_flap(self, node: str, rail: int, until: float) -> None: ...
    def at(self, when: float, fn: Callable[[], None]) -> None: ...
    def stop_job(self, job: TrainingJob, reason: str, *, restart: bool = True) -> None: ...
