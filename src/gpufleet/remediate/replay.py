"""Rehearse a remediation policy: replay what the control plane recorded (its incidents, the node events, people's
node actions and breaker resets, from the state database) through the real engine under a candidate policy.

Everything runs in event time. The replay backend's clock is the recorded moment; its nodes go out of service when
a replayed step cordons, drains or reboots them and come back when a replayed runbook returns them (a reboot lasts
as long as the recorded run saw it last on that node at that moment, else `reboot_s`). What a backend cannot know
without acting (whether diag passes, whether a GPU reset fails) is taken from the recorded run when it carried out
the same step for the same incident; otherwise the action succeeds and diag passes.

The schedule is the control plane's (gpufleet.control.remediation.RemediationDriver): a new incident goes to the
engine once, at the moment the recorded run took it up (its first sighting when nothing was recorded), and every
`resume_every_s` the paused runbooks are tried again unless the breaker is tripped. The books are a private SQLite
database in memory, so a replay changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpufleet.errors import BackendError, UserError
from gpufleet.model.incident import Incident
from gpufleet.model.observe import NodeInventory
from gpufleet.remediate.backends.base import (
    CapsPower,
    Cordons,
    DiagResult,
    Drains,
    IsolatesPorts,
    NodeLocation,
    RebootsNodes,
    RemediationBackend,
    RequeuesJobs,
    ResetsGpus,
    RunsDiagnostics,
    UnsupportedActionError,
)
from gpufleet.remediate.config import RemediationPolicy
from gpufleet.remediate.engine import Remediator
from gpufleet.remediate.incident_io import incident_from_dict
from gpufleet.remediate.runbook import ActionKind, RunbookManifest, RunbookSet
from gpufleet.remediate.safety import rate_limit_lookback
from gpufleet.remediate.store import ACTOR, RemediationStore, StoreMode
from gpufleet.remediate.tickets import Ticket, TicketSink
from gpufleet.spec.base import format_duration
from gpufleet.state import AuditEntry, AuditLog, Database

REBOOT_S = 300.0  # how long a node is away after a reboot nobody recorded (a DGX takes five to ten minutes)
GPU_RESET_S = 60.0  # how long a reset GPU is out of service (its work is stopped and restarted)
RESUME_EVERY_S = 30.0  # the control plane's pass over paused runbooks (RemediationDriver)
DEFAULT_GPUS_PER_NODE = 8  # a node no inventory describes
CARRIED_OUT = frozenset({"done", "passed", "failed"})
PEOPLE_NODE_ACTIONS = frozenset({"cordon", "uncordon", "drain"})
# A dry run's decisions, read as what acting would have done
AS_ACTED = {"would": "done", "would-trip": "breaker-tripped"}

_inventory = msgspec.json.Decoder(NodeInventory)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    gpus: int
    rack: str = ""
    described: bool = True  # an inventory said how many GPUs it has


@dataclass(slots=True)
class Recording:
    """What the state database holds for the window [start, end]."""

    start: float
    end: float
    incidents: list[dict[str, Any]]  # bodies, by first sighting
    node_event_times: list[float]  # the nodes' own events (kernel, link, BMC, findings), in time order
    audit: list[AuditEntry]  # the window's audit log, oldest first
    nodes: dict[str, NodeFacts]

    @property
    def events(self) -> int:
        return len(self.incidents) + len(self.node_event_times)

    def remediation(self) -> tuple[list[AuditEntry], str]:
        """The recorded remediation run: its decisions (a dry run's read as acting) and its mode, "on", "dry-run" or
        "" when remediation decided nothing in the window."""
        ours = [e for e in self.audit if e.actor == ACTOR and e.action != "breaker-reset"]
        acted = [e for e in ours if not e.dry_run]
        if acted:
            return acted, "on"
        dry = [e for e in ours if e.dry_run]
        if dry:
            return [_as_acted(e) for e in dry], "dry-run"
        return [], ""


def _as_acted(e: AuditEntry) -> AuditEntry:
    d = e.as_dict()
    d["decision"] = AS_ACTED.get(e.decision, e.decision)
    d["dry_run"] = False
    return AuditEntry(**d)


def load_recording(db: Database, since_s: float, until: float | None = None) -> Recording:
    """The incidents, node events and audit log of the last `since_s` seconds before `until` (default: the newest
    thing recorded), and every node the inventories or incidents name."""
    if until is None:
        newest = [
            db.one("SELECT MAX(time) FROM events"),
            db.one("SELECT MAX(last_seen) FROM incidents"),
            db.one("SELECT MAX(time) FROM audit"),
        ]
        times = [float(r[0]) for r in newest if r is not None and r[0] is not None]
        if not times:
            raise UserError(
                "the state database holds no incidents, node events or audit log to replay",
                fix="point --state at the data directory of a control plane that has run (gpufleet up or "
                "gpufleet server), or let it record some events first",
            )
        until = max(times)
    start = until - since_s
    rows = db.query(
        "SELECT body, state FROM incidents WHERE first_seen >= ? AND first_seen <= ? ORDER BY first_seen, id",
        (start, until),
    )
    incidents = [{**json.loads(r[0]), "state": r[1]} for r in rows]
    event_rows = db.query(
        "SELECT time FROM events WHERE agent != 'control' AND time >= ? AND time <= ? ORDER BY time", (start, until)
    )
    audit = [e for e in AuditLog(db).entries() if start <= e.time <= until]
    nodes: dict[str, NodeFacts] = {}
    for node, body in db.query("SELECT node, body FROM inventory ORDER BY node"):
        try:
            inv = _inventory.decode(body)
        except msgspec.ValidationError:
            continue  # written by a gpufleet that describes nodes differently
        nodes[str(node)] = NodeFacts(len(inv.gpus) or DEFAULT_GPUS_PER_NODE, inv.labels.get("rack", ""), bool(inv.gpus))
    for body in incidents:
        node = (body.get("entity") or {}).get("node") or ""
        if node and node not in nodes:
            nodes[node] = NodeFacts(DEFAULT_GPUS_PER_NODE, described=False)
    return Recording(start, until, incidents, [float(r[0]) for r in event_rows], audit, nodes)


# --- what the recorded run tells the replay ---------------------------------------------------------------------


@dataclass(slots=True)
class Recorded:
    """What the recorded run learned by acting: step results, when rebooted nodes came back, when it took each
    incident up, and the phase of its passes over paused runbooks."""

    outcomes: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (incident, step|action)
    returns: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # node -> [(rebooted, back)]
    taken_up: dict[str, float] = field(default_factory=dict)  # incident -> first decision
    pass_phase: float | None = None

    @classmethod
    def of(cls, entries: list[AuditEntry], every_s: float) -> Recorded:
        rec = cls()
        by_incident: dict[str, list[AuditEntry]] = {}
        for e in entries:
            if e.incident:
                by_incident.setdefault(e.incident, []).append(e)
        for incident, rows in by_incident.items():
            rec.taken_up[incident] = rows[0].time
            for e in rows:
                if e.decision in ("done", "passed", "failed", "error", "unsupported") and e.step not in ("", "-"):
                    rec.outcomes.setdefault((incident, e.step), (e.decision, e.reason))
                    rec.outcomes.setdefault((incident, e.action), (e.decision, e.reason))
                if e.time > rows[0].time and rec.pass_phase is None:
                    rec.pass_phase = math.fmod(e.time, every_s)  # a later decision came from a pass
                if e.action == "reboot-node" and e.decision == "done":
                    # back at the first later decision that did not wait for it
                    back = next((a.time for a in rows if a.time > e.time and a.decision != "waiting"), None)
                    if back is not None:
                        rec.returns.setdefault(_node_of(e.target), []).append((e.time, back))
        return rec

    def reboot_until(self, node: str, when: float, reboot_s: float, tolerance: float) -> float:
        for rebooted, back in self.returns.get(node, ()):
            if abs(rebooted - when) <= tolerance:
                return back
        return when + reboot_s


def _node_of(target: str) -> str:
    parts = target.split("/")
    return parts[1] if len(parts) > 1 and parts[0] in ("node", "gpu", "port") else target


# --- the backend the replay acts through ------------------------------------------------------------------------


class ReplayBackend(
    RemediationBackend,
    Cordons,
    Drains,
    ResetsGpus,
    RebootsNodes,
    RunsDiagnostics,
    CapsPower,
    IsolatesPorts,
    RequeuesJobs,
):
    """A cluster in event time: its clock is set by the replay, its nodes' state follows the replayed actions."""

    name = "replay"

    def __init__(self, nodes: dict[str, NodeFacts], recorded: Recorded, reboot_s: float, tolerance: float) -> None:
        self.facts = nodes
        self.recorded = recorded
        self.reboot_s = reboot_s
        self.tolerance = tolerance
        self.clock = 0.0
        self.incident = ""  # the incident whose runbook is running (for the recorded results)
        self.cordoned: set[str] = set()
        self.holders: dict[str, set[str]] = {}  # node -> the incidents whose cordon keeps it out
        self.rebooting: dict[str, float] = {}  # node -> back at
        self._names = sorted(nodes)
        self._placement = {n: NodeLocation(rack=f.rack) for n, f in nodes.items()}

    def now(self) -> float:
        return self.clock

    def nodes(self) -> list[str]:
        return self._names

    def placement(self) -> dict[str, NodeLocation]:
        return self._placement

    def unavailable(self) -> set[str]:
        back = self.rebooting
        if back:
            for node in [n for n, t in back.items() if self.clock >= t]:
                del back[node]
        return self.cordoned | set(back)

    def node_ready(self, node: str) -> bool:
        return self.clock >= self.rebooting.get(node, 0.0)

    def gpu_count(self, node: str) -> int:
        facts = self.facts.get(node)
        return facts.gpus if facts is not None else DEFAULT_GPUS_PER_NODE

    def _result(self, action: str, default: str) -> str:
        """The recorded result of this action for the incident at hand: its detail, or its error raised again."""
        outcome, detail = self.recorded.outcomes.get((self.incident, action), ("done", default))
        if outcome == "unsupported":
            raise UnsupportedActionError(detail)
        if outcome == "error" or (outcome == "failed" and action != "diag"):
            raise BackendError(detail)
        return detail

    # Whose cordon a node's is, as every backend keeps it: an incident's cordon joins the node's holders unless
    # someone else's cordon is in place (then it is left alone), the node returns when its last holder returns it,
    # and a person's uncordon returns it whoever holds it.

    def _take_out(self, node: str, incident: str | None) -> None:
        holders = self.holders.get(node)
        if incident is None:
            self.cordoned.add(node)
        elif node not in self.cordoned:
            self.cordoned.add(node)
            self.holders[node] = {incident}
        elif holders is not None:
            holders.add(incident)  # a foreign cordon (no holders) is left as it is

    def cordon(self, node: str, reason: str, incident: str | None = None) -> str:
        detail = self._result("cordon", f"node {node} cordoned")
        self._take_out(node, incident)
        return detail

    def uncordon(self, node: str, incident: str | None = None) -> str:
        detail = self._result("uncordon", f"node {node} uncordoned")
        holders = self.holders.get(node)
        if incident is None or (holders is not None and holders <= {incident}):
            self.cordoned.discard(node)
            self.holders.pop(node, None)
        elif holders is not None:
            holders.discard(incident)
        return detail

    def drain(self, node: str, reason: str, incident: str | None = None) -> str:
        detail = self._result("drain", f"node {node} drained")
        self._take_out(node, incident)
        return detail

    def reboot_node(self, node: str, reason: str) -> str:
        detail = self._result("reboot-node", f"node {node} rebooting")
        self.rebooting[node] = self.recorded.reboot_until(node, self.clock, self.reboot_s, self.tolerance)
        return detail

    def reset_gpu(self, node: str, index: int) -> str:
        return self._result("reset-gpu", f"GPU {index} on {node} reset")

    def run_diag(self, node: str, level: int) -> DiagResult:
        outcome, detail = self.recorded.outcomes.get((self.incident, "diag"), ("passed", f"diag r{level} passed"))
        if outcome in ("error", "unsupported"):
            raise BackendError(detail)
        return DiagResult(outcome != "failed", detail)

    def set_power_limit(self, node: str, index: int | None, fraction: float) -> str:
        return self._result("power-cap", f"power capped at {fraction:.0%} on {node}")

    def isolate_port(self, node: str, rail: int) -> str:
        return self._result("isolate-port", f"rail {rail} of {node} isolated")

    def requeue_job(self, job: str, exclude: list[str]) -> str:
        return self._result("requeue-job", f"job {job} requeued")

    def person(self, entry: AuditEntry) -> None:
        """A node action a person took, at its recorded moment."""
        node = _node_of(entry.target)
        if entry.action == "uncordon":
            self.uncordon(node)
        else:
            self._take_out(node, None)


class ReplayTickets(TicketSink):
    """Tickets go nowhere; a ticket the recorded run could not file fails the same way here."""

    def __init__(self, recorded: Recorded) -> None:
        self.recorded = recorded

    def file(self, ticket: Ticket) -> str:
        incident, _, step = ticket.id.rpartition(".")
        outcome, detail = self.recorded.outcomes.get((incident, step), ("done", ""))
        if outcome in ("error", "unsupported", "failed"):
            raise BackendError(detail)
        return detail or f"{ticket.kind} ticket {ticket.id} (not filed: replay)"


# --- the replay -------------------------------------------------------------------------------------------------


class SelectedOnce(RunbookSet):
    """The runbooks, each replayed incident's choice made once: a recorded incident never changes, and the engine
    asks on every pass."""

    def __init__(self, runbooks: RunbookSet) -> None:
        super().__init__(list(runbooks))
        self._chosen: dict[str, RunbookManifest] = {}

    def select(self, incident: Incident) -> RunbookManifest:
        chosen = self._chosen.get(incident.id)
        if chosen is None:
            chosen = self._chosen[incident.id] = super().select(incident)
        return chosen


class ReplayBooks(RemediationStore):
    """The replay's books; an incident is stored once (the engine saves it on every pass, and the replay's copy
    never changes)."""

    def __init__(self, db: Database, mode: StoreMode = "on", saved: set[str] | None = None) -> None:
        super().__init__(db, mode)
        self._saved = saved if saved is not None else set()

    def with_mode(self, mode: StoreMode) -> RemediationStore:
        return ReplayBooks(self.db, mode, self._saved)  # the incidents table is the same in every mode

    def save_incident(self, incident_id: str, body: dict[str, Any]) -> None:
        if incident_id not in self._saved:
            super().save_incident(incident_id, body)
            self._saved.add(incident_id)


Progress = Callable[[int, int], None]  # (events replayed, of)


@dataclass(slots=True)
class ReplayRun:
    entries: list[AuditEntry]  # the decisions the engine wrote, oldest first
    reboot_until: Callable[[str, float], float]
    applied: int  # runbook runs (first tries and passes)


def replay(
    recording: Recording,
    policy: RemediationPolicy,
    runbooks: RunbookSet | None = None,
    *,
    recorded: Recorded | None = None,
    reboot_s: float = REBOOT_S,
    resume_every_s: float = RESUME_EVERY_S,
    progress: Progress | None = None,
    skip_quiet: bool = True,
) -> ReplayRun:
    """Run `policy` over the recording through the real engine, acting on a replay backend; the decisions it wrote."""
    if recorded is None:
        recorded = Recorded.of(recording.remediation()[0], resume_every_s)
    candidate = policy.model_copy(deep=True)
    candidate.spec.dry_run = False  # acting on the replay backend: its books are the ones acting keeps
    backend = ReplayBackend(recording.nodes, recorded, reboot_s, tolerance=resume_every_s / 2)
    books = ReplayBooks(Database(":memory:"))
    chosen = SelectedOnce(runbooks or RunbookSet.builtin())
    engine = Remediator(backend, books, candidate, chosen, tickets=ReplayTickets(recorded))
    incidents = {b["id"]: b for b in recording.incidents}
    parsed: dict[str, Incident] = {}

    def incident(incident_id: str) -> Incident:
        if incident_id not in parsed:
            parsed[incident_id] = incident_from_dict(incidents[incident_id], f"recorded incident {incident_id}")
        return parsed[incident_id]

    resolved_at = {
        e.target.split("/", 1)[1]: e.time
        for e in recording.audit
        if e.actor != ACTOR and e.action == "resolved" and e.target.startswith("incident/")
    }
    # (time, order, key): people first at a moment (they acted before the pass saw it), then new incidents
    people_rows = [
        e
        for e in recording.audit
        if (
            e.actor != ACTOR
            and e.action in PEOPLE_NODE_ACTIONS
            and not e.dry_run
            and not e.decision.startswith("failed")
        )
        or (e.actor == ACTOR and e.action == "breaker-reset" and not e.dry_run)
    ]
    timeline = [(e.time, 0, f"p{k}") for k, e in enumerate(people_rows)]
    payloads = {f"p{k}": e for k, e in enumerate(people_rows)}
    for body in recording.incidents:
        timeline.append((recorded.taken_up.get(body["id"], float(body["first_seen"])), 1, body["id"]))
    timeline.sort(key=lambda item: (item[0], item[1]))

    phase = recorded.pass_phase
    if phase is None:
        phase = math.fmod(timeline[0][0] if timeline else recording.start, resume_every_s)
    next_pass = _grid_at_or_after(recording.start, phase, resume_every_s)
    applied = 0
    maybe_open = False  # a runbook may have paused since the last pass found none
    # Passes that would change nothing are skipped: once a pass left every paused runbook where it was, the next
    # ones do too until something moves (a new incident, a person, a reboot ending, a rate limit's window sliding,
    # a resolution). Skipping them changes no decision: a retry that decides the same writes only its step's time.
    said: dict[str, tuple[tuple[str, str], ...]] = {}  # incident -> its steps' decisions at its last run
    stirred = False  # something happened since the last pass
    quiet_until = -math.inf  # no pass before this moment would change anything

    # What each paused runbook met when it last ran: the nodes out of service, the breaker, the failures counted,
    # the moment, and where it stopped. A retry that would meet the same is not made (it would decide the same);
    # only its step's time moves, as the retry's would (paused runbooks are taken oldest first by that time).
    met: dict[str, tuple[tuple[frozenset[str], frozenset[str]], bool, int, float, str, str]] = {}
    STOPPED = ("refused", "deferred", "waiting")

    def out_now() -> tuple[frozenset[str], frozenset[str]]:
        """The nodes out of service, and those of them still rebooting (not ready)."""
        out = frozenset(backend.unavailable())
        return out, frozenset(n for n, back in backend.rebooting.items() if backend.clock < back)

    def failures() -> int:
        row = books.db.one("SELECT COUNT(*) FROM remediation_failures WHERE mode = 'on'")
        return int(row[0]) if row else 0

    def run(incident_id: str, counted: int | None = None) -> bool:
        """Apply the incident's runbook; whether any of its steps was decided differently from its last run."""
        nonlocal applied
        backend.incident = incident_id
        report = engine.apply(incident(incident_id))
        applied += 1
        decided = tuple((d.step, d.decision) for d in report.steps)
        changed = said.get(incident_id) != decided
        said[incident_id] = decided
        last = report.steps[-1] if report.steps else None
        if skip_quiet and last is not None and last.decision in STOPPED:
            tripped = books.breaker().tripped
            count = failures() if counted is None else counted
            met[incident_id] = (out_now(), tripped, count, backend.clock, last.decision,
                                last.action)  # fmt: skip
        else:
            met.pop(incident_id, None)
        return changed

    def must_retry(incident_id: str, at: float, counted: int) -> bool:
        """Whether a retry now could decide differently from the last run."""
        seen = met.get(incident_id)
        if seen is None:
            return True
        out, tripped, count, last, decision, action = seen
        if (out, tripped, count) != (out_now(), books.breaker().tripped, counted):
            return True
        if decision != "deferred":
            return False  # refused (budget or breaker) or waiting for a reboot: what it met is unchanged
        limit = candidate.spec.rate_limits.get(ActionKind(action))
        if limit is None:
            return True
        times = books.action_times(action, since=last - 3600.0 - limit.min_interval - 1.0)
        ends = [t + limit.min_interval for t in times] + [t + 3600.0 for t in times]
        ends += [math.nextafter(t + 3600.0, math.inf) for t in times]
        return any(last < t <= at for t in ends)

    def next_change(at: float) -> float:
        """The first moment after `at` when a paused runbook could be decided differently with nothing else
        happening: a reboot ends, a rate limit lets the next action through, a person resolved an incident."""
        times = [t for t in backend.rebooting.values() if t > at]
        times += [t for t in resolved_at.values() if t > at]
        for kind, limit in candidate.spec.rate_limits.items():
            recent = books.action_times(kind.value, since=at - rate_limit_lookback(limit))  # as the engine does
            if recent and limit.min_interval:
                times.append(recent[-1] + limit.min_interval)
            if recent:  # the oldest leaves the hour the engine counts: at its end, and just after (it looks back
                # an hour inclusive for the spacing, exclusive for the hourly count)
                hour = [t for t in recent if t >= at - 3600.0]
                if hour:
                    times += [hour[0] + 3600.0, math.nextafter(hour[0] + 3600.0, math.inf)]
        return min((t for t in times if t > at), default=math.inf)

    def run_pass(at: float, skip: set[str]) -> None:
        nonlocal maybe_open, stirred, quiet_until
        backend.clock = at
        if books.breaker().tripped:
            return  # nothing can go ahead until a person resets it
        paused = books.open_runs()
        if not paused:
            maybe_open = False
            return
        changed = False
        counted = failures()
        moved: list[tuple[float, str]] = []
        for incident_id in paused:
            if incident_id in skip or incident_id not in incidents:
                continue
            if resolved_at.get(incident_id, math.inf) <= at:
                continue
            if not must_retry(incident_id, at, counted):
                moved.append((at, incident_id))
                continue
            changed |= run(incident_id, counted)
        if moved:
            marks = ", ".join("?" * len(STOPPED))
            books.db.executemany(
                f"UPDATE remediation_steps SET time = ? WHERE mode = 'on' AND incident = ? AND outcome IN ({marks})",
                [(*m, *STOPPED) for m in moved],
            )
        if not changed and not stirred and skip_quiet:
            quiet_until = next_change(at)
        stirred = False

    def passes_until(limit: float, inclusive: bool) -> None:
        """The passes before `limit` (and at it, if `inclusive`), skipping the quiet stretches."""
        nonlocal next_pass
        while next_pass < limit or (inclusive and next_pass == limit):
            if not maybe_open or quiet_until > limit:
                next_pass = _grid_at_or_after(limit, phase, resume_every_s)
                if inclusive and next_pass == limit:
                    next_pass += resume_every_s
                return
            if next_pass < quiet_until:
                next_pass = _grid_at_or_after(quiet_until, phase, resume_every_s)
                continue
            run_pass(next_pass, set())
            next_pass += resume_every_s

    events = recording.node_event_times
    total = recording.events
    done_events = 0
    event_cursor = 0
    report_every = max(1, total // 100)
    next_report = report_every
    k = 0
    while k < len(timeline):
        at = timeline[k][0]
        passes_until(at, inclusive=False)
        backend.clock = at
        taken: set[str] = set()
        while k < len(timeline) and timeline[k][0] == at:
            _, order, key = timeline[k]
            k += 1
            stirred, quiet_until = True, -math.inf
            if order == 0:
                entry = payloads[key]
                if entry.action == "breaker-reset":
                    engine.reset_breaker(by=entry.reason.removeprefix("reset by ").split(":", 1)[0], note="replayed")
                else:
                    backend.person(entry)
                continue
            run(key)
            maybe_open = True
            taken.add(key)
            done_events += 1
        if next_pass == at:
            if maybe_open:
                run_pass(at, taken)
            next_pass += resume_every_s
        while event_cursor < len(events) and events[event_cursor] <= at:
            event_cursor += 1
        if progress is not None and done_events + event_cursor >= next_report:
            progress(done_events + event_cursor, total)
            next_report = done_events + event_cursor + report_every
    passes_until(recording.end, inclusive=True)
    if progress is not None:
        progress(total, total)

    def reboot_until(node: str, when: float) -> float:
        return recorded.reboot_until(node, when, reboot_s, resume_every_s / 2)

    return ReplayRun(books.audit_entries(), reboot_until, applied)


def _grid_at_or_after(t: float, phase: float, every: float) -> float:
    """The first pass time at or after `t` on the grid phase + k * every."""
    k = math.ceil((t - phase) / every)
    return phase + k * every


def describe_window(recording: Recording) -> str:
    return f"{format_duration(recording.end - recording.start)} to t={recording.end:.0f}"
