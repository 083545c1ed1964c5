"""The backend of a control plane that only observes: it knows the nodes agents reported and carries out nothing.
Dry-run works against it (budgets count the nodes it would take out); acting needs a real backend."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.remediate.backends.base import NodeLocation, RemediationBackend, UnsupportedActionError

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

    def cannot(self, action: str, node: str, fix: str) -> UnsupportedActionError:
        return UnsupportedActionError(f"no backend to {action} on {node}", fix=_FIX)
