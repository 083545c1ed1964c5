"""The twin's node agents carry out node actions (model/actions.py) on their simulated node, as a real agent does on
its own: the same preconditions (no workload holds the GPU), each action once by id, its result with the next push.

They act through the twin's remediation backend, so each action is journaled and replayed after a restart as the
control plane's own are. A reboot is done when the node is back, as a real agent reports it after it restarts.
"""

from __future__ import annotations

from gpufleet.errors import GpufleetError
from gpufleet.model.actions import ActionResult, NodeAction, NodeActionKind, Outcome
from gpufleet.sim.backend import TwinBackend

CAN = [
    NodeActionKind.reset_gpu,
    NodeActionKind.reboot_node,
    NodeActionKind.power_cap,
    NodeActionKind.restart_service,
    NodeActionKind.diag,
]


class TwinNodeActions:
    def __init__(self, backend: TwinBackend) -> None:
        self.backend = backend
        self.seen: set[str] = set()  # ids begun (at most once each)
        self.results: dict[str, dict[str, ActionResult]] = {}  # node -> id -> result not yet acknowledged
        self.rebooting: dict[str, tuple[NodeAction, float]] = {}  # reboots asked for, until the node is back
        self.offered: list[tuple[NodeAction, dict[int, str]]] = []  # handed over, not yet carried out

    def pending(self, node: str) -> list[ActionResult]:
        self.backend_done()
        return list(self.results.get(node, {}).values())

    def acknowledged(self, node: str, ids: list[str]) -> None:
        mine = self.results.get(node)
        if mine:
            for action_id in ids:
                mine.pop(action_id, None)

    def backend_done(self) -> None:
        """Reboots whose node is back are done."""
        for action_id, (action, started) in list(self.rebooting.items()):
            if self.backend.node_ready(action.node):
                del self.rebooting[action_id]
                self._put(action, Outcome.done, f"{action.node} rebooted", started)

    def offer(self, node: str, actions: list[NodeAction], held: dict[int, str]) -> None:
        """The actions in a node's acknowledgement; carried out at the twin's next moment (`run_offered`, under
        the twin's lock), as an agent acts after its push, not inside it."""
        for action in actions:
            if action.node != node or action.id in self.seen:
                continue
            self.seen.add(action.id)
            self.offered.append((action, held))

    def run_offered(self) -> None:
        offered, self.offered = self.offered, []
        for action, held in offered:
            self._carry_out(action, held)

    def _put(self, action: NodeAction, outcome: Outcome, detail: str, started: float) -> None:
        now = self.backend.now()
        self.results.setdefault(action.node, {})[action.id] = ActionResult(action.id, outcome, detail, started, now)

    def _carry_out(self, action: NodeAction, held: dict[int, str]) -> None:
        now = self.backend.now()
        if now > action.deadline:
            self._put(action, Outcome.expired, f"not begun by its deadline ({now - action.deadline:.0f} s ago)", now)
            return
        b = self.backend
        if action.kind in (NodeActionKind.reset_gpu, NodeActionKind.diag) and action.gpu is not None:
            pod = held.get(action.gpu)
            if pod:
                self._put(action, Outcome.refused, f"GPU {action.gpu} is held by {pod}; nothing was done", now)
                return
        if action.kind is NodeActionKind.reboot_node and any(held.values()):
            pods = ", ".join(sorted({p for p in held.values() if p}))
            self._put(action, Outcome.refused, f"workloads still hold GPUs ({pods}); nothing was done", now)
            return
        try:
            if action.kind is NodeActionKind.reset_gpu and action.gpu is not None:
                self._put(action, Outcome.done, b.reset_gpu(action.node, action.gpu), now)
            elif action.kind is NodeActionKind.reboot_node:
                b.reboot_node(action.node, action.reason)
                self.rebooting[action.id] = (action, now)
            elif action.kind is NodeActionKind.power_cap:
                self._put(action, Outcome.done, b.set_power_limit(action.node, action.gpu, action.fraction or 1.0), now)
            elif action.kind is NodeActionKind.diag:
                result = b.run_diag(action.node, action.level or 1)
                self._put(action, Outcome.passed if result.passed else Outcome.failed, result.detail, now)
            elif action.kind is NodeActionKind.restart_service:
                self._put(action, Outcome.done, f"{action.service} restarted on {action.node} (simulated)", now)
            else:
                self._put(action, Outcome.unsupported, f"the twin's agent cannot {action.describe()}", now)
        except GpufleetError as exc:
            self._put(action, Outcome.failed, exc.message, now)
