"""The remediation engine: incident -> runbook -> steps, each one through the safety checks, into a backend.

Three modes share one code path: `plan` decides and reports (writes nothing), `dry-run` also writes the decisions to
the audit log (and changes nothing else), `apply` carries the steps out. Every step is keyed by incident id + step
id: a step that finished never runs again, and a runbook that paused (waiting for a reboot, deferred by a rate limit,
refused by the breaker or the budget) continues where it stopped when it is applied again or `resume()` runs.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.catalog.vendors import get_vendor
from gpufleet.errors import BackendError, NotFoundError, UserError
from gpufleet.model.actions import NodeAction, NodeActionKind, Outcome
from gpufleet.model.incident import Incident, Severity
from gpufleet.model.observation import Entity, EntityKind
from gpufleet.remediate.backends.base import (
    CapsPower,
    Cordons,
    Drains,
    EvictsGpuWork,
    IsolatesFabricPorts,
    IsolatesPorts,
    RebootsNodes,
    RemediationBackend,
    RequeuesJobs,
    ResetsGpus,
    RunsDiagnostics,
    UnsupportedActionError,
)
from gpufleet.remediate.config import RemediationPolicy
from gpufleet.remediate.incident_io import incident_from_dict, incident_to_dict
from gpufleet.remediate.runbook import INFORMS_ONLY, TAKES_NODE_OUT, ActionKind, RunbookManifest, RunbookSet, Step
from gpufleet.remediate.safety import (
    breaker_lookback,
    breaker_verdict,
    budget_refusal,
    rate_limit_deferral,
    rate_limit_lookback,
)
from gpufleet.remediate.scope import drain_scope
from gpufleet.remediate.store import FINAL_OUTCOMES, UNCONFIRMED, BreakerState, RemediationStore, StepRecord
from gpufleet.remediate.tickets import Ticket, TicketSink
from gpufleet.state.node_actions import ActionRow

Mode = Literal["plan", "dry-run", "apply"]


@dataclass(slots=True)
class StepDecision:
    step: str
    action: str
    target: str
    decision: str  # done, passed, failed, skipped, would, waiting, refused, deferred, error, unsupported, done-earlier
    reason: str


@dataclass(slots=True)
class RunReport:
    incident: str
    cause: str
    runbook: str
    mode: str
    backend: str
    breaker: str  # closed, tripped, would-trip
    steps: list[StepDecision] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(s.decision in FINAL_OUTCOMES | {"done-earlier", "would"} for s in self.steps)


# What a person can do instead when the backend lacks the capability for an action.
INSTEAD: dict[ActionKind, str] = {
    ActionKind.cordon: "cordon it in the scheduler by hand",
    ActionKind.uncordon: "return it to service in the scheduler by hand",
    ActionKind.drain: "drain it in the scheduler by hand",
    ActionKind.reset_gpu: "reset it on the node with its vendor's tool (nvidia-smi -r -i N, amd-smi reset -G -g N, "
    "hl-smi -i BUS_ID -r) and resume the node, or reboot it",
    ActionKind.reboot_node: "reboot it through its BMC or a node-maintenance operator",
    ActionKind.diag: 'run "dcgmi diag -r N" on the node (on Kubernetes, in a privileged pod)',
    ActionKind.power_cap: "run nvidia-smi -pl on the node (or a node agent)",
    ActionKind.isolate_port: "isolate it in the fabric manager (UFM)",
    ActionKind.requeue_job: "requeue the job in its scheduler",
    ActionKind.restart_service: "restart it on the node (systemctl restart SERVICE)",
}

# Runbook actions a node's own agent can carry out (model/actions.py), when the backend cannot or the policy routes
# them there.
ON_NODE: dict[ActionKind, NodeActionKind] = {
    ActionKind.reset_gpu: NodeActionKind.reset_gpu,
    ActionKind.reboot_node: NodeActionKind.reboot_node,
    ActionKind.power_cap: NodeActionKind.power_cap,
    ActionKind.restart_service: NodeActionKind.restart_service,
    ActionKind.diag: NodeActionKind.diag,
}
# What a backend needs to do each of those itself.
_BACKEND_CAN: dict[ActionKind, type] = {
    ActionKind.reset_gpu: ResetsGpus,
    ActionKind.reboot_node: RebootsNodes,
    ActionKind.power_cap: CapsPower,
    ActionKind.diag: RunsDiagnostics,
}
MAX_AGENT_ATTEMPTS = 5  # a node action refused or expired is asked again this often, each under a new id
ACTOR_NAME = "remediation"
QUEUED = "queued"  # handed to the node's agent; the runbook waits for its result
ESCALATED = "escalated"  # a repeat recovery sent to RMA instead; the runbook ends there


class NodeAgents(Protocol):
    """The control plane's queue of node actions (control/node_actions.py)."""

    def serves(self, node: str, kind: NodeActionKind) -> str | None:
        """None if the node's agent can take `kind` now; otherwise why not."""

    def request(self, action: NodeAction, requested_by: str) -> ActionRow: ...

    def status(self, action_id: str) -> ActionRow | None: ...


class NodeCheck(Protocol):
    def __call__(self, node: str) -> str | None:
        """None when the node's GPUs and NVLinks are all back as its inventory has them; otherwise what is not."""


class FabricPorts(Protocol):
    def switch_port_for(self, entity: Entity) -> tuple[str, int, int | None] | None:
        """(switch, port, switch LID) that isolates the entity's port or cable, if the fabric shows one."""


class Remediator:
    def __init__(
        self,
        backend: RemediationBackend,
        store: RemediationStore,
        policy: RemediationPolicy | None = None,
        runbooks: RunbookSet | None = None,
        tickets: TicketSink | None = None,
        fabric: FabricPorts | None = None,
        port_isolation: IsolatesFabricPorts | None = None,
        node_agents: NodeAgents | None = None,
        node_check: NodeCheck | None = None,
    ) -> None:
        self.backend = backend
        self.node_agents = node_agents  # node-local actions through the nodes' own agents
        self.node_check = node_check  # the control plane's view of a node's GPUs and links, for return to service
        self.fabric = fabric  # which switch port isolates an incident's port or cable
        self.port_isolation = port_isolation  # when the backend cannot (the real tools, where allowed)
        self.store = store
        self.policy = policy or RemediationPolicy()
        self.runbooks = runbooks or RunbookSet.builtin()
        self.tickets = tickets

    # --- public --------------------------------------------------------------------------------------------------

    def plan(self, incident: Incident) -> RunReport:
        return self._run(incident, "plan")

    def apply(self, incident: Incident, *, dry_run: bool | None = None) -> RunReport:
        dry = self.policy.spec.dry_run if dry_run is None else dry_run
        return self._run(incident, "dry-run" if dry else "apply")

    def books(self, dry_run: bool | None = None) -> RemediationStore:
        """The books a run keeps: real action's, or dry-run's own (same checks, nothing touched)."""
        dry = self.policy.spec.dry_run if dry_run is None else dry_run
        return self.store.with_mode("dry-run") if dry else self.store.with_mode("on")

    def process(self, incidents: list[Incident]) -> list[RunReport]:
        """One turn of the main loop: apply every incident the detectors report (already-finished steps are not
        repeated, so passing the same open incidents every turn is safe), then continue other paused runbooks."""
        reports = [self.apply(incident) for incident in incidents]
        seen = {incident.id for incident in incidents}
        reports += self._resume(skip=seen)
        return reports

    def resume(self) -> list[RunReport]:
        """Continue every runbook that paused, in the order they were stored."""
        return self._resume(skip=set())

    def _resume(self, skip: set[str]) -> list[RunReport]:
        books = self.books()
        reports = []
        for incident_id in books.open_runs():
            if incident_id in skip:
                continue
            body = books.incident_body(incident_id)
            if body is not None:
                reports.append(self.apply(incident_from_dict(body, f"stored incident {incident_id}")))
        return reports

    def breaker_status(self, dry_run: bool | None = None) -> dict[str, object]:
        books = self.books(dry_run)
        state = books.breaker()
        spec = self.policy.spec.breaker
        now = self.backend.now()
        failures = books.failures(since=self._window_start(state, now))
        verdict = breaker_verdict(spec, failures, len(self.backend.nodes()), now)
        failing = sorted({node for node, t in failures if t >= now - spec.window})
        return {
            "books": books.mode,
            "state": "tripped" if state.tripped else "closed",
            "since": state.since,
            "reason": state.reason,
            "changed_by": state.changed_by,
            "failing_nodes_in_window": verdict.failing,
            "threshold": verdict.threshold,
            "window_s": spec.window,
            "failing_nodes": failing,
            "wave_failing_per_window": list(verdict.wave),  # the latest window first
            "wave_threshold": verdict.wave_threshold,
        }

    def reset_breaker(self, by: str | None = None, note: str = "", dry_run: bool | None = None) -> None:
        """A person closes the breaker. Failures before this moment no longer count toward the next trip."""
        who = by or getpass.getuser()
        now = self.backend.now()
        books = self.books(dry_run)
        books.set_breaker(False, now, note or "manual reset", who)
        books.audit(
            time=now, action="breaker-reset", target="cluster", decision="breaker-reset",
            reason=f"reset by {who}" + (f": {note}" if note else ""), dry_run=books.mode == "dry-run",
            backend=self.backend.name,
        )  # fmt: skip

    # --- the run -------------------------------------------------------------------------------------------------

    def _window_start(self, state: BreakerState, now: float) -> float:
        start = now - breaker_lookback(self.policy.spec.breaker)
        return max(start, state.since) if not state.tripped else start

    def _audit(self, mode: Mode, books: RemediationStore, incident: Incident, runbook: str, d: StepDecision) -> None:
        if mode == "plan":
            return
        books.audit(
            time=self.backend.now(), incident=incident.id, cause=incident.cause.value, runbook=runbook,
            step=d.step, action=d.action, target=d.target, decision=d.decision, reason=d.reason,
            dry_run=mode == "dry-run", backend=self.backend.name,
        )  # fmt: skip

    def _breaker(self, incident: Incident, mode: Mode, books: RemediationStore, runbook: str) -> str:
        state = books.breaker()
        now = self.backend.now()
        counts = incident.severity is Severity.critical and bool(incident.node)
        if counts and mode != "plan":  # first sighting only: a failure seen before a reset does not count after it
            books.record_failure(incident.id, incident.node, now)
        if state.tripped:
            return "tripped"
        failures = books.failures(since=self._window_start(state, now))
        if counts and mode == "plan":  # a plan records nothing: the failure it would record counts now
            failures.append((incident.node, now))
        verdict = breaker_verdict(self.policy.spec.breaker, failures, len(self.backend.nodes()), now)
        if not verdict.trip:
            return "closed"
        if mode == "plan":
            return "would-trip"
        books.set_breaker(True, now, verdict.reason, "automatic")
        decision = "would-trip" if mode == "dry-run" else "breaker-tripped"
        self._audit(
            mode, books, incident, runbook, StepDecision("-", "breaker-trip", "cluster", decision, verdict.reason)
        )
        return decision if mode == "dry-run" else "tripped"

    def _run(self, incident: Incident, mode: Mode) -> RunReport:
        runbook = self.runbooks.select(incident)
        books = self.books(mode == "dry-run") if mode != "plan" else self.books()
        if mode != "plan":
            books.save_incident(incident.id, incident_to_dict(incident))
        breaker = self._breaker(incident, mode, books, runbook.name)
        report = RunReport(incident.id, incident.cause.value, runbook.name, mode, self.backend.name, breaker)
        outcomes: dict[str, str] = {}
        node_coming_back = False  # plan/dry-run: an earlier step would reboot the node
        for step in runbook.spec.steps:
            rec = books.step(incident.id, step.id)
            if rec is not None and rec.outcome == ESCALATED:
                report.steps.append(StepDecision(step.id, step.action.value, rec.target, "done-earlier", rec.detail))
                break
            if rec is not None and rec.outcome == QUEUED and mode == "apply":
                d, stop = self._poll(incident, step, rec)
                outcomes[step.id] = d.decision
                report.steps.append(d)
                if (rec.outcome, rec.detail) != (d.decision, d.reason):
                    self._audit(mode, books, incident, runbook.name, d)
                    books.record_step(
                        StepRecord(incident.id, step.id, rec.action, rec.target, d.decision, self.backend.now(),
                                   d.reason)
                    )  # fmt: skip
                if stop:
                    break
                continue
            if rec is not None and rec.outcome in UNCONFIRMED and mode == "apply":
                # begun by a control plane that stopped before it saw the result (a leader that died): acting
                # again could do it twice, so a person finishes it
                d = StepDecision(
                    step.id,
                    step.action.value,
                    rec.target,
                    "interrupted",
                    f"{step.action.value} on {rec.target} was begun at {rec.time:.0f} and never confirmed; "
                    "check the target, finish by hand, then resolve the incident",
                )
                report.steps.append(d)
                if rec.outcome != "interrupted":
                    self._audit(mode, books, incident, runbook.name, d)
                    books.record_step(
                        StepRecord(incident.id, step.id, rec.action, rec.target, "interrupted", rec.time, d.reason)
                    )
                break
            if rec is not None and rec.outcome in books.final:
                outcomes[step.id] = rec.outcome
                report.steps.append(StepDecision(step.id, step.action.value, rec.target, "done-earlier", rec.detail))
                continue
            d, stop = self._decide(incident, runbook, step, mode, books, breaker, outcomes, node_coming_back)
            if d.decision == "would" and step.action is ActionKind.reboot_node:
                node_coming_back = True
            outcomes[step.id] = d.decision
            report.steps.append(d)
            if rec is None or (rec.outcome, rec.detail) != (d.decision, d.reason):  # a retry that changed nothing
                self._audit(mode, books, incident, runbook.name, d)  # is not written again
            if mode != "plan":
                books.record_step(
                    StepRecord(
                        incident.id, step.id, step.action.value, d.target, d.decision, self.backend.now(), d.reason
                    )
                )
            if stop:
                break
        return report

    def _target(self, incident: Incident, step: Step) -> str:
        e = incident.entity
        if step.action is ActionKind.requeue_job:
            return f"job/{e.name}"
        if step.action in (ActionKind.reset_gpu, ActionKind.power_cap) and e.kind is EntityKind.gpu:
            return f"gpu/{e.node}/{e.index}"
        if step.action is ActionKind.isolate_port:
            return str(e)
        if step.action in INFORMS_ONLY:
            return step.ticket_kind or "notice"
        return f"node/{e.node}" if e.node else str(e)

    def _guard(self, incident: Incident, step: Step, outcomes: dict[str, str]) -> tuple[str | None, str]:
        """(None, "") if the guard holds; ("skipped", why) if it is false; ("would", why) if it depends on a step
        that a plan has not run."""
        g = step.when
        if g.entity_kind and incident.entity.kind not in g.entity_kind:
            return "skipped", f"incident is on a {incident.entity.kind.value}, step needs {', '.join(g.entity_kind)}"
        if g.incident_action and incident.action.upper() not in {a.upper() for a in g.incident_action}:
            return (
                "skipped",
                f"announced action {incident.action or 'none'!r} is not one of {', '.join(g.incident_action)}",
            )
        for ref, want in ((g.step_passed, "passed"), (g.step_failed, "failed")):
            if ref is None:
                continue
            got = outcomes.get(ref)
            if got == "would":
                return "would", f"only if {ref} {want}"
            if got != want:
                return "skipped", f"{ref} {got or 'did not run'}; step runs only if it {want}"
        return None, ""

    def _decide(
        self,
        incident: Incident,
        runbook: RunbookManifest,
        step: Step,
        mode: Mode,
        books: RemediationStore,
        breaker: str,
        outcomes: dict[str, str],
        node_coming_back: bool,
    ) -> tuple[StepDecision, bool]:
        target = self._target(incident, step)

        def decided(decision: str, reason: str, stop: bool = False) -> tuple[StepDecision, bool]:
            return StepDecision(step.id, step.action.value, target, decision, reason), stop

        verdict, why = self._guard(incident, step, outcomes)
        if verdict == "skipped":
            return decided("skipped", why)
        conditional = why
        node = incident.node
        if step.when.node_ready:
            if node_coming_back:
                conditional = "after the node is back up" + (f", {conditional}" if conditional else "")
            elif node and not self.backend.node_ready(node):
                return decided("waiting", f"waiting for {node} to come back up", stop=True)
        changes = step.action not in INFORMS_ONLY
        if changes and breaker in ("tripped", "would-trip"):
            state = books.breaker()
            return decided(
                "refused",
                f"circuit breaker {breaker}: {state.reason or 'too many node failures'}; "
                "a person must run `gpufleet remediate breaker reset`",
                stop=True,
            )
        if step.action in TAKES_NODE_OUT and node:
            unavailable = self.backend.unavailable()
            if books.mode == "dry-run":
                unavailable |= books.taken_out()
            refusal = budget_refusal(
                self.policy.spec.budget,
                node,
                unavailable,
                self.backend.nodes(),
                self.backend.placement(),
            )
            if refusal:
                return decided("refused", refusal, stop=True)
        now = self.backend.now()
        limit = self.policy.spec.rate_limits.get(step.action)
        recent = books.action_times(step.action.value, since=now - rate_limit_lookback(limit))
        deferral = rate_limit_deferral(step.action.value, limit, recent, now)
        if deferral:
            return decided("deferred", deferral, stop=True)
        repeats = self._repeats(incident, step, books, now)
        if repeats is not None:
            if mode != "apply":
                return decided("would", f"file an RMA ticket instead: {repeats}")
            return decided(ESCALATED, self._escalate(incident, runbook, step, repeats), stop=True)
        via_agent = self._via_agent(incident, step)
        if mode != "apply":
            said = conditional or self._describe(incident, step)
            return decided("would", f"{said} (through {node}'s agent)" if via_agent else said)
        if via_agent:  # the queue is the durable intent: asking again finds the same action
            return decided(QUEUED, self._queue(incident, step, books, now), stop=True)
        # the intent is durable before the action starts: whoever takes over never repeats it unknowingly
        books.record_step(
            StepRecord(incident.id, step.id, step.action.value, target, "started", now, "begun; not yet confirmed")
        )
        try:
            outcome, detail = self._execute(incident, runbook, step)
        except UnsupportedActionError as exc:
            outcome, detail = "unsupported", str(exc)  # with what a person can do instead
        except BackendError as exc:
            outcome, detail = "error", exc.message
        except UserError as exc:  # a missing node or a bad value, reported by the backend
            outcome, detail = "error", exc.message
        if outcome in ("unsupported", "error"):
            if step.on_failure == "continue":
                return decided("failed", detail)
            return decided(outcome, detail, stop=True)
        return decided(outcome, detail)

    def _describe(self, incident: Incident, step: Step) -> str:
        if step.action is ActionKind.diag:
            return f"run diag level {step.level}"
        if step.action is ActionKind.power_cap:
            return f"cap power at {step.power_fraction or 1.0:.0%} of TDP"
        if step.action is ActionKind.ticket:
            return f"file a {step.ticket_kind} ticket (serial {incident.serial or 'from the inventory'})"
        if step.action is ActionKind.drain:  # which scope the drain takes, and why
            scope = drain_scope(incident, self.runbooks.select(incident))
            return f"drain {scope.describe(incident.node)}: {step.reason or incident.summary}"
        return f"{step.action.value}: {step.reason or incident.summary}"

    # --- node actions through the node's agent -------------------------------------------------------------------

    def _via_agent(self, incident: Incident, step: Step) -> bool:
        """The step goes to the node's agent: it is node-local, the backend cannot do it (or the policy routes
        node-local actions to agents), and the node's agent takes it."""
        kind = ON_NODE.get(step.action)
        if kind is None or self.node_agents is None or not incident.node:
            return False
        able = _BACKEND_CAN.get(step.action)
        if self.policy.spec.node_actions.route == "auto" and able is not None and isinstance(self.backend, able):
            return False
        return self.node_agents.serves(incident.node, kind) is None

    def _node_action(self, incident: Incident, step: Step, action_id: str, now: float) -> NodeAction:
        e = incident.entity
        gpu = e.index if e.kind is EntityKind.gpu else None
        return NodeAction(
            id=action_id,
            kind=ON_NODE[step.action],
            node=incident.node,
            deadline=now + self.policy.spec.node_actions.deadline.get(step.action, 1800.0),
            incident=incident.id,
            gpu=gpu if step.action is not ActionKind.reboot_node else None,
            fraction=step.power_fraction,
            level=step.level,
            service=step.service,
            reason=f"{incident.id}: {step.reason or incident.summary}",
        )

    def _last_attempt(self, base: str) -> tuple[str, ActionRow | None]:
        """The id of the step's latest node action (`base`, then `base#2`, ...) and its row."""
        if self.node_agents is None:
            return base, None
        found: tuple[str, ActionRow | None] = (base, None)
        for attempt in range(1, MAX_AGENT_ATTEMPTS + 1):
            action_id = base if attempt == 1 else f"{base}#{attempt}"
            row = self.node_agents.status(action_id)
            if row is None:
                break
            found = (action_id, row)
        return found

    def _queue(self, incident: Incident, step: Step, books: RemediationStore, now: float) -> str:
        """Queue the step's action for the node's agent; the step's detail starts with the action's id (how a
        later pass finds its result). An attempt that ended without acting (refused, expired) is followed by the
        next one under a new id."""
        assert self.node_agents is not None
        base = f"{incident.id}.{step.id}"
        action_id = base
        for attempt in range(2, MAX_AGENT_ATTEMPTS + 2):
            row = self.node_agents.status(action_id)
            if row is None or row.open:
                break
            action_id = f"{base}#{attempt}"
        else:  # the last attempt's result stands; a person takes it from here
            return f"{action_id}: not asked again after {MAX_AGENT_ATTEMPTS} attempts"
        action = self._node_action(incident, step, action_id, now)
        self.node_agents.request(action, ACTOR_NAME)
        return f"{action_id}: queued for {incident.node}'s agent: {action.describe()}"

    def _poll(self, incident: Incident, step: Step, rec: StepRecord) -> tuple[StepDecision, bool]:
        """A queued step's decision now: still waiting, or its result."""
        action_id, row = self._last_attempt(f"{incident.id}.{step.id}")

        def decided(decision: str, reason: str, stop: bool) -> tuple[StepDecision, bool]:
            return StepDecision(step.id, step.action.value, rec.target, decision, reason), stop

        if row is None:
            return decided("error", f"{action_id}: the control plane has no node action of that id", True)
        if row.open:
            return decided(QUEUED, rec.detail, True)
        result = row.result
        assert result is not None
        said = f"{action_id}: {result.detail}"
        if result.outcome is Outcome.passed or (result.outcome is Outcome.done and step.action is not ActionKind.diag):
            if step.action is ActionKind.diag and self.node_check is not None:
                missing = self.node_check(incident.node)
                if missing is not None:
                    return decided("failed", f"{said}; but {missing}", False)
            return decided("passed" if step.action is ActionKind.diag else "done", said, False)
        if result.outcome is Outcome.failed and step.action is ActionKind.diag:
            return decided("failed", said, False)
        if result.outcome is Outcome.interrupted:
            return decided("interrupted", f"{said}; check the node, finish by hand, then resolve the incident", True)
        if step.on_failure == "continue":
            return decided("failed", said, False)
        decision = "unsupported" if result.outcome is Outcome.unsupported else "error"
        return decided(decision, said, True)

    # --- recoveries that keep coming back ----------------------------------------------------------------------

    def _repeats(self, incident: Incident, step: Step, books: RemediationStore, now: float) -> str | None:
        """Why this reset or reboot goes to RMA instead (its target needed it `rma.after - 1` times already within
        the window), or None."""
        if step.action not in (ActionKind.reset_gpu, ActionKind.reboot_node):
            return None
        rma = self.policy.spec.rma
        target = self._target(incident, step)
        before = books.done_on(step.action.value, target, since=now - rma.window, other_than=incident.id)
        if len(before) + 1 < rma.after:
            return None
        days = rma.window / 86400.0
        return (
            f"{target} needs {step.action.value} a {_ordinal(len(before) + 1)} time in {days:g} days "
            f"(before: {', '.join(before)}); the policy sends it to RMA after {rma.after}"
        )

    def _escalate(self, incident: Incident, runbook: RunbookManifest, step: Step, why: str) -> str:
        ticket = Step(id=f"{step.id}-rma", action=ActionKind.ticket, ticket_kind="rma", reason=why)
        try:
            filed = self._file(incident, runbook, ticket)
        except BackendError as exc:
            return f"{why}; no RMA ticket filed: {exc.message}"
        return f"{why}; {filed}"

    def _execute(self, incident: Incident, runbook: RunbookManifest, step: Step) -> tuple[str, str]:
        b, e, node = self.backend, incident.entity, incident.node
        # the incident id first: the scheduler shows (and may shorten) the reason, and it is how a person finds out why
        reason = f"{incident.id}: {step.reason or incident.summary}"
        a = step.action
        if a is ActionKind.cordon and isinstance(b, Cordons):
            return "done", b.cordon(node, reason, incident.id)
        if a is ActionKind.uncordon and isinstance(b, Cordons):  # the node returns only if this incident held it last
            return "done", b.uncordon(node, incident.id)
        if a is ActionKind.drain:
            scope = drain_scope(incident, runbook)
            if scope.gpu is not None and isinstance(b, EvictsGpuWork):
                return "done", b.drain_gpu(node, scope.gpu, reason, self.policy.spec.eviction)
            if isinstance(b, Drains):
                detail = b.drain(node, reason, incident.id)
                return "done", detail if scope.gpu is None else f"{detail} (the backend drains only whole nodes)"
        if a is ActionKind.reboot_node and isinstance(b, RebootsNodes):
            return "done", b.reboot_node(node, reason)
        if a is ActionKind.reset_gpu and isinstance(b, ResetsGpus):
            if e.index is None:
                raise UserError(f"incident {incident.id} names no GPU index to reset")
            return "done", b.reset_gpu(node, e.index)
        if a is ActionKind.diag and isinstance(b, RunsDiagnostics):
            result = b.run_diag(node, step.level or 1)
            return ("passed" if result.passed else "failed"), result.detail
        if a is ActionKind.power_cap and isinstance(b, CapsPower):
            index = e.index if e.kind is EntityKind.gpu else None
            return "done", b.set_power_limit(node, index, step.power_fraction or 1.0)
        if a is ActionKind.isolate_port:
            isolation = b if isinstance(b, IsolatesFabricPorts) else self.port_isolation
            target = self.fabric.switch_port_for(e) if self.fabric is not None else None
            if isolation is not None and target is not None:
                switch, port, lid = target
                return "done", isolation.set_switch_port(switch, port, lid, enable=False)
            if isinstance(b, IsolatesPorts) and e.kind is EntityKind.port and e.node:
                return "done", b.isolate_port(node, _rail_of(incident))
        if a is ActionKind.requeue_job and isinstance(b, RequeuesJobs):
            exclude = [node] if node else []
            return "done", b.requeue_job(e.name, exclude)
        if a in INSTEAD:  # the backend has no capability for it
            fix = _reset_hint(b.gpu_model(node), e.index) if a is ActionKind.reset_gpu else None
            agent = ON_NODE.get(a)
            if agent is not None and self.node_agents is not None and node:
                fix = f"{self.node_agents.serves(node, agent)}; or {fix or INSTEAD[a]}"
            raise b.cannot(_action_text(a, incident), node or e.name, fix or INSTEAD[a])
        return "done", self._file(incident, runbook, step)

    def _file(self, incident: Incident, runbook: RunbookManifest, step: Step) -> str:
        if self.tickets is None:
            raise BackendError("no ticket sink configured", fix="set spec.tickets.directory or spec.tickets.webhook")
        e = incident.entity
        gpu = e.index if e.kind is EntityKind.gpu else None
        serial = incident.serial
        if serial is None and gpu is not None:
            serial = self.backend.gpu_serial(incident.node, gpu)
        done = [
            f"{r.step}: {r.detail}"
            for s in runbook.spec.steps
            if (r := self.store.step(incident.id, s.id)) is not None and r.outcome in ("done", "passed", "failed")
        ]
        ticket = Ticket(
            id=f"{incident.id}.{step.id}",
            kind=step.ticket_kind or "notice",
            created=self.backend.now(),
            incident=incident.id,
            cause=incident.cause.value,
            severity=incident.severity.value,
            node=incident.node,
            gpu=gpu,
            serial=serial,
            xid=incident.xid,
            summary=incident.summary,
            message=self._notice(incident)
            if step.action is ActionKind.notify
            else "\n".join(filter(None, (runbook.spec.description, step.reason))),
            evidence=[f"{v.source}@{v.time:g}: {v.text}" for v in incident.evidence],
            effects=list(incident.effects),
            actions_taken=done,
        )
        return f"{ticket.kind} ticket {ticket.id} -> {self.tickets.file(ticket)}"

    def _notice(self, incident: Incident) -> str:
        """The notice text; for idle GPUs, what they cost per hour."""
        from gpufleet.model.incident import RootCause

        if incident.cause is not RootCause.idle_gpu:
            return incident.summary
        node = incident.node
        gpus = 1 if incident.entity.kind is EntityKind.gpu else self.backend.gpu_count(node)
        rate = self.policy.spec.cost_per_gpu_hour.get(self.backend.gpu_model(node))
        if rate is None:
            rate = self.backend.cost_per_gpu_hour(node)
        if rate is None:
            return (
                f"{gpus} idle GPU(s) on {node}; cost unknown (set costPerGpuHour for {self.backend.gpu_model(node)!r})"
            )
        return f"{gpus} idle GPU(s) on {node} cost ${gpus * rate:,.2f}/h (${rate:,.2f} per GPU-hour)"


# How each vendor's management tool resets one GPU (catalog.vendors names the tool; the arguments are the tool's own)
RESET_COMMANDS = {
    "nvidia-smi": "nvidia-smi -r -i {index}",
    "amd-smi": "amd-smi reset -G -g {index}",
    "hl-smi": "hl-smi -i <bus id of device {index}> -r",
}


def _reset_hint(gpu_model: str, index: int | None) -> str | None:
    """How to reset GPU `index` by hand with the node's vendor tool (amd-smi reset -G -g 3, ...), when the backend
    names a model the catalog knows; None otherwise (the vendor-neutral hint applies)."""
    try:
        smi = get_vendor(get_gpu_model(gpu_model).vendor).smi if gpu_model else ""
    except NotFoundError:
        return None
    command = RESET_COMMANDS.get(smi)
    if command is None:
        return None
    which = command.format(index="N" if index is None else index)
    return f"reset it on the node ({which}) and resume the node, or reboot it"


def _action_text(action: ActionKind, incident: Incident) -> str:
    """An action as a person says it: "reset GPU 3", "isolate port mlx5_6"."""
    e = incident.entity
    if action is ActionKind.reset_gpu and e.index is not None:
        return f"reset GPU {e.index}"
    if action is ActionKind.isolate_port:
        return f"isolate port {e.name or f'mlx5_{e.index}'}"
    if action is ActionKind.requeue_job:
        return f"requeue {e.name}"
    spoken = {
        ActionKind.diag: "run diagnostics",
        ActionKind.power_cap: "cap GPU power",
        ActionKind.reboot_node: "reboot",
        ActionKind.reset_gpu: "reset a GPU",
    }
    return spoken.get(action, action.value)


def _ordinal(n: int) -> str:
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(n, f"{n}th")


def _rail_of(incident: Incident) -> int:
    """The rail of an HCA port: its device's number (a port entity's index is the port number on the HCA)."""
    e = incident.entity
    if e.name.startswith("mlx5_") and e.name[5:].isdigit():
        return int(e.name[5:])
    if e.index is not None:
        return e.index
    raise UserError(f"incident {incident.id} names no port (entity {e})", fix="give the port as index or mlx5_N name")
