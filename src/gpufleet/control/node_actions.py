"""Node actions through the one door: the control plane queues them per node, the node's agent pulls them in the
acknowledgement of its own push and reports each result in a later push.

What is checked before an action is handed out, and refused with why when it fails:
- the push comes from that node's own agent: an agent token bound to the node (`gpufleet token create --role agent
  --node NODE`), or the control plane's own in-process twin. A shared agent token can push observations for many
  nodes; it cannot be trusted to run a GPU reset on the right one;
- the agent carries out actions of that kind: it lists them in every push (`Batch.can`); an agent that predates node
  actions lists nothing and is given none;
- the deadline has not passed.

The node's own preconditions (no pod holds the GPU, per the kubelet's pod-resources view) are the agent's to check:
only it sees them at the moment it acts. Every change of an action's state is audited.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.locks import ordered_lock
from gpufleet.model.actions import ActionResult, NodeAction, NodeActionKind, Outcome
from gpufleet.model.observe import Batch
from gpufleet.state import Database
from gpufleet.state.audit import AuditLog
from gpufleet.state.node_actions import ActionRow, NodeActionTable
from gpufleet.state.tokens import Role, Token

REFRESH_S = 2.0  # how often the nodes with waiting actions are read back (another replica may have queued some)
SEEN_FOR_S = 300.0  # an agent heard from this recently is taken to be there
REMEDIATION = "remediation"  # the engine's name in the audit log


class NodeActionQueue:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time, backend: str = "") -> None:
        self.table = NodeActionTable(db)
        self.audit_log = AuditLog(db)
        self.clock = clock
        self.backend = backend
        self.lock = ordered_lock("node-actions")
        self._agents: dict[str, tuple[frozenset[NodeActionKind] | None, float]] = {}  # node -> (kinds, heard)
        self._waiting: set[str] = self.table.has_open()
        self._read_at = time.monotonic()
        self.on_result: list[Callable[[ActionRow], None]] = []  # told of every action that finished

    # --- asking ----------------------------------------------------------------------------------------------------

    def request(self, action: NodeAction, requested_by: str) -> ActionRow:
        """Queue `action` (or find it queued under its id already) and return its row."""
        before = self.table.get(action.id)
        if before is not None:
            return before
        row = self.table.add(action, requested_by, self.clock())
        with self.lock:
            self._waiting.add(action.node)
        if requested_by != REMEDIATION:  # the runbook's own step entry says it queued the action
            self._audit(row.action, requested_by, "queued", action.reason or action.describe())
        return row

    def status(self, action_id: str) -> ActionRow | None:
        return self.table.get(action_id)

    def serves(self, node: str, kind: NodeActionKind) -> str | None:
        """None if the node's agent was heard from lately and carries out `kind`; otherwise why not."""
        with self.lock:
            seen = self._agents.get(node)
        if seen is None or self.clock() - seen[1] > SEEN_FOR_S:
            return f"no agent on {node} has pushed to the control plane in the last {SEEN_FOR_S:.0f} s"
        kinds = seen[0]
        if kinds is None:
            return f"the agent on {node} predates node actions; upgrade it"
        if kind not in kinds:
            offered = ", ".join(sorted(kinds)) or "none"
            return f"the agent on {node} does not carry out {kind} (it carries out: {offered}); see its --action flags"
        return None

    # --- the door --------------------------------------------------------------------------------------------------

    def heard(self, node: str, can: list[NodeActionKind] | None, now: float) -> None:
        """A node's agent pushed, here or (through the feed) to another replica: what it carries out."""
        with self.lock:
            self._agents[node] = (frozenset(can) if can is not None else None, now)

    def exchange(self, batch: Batch, pusher: Token | None) -> tuple[list[str], list[NodeAction]]:
        """During ingest: take the batch's results; return their ids (the agent forgets them) and the actions to
        hand this node's agent now."""
        now = self.clock()
        node = batch.node
        self.heard(node, batch.can, now)
        taken = []
        for result in batch.results:
            self._finish(result, f"agent/{node}", now)
            taken.append(result.id)
        if not self._has_waiting(node):
            return taken, []
        handed = []
        for row in self.table.open_for(node):
            why = self._refusal(row.action, batch, pusher, now)
            if why is not None:
                outcome, detail = why
                self._finish(ActionResult(row.action.id, outcome, detail, now, now), "control-plane", now)
                continue
            handed.append(row.action)
        self.table.dispatched([a.id for a in handed], now)
        if not handed:
            with self.lock:
                self._waiting.discard(node)
        return taken, handed

    def _has_waiting(self, node: str) -> bool:
        with self.lock:
            stale = time.monotonic() - self._read_at >= REFRESH_S
        if stale:
            # read outside our lock: an ingest holds the database's lock and then takes ours (heard), so holding
            # ours while waiting for the database's would deadlock the two
            open_nodes = self.table.has_open()
            with self.lock:
                self._waiting |= open_nodes
                self._read_at = time.monotonic()
        with self.lock:
            return node in self._waiting

    def _refusal(
        self, action: NodeAction, batch: Batch, pusher: Token | None, now: float
    ) -> tuple[Outcome, str] | None:
        if now > action.deadline:
            return Outcome.expired, f"not begun by its deadline ({now - action.deadline:.0f} s ago)"
        if pusher is not None and (pusher.role is not Role.agent or pusher.node != batch.node):
            bound = f"bound to {pusher.node}" if pusher.node else "not bound to a node"
            return (
                Outcome.refused,
                f"{batch.node}'s agent pushes with the {pusher.role.value} token {pusher.name!r} ({bound}): node "
                f"actions go only to an agent whose token is bound to its node; give it one with `gpufleet token "
                f"create --role agent --node {batch.node}`",
            )
        if batch.can is None:
            return Outcome.unsupported, f"the agent on {batch.node} predates node actions; upgrade it"
        if action.kind not in batch.can:
            offered = ", ".join(sorted(batch.can)) or "none"
            return (
                Outcome.unsupported,
                f"the agent on {batch.node} does not carry out {action.kind} (it carries out: {offered})",
            )
        return None

    def _finish(self, result: ActionResult, actor: str, now: float) -> None:
        if not self.table.finish(result, now):
            return  # a copy sent again, or an id this control plane never queued
        row = self.table.get(result.id)
        if row is None:
            return
        self._audit(row.action, actor, result.outcome.value, result.detail)
        for listener in list(self.on_result):
            listener(row)

    def _audit(self, action: NodeAction, actor: str, decision: str, reason: str) -> None:
        target = f"gpu/{action.node}/{action.gpu}" if action.gpu is not None else f"node/{action.node}"
        self.audit_log.append(
            time_=self.clock(), actor=actor, action=f"agent-{action.kind}", target=target, decision=decision,
            reason=reason, incident=action.incident or None, step=action.id, backend=self.backend or None,
        )  # fmt: skip


def action_row(row: ActionRow) -> dict[str, object]:
    """A node action as the API lists it."""
    a, r = row.action, row.result
    return {
        "id": a.id, "node": a.node, "kind": a.kind.value, "gpu": a.gpu, "incident": a.incident, "reason": a.reason,
        "requested_by": row.requested_by, "created": row.created, "deadline": a.deadline, "state": row.state,
        "dispatched": row.dispatched, "finished": row.finished, "detail": r.detail if r else "",
        "output": r.output if r else "",
    }  # fmt: skip
