"""The one interface every remediation backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from gpufleet.errors import BackendError


class UnsupportedActionError(BackendError):
    """The backend has no way to carry out this action (e.g. a GPU reset through the Slurm controller)."""


@dataclass(frozen=True, slots=True)
class NodeLocation:
    """Where a node sits, for per-rack and per-leaf budgets. Empty when the backend does not know."""

    rack: str = ""
    leaf: str = ""


@dataclass(frozen=True, slots=True)
class DiagResult:
    passed: bool
    detail: str


class RemediationBackend(ABC):
    name: str = ""

    @abstractmethod
    def now(self) -> float:
        """The cluster clock in seconds (twin time for the twin, wall time otherwise)."""

    @abstractmethod
    def nodes(self) -> list[str]: ...

    @abstractmethod
    def placement(self) -> dict[str, NodeLocation]: ...

    @abstractmethod
    def unavailable(self) -> set[str]:
        """Nodes out of service now: cordoned, drained, draining or rebooting."""

    @abstractmethod
    def node_ready(self, node: str) -> bool:
        """The node is up and answering (after a reboot)."""

    @abstractmethod
    def cordon(self, node: str, reason: str) -> str: ...

    @abstractmethod
    def uncordon(self, node: str) -> str: ...

    @abstractmethod
    def drain(self, node: str, reason: str) -> str: ...

    @abstractmethod
    def reset_gpu(self, node: str, index: int) -> str: ...

    @abstractmethod
    def reboot_node(self, node: str, reason: str) -> str: ...

    @abstractmethod
    def run_diag(self, node: str, level: int) -> DiagResult: ...

    @abstractmethod
    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        """Cap one GPU (or all of a node's GPUs when index is None) at `fraction` of its TDP."""

    @abstractmethod
    def isolate_port(self, node: str, rail: int) -> str: ...

    @abstractmethod
    def requeue_job(self, job: str, exclude: list[str]) -> str: ...

    def gpu_count(self, node: str) -> int:
        return 0

    def gpu_model(self, node: str) -> str:
        return ""

    def cost_per_gpu_hour(self, node: str) -> float | None:
        return None

    def gpu_serial(self, node: str, index: int) -> str | None:
        return None
