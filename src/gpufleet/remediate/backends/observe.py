"""The backend of a control plane that only observes: it knows the nodes agents reported and carries out nothing.
Dry-run works against it (budgets count the nodes it would take out); acting needs a real backend."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.remediate.backends.base import DiagResult, NodeLocation, RemediationBackend, UnsupportedActionError

_FIX = "run the control plane with --backend slurm or --backend kubernetes to act on nodes"


class ObserveOnlyBackend(RemediationBackend):
    name = "none"

    def __init__(self, nodes: Callable[[], list[str]]) -> None:
        self._nodes = nodes

    def now(self) -> float:
        return time.time()

    def nodes(self) -> list[str]:
        return self._nodes()

    def placement(self) -> dict[str, NodeLocation]:
        return {}

    def unavailable(self) -> set[str]:
        return set()

    def node_ready(self, node: str) -> bool:
        return True

    def _refuse(self, what: str) -> UnsupportedActionError:
        return UnsupportedActionError(f"no backend to {what}", fix=_FIX)

    def cordon(self, node: str, reason: str) -> str:
        raise self._refuse(f"cordon {node}")

    def uncordon(self, node: str) -> str:
        raise self._refuse(f"uncordon {node}")

    def drain(self, node: str, reason: str) -> str:
        raise self._refuse(f"drain {node}")

    def reset_gpu(self, node: str, index: int) -> str:
        raise self._refuse(f"reset GPU {index} on {node}")

    def reboot_node(self, node: str, reason: str) -> str:
        raise self._refuse(f"reboot {node}")

    def run_diag(self, node: str, level: int) -> DiagResult:
        raise self._refuse(f"run diagnostics on {node}")

    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        raise self._refuse(f"cap power on {node}")

    def isolate_port(self, node: str, rail: int) -> str:
        raise self._refuse(f"isolate a port of {node}")

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        raise self._refuse(f"requeue {job}")
