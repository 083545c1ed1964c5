"""The incident book: one incident per root cause, its effects attached, repeats deduplicated.

Rules, in order, for each finding:
1. The same cause on the same thing is the same incident (count and last-seen go up; evidence is kept, bounded).
2. A flapping link supersedes the link-down incident of the same port (the first down was the start of the flap).
3. A kernel report that follows another one on the same GPU within a few seconds (Xid 63 after 48, the identity
   lines around an Xid 79) belongs to the first one, unless it is graver (a 48 right after a 63 is the fault, not
   a detail of the remap record).
3a. An escalation (action RMA: the fault history says resets and reboots no longer help) opens an incident of its
   own, so its runbook runs even while the incident it escalates is still open.
3b. So does a kernel report graver than the open incident of its cause on its thing (an Xid 62 the policy rates
   FATAL after an application's Xid 31 on the same GPU): an incident keeps the severity and the remedy of the report
   that opened it, as `gpufleet triage` lets the worst report of a code speak for it, and its runbook (which
   remediation runs once per incident) is never the lesser report's.
4. An effect (a stalled or hung job, a straggler, an idle rank) goes to an open incident on the same GPU, node or
   NIC port: a lost GPU, its job's hang and the stalled training run are ONE incident. Only an effect with no
   hardware cause to join becomes an incident of its own. A hang the correlation blamed on a cable (a port or a
   link) joins that cable's incident first, whatever the cable shows (errors as well as a flap).

Incidents close on their own only when they stand for a condition that is measured continuously (a power brake,
a link down, a stalled job): once no finding has confirmed it for the cause's hold time, it is resolved. A fault
the kernel reported (an Xid, a lost GPU) stays open until remediation or a person closes it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpufleet.model import Entity, EntityKind, Evidence, Incident, IncidentState, RootCause
from gpufleet.model.observe import Finding

MAX_EVIDENCE = 20
BURST_S = 10.0
SUPERSEDES = {RootCause.ib_link_flap: RootCause.ib_link_down}
# what can stop a job's collectives (a hang or stall joins these) and what can only slow a rank (a straggler)
HANG_CAUSES = frozenset(
    {
        RootCause.gpu_lost,
        RootCause.gpu_xid,
        RootCause.ecc_dbe,
        RootCause.row_remap_failure,
        RootCause.nvlink,
        RootCause.scaleup_link,
        RootCause.gpu_ras,
        RootCause.gpu_hang,
        RootCause.ib_link_down,
        RootCause.ib_link_flap,
        RootCause.recovery_action,
        RootCause.driver_mismatch,
    }
)
SLOW_CAUSES = frozenset(
    {
        RootCause.thermal,
        RootCause.power_brake,
        RootCause.pcie,
        RootCause.nvlink,
        RootCause.scaleup_link,
        RootCause.ecc_sbe_rate,
        RootCause.ib_symbol_errors,
        RootCause.ib_congestion,
    }
)
# what a cable can show; a hang the correlation put on a cable joins that cable's incident whatever it shows
CABLE_CAUSES = frozenset(
    {
        RootCause.ib_link_down,
        RootCause.ib_link_flap,
        RootCause.ib_symbol_errors,
        RootCause.ib_congestion,
        RootCause.ib_link_degraded,
        RootCause.fabric_cabling,
    }
)
# what can slow a whole job down: its slowest rank sets its pace, and so does its input pipeline
THROUGHPUT_CAUSES = SLOW_CAUSES | {
    RootCause.straggler,
    RootCause.ib_link_degraded,
    RootCause.ib_link_flap,
    RootCause.collective_slow,
    RootCause.input_starved,
}
JOINS = {
    RootCause.training_stall: HANG_CAUSES,
    RootCause.nccl_hang: HANG_CAUSES,
    RootCause.straggler: SLOW_CAUSES | HANG_CAUSES,
    RootCause.idle_gpu: HANG_CAUSES | SLOW_CAUSES | {RootCause.nccl_hang},
    RootCause.throughput_drop: THROUGHPUT_CAUSES,
}
# effects that only the rank's own GPU (or its node) can explain, not any fault elsewhere in the job
LOCAL_EFFECTS = frozenset({RootCause.straggler})
# Xids whose action is to restart the application killed the job; they never explain a hang
APP_ACTIONS = frozenset({"RESTART_APP", "IGNORE"})
ESCALATED_ACTION = "RMA"
# an incident opened by one of these names the job it holds back, so the job's row links to it
JOB_EFFECTS = frozenset(
    {
        RootCause.nccl_hang,
        RootCause.straggler,
        RootCause.training_stall,
        RootCause.throughput_drop,
        RootCause.input_starved,
    }
)
ACTIVE_SLACK_S = 120.0


def _resource_keys(entity: Entity) -> list[str]:
    """The keys an incident on `entity` covers: a GPU also stands for its node."""
    if entity.kind is EntityKind.gpu:  # by its index, else by what its agent knows of it (PCI address, UUID)
        return [str(entity), f"node/{entity.node}"]
    if entity.kind is EntityKind.port:
        return [f"port/{entity.node}/{entity.name}", f"node/{entity.node}"]
    if entity.kind is EntityKind.node:
        return [f"node/{entity.node}"]
    return [f"{entity.kind.value}/{entity.name}"]


@dataclass
class IncidentBook:
    """Open and closed incidents, keyed by root cause; `on_change` persists each one when it changes."""

    on_change: Callable[[Incident], None] | None = None
    job_resources: Callable[[str], list[str]] = lambda job: []
    incidents: dict[str, Incident] = field(default_factory=dict)  # id -> incident
    by_key: dict[str, str] = field(default_factory=dict)  # "cause:entity" -> id
    by_resource: dict[str, list[str]] = field(default_factory=dict)  # resource key -> open incident ids
    first_number: int = 1  # the state database's next incident number: ids are never reused
    _ids: itertools.count[int] = field(init=False)

    def __post_init__(self) -> None:
        self._ids = itertools.count(self.first_number)

    @property
    def next_number(self) -> int:
        """The number the next incident will get (persisted with the incidents, so a restart goes on from it)."""
        return self.first_number

    def load(self, incidents: Iterable[Incident]) -> None:
        """Take back incidents kept before a restart: the unresolved ones dedupe and correlate as before."""
        for inc in incidents:
            self.incidents[inc.id] = inc
            if inc.state is IncidentState.resolved:
                continue
            self.by_key[f"{inc.cause.value}:{inc.entity}"] = inc.id
            for key in _resource_keys(inc.entity):
                self.by_resource.setdefault(key, []).append(inc.id)

    def add(self, finding: Finding) -> Incident:
        inc = self._existing(finding)
        if inc is None:
            inc = self._open(finding)
        elif finding.effect and inc.cause != finding.cause:
            self._effect(inc, finding)
        else:
            self._repeat(inc, finding)
        if self.on_change is not None:
            self.on_change(inc)
        return inc

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents.values() if i.state is not IncidentState.resolved]

    # -- finding the incident a finding belongs to --------------------------------------------------------

    def _existing(self, f: Finding) -> Incident | None:
        inc = self._live(self.by_key.get(f.key))
        if inc is not None and f.action == ESCALATED_ACTION and inc.action != ESCALATED_ACTION:
            return None
        if inc is not None and f.source == "kmsg" and f.severity.rank > inc.severity.rank:
            return None  # a graver kernel report: an incident of its own (rule 3b)
        if inc is not None:
            return inc
        if f.cause in SUPERSEDES:
            older = self._live(self.by_key.get(f"{SUPERSEDES[f.cause].value}:{f.entity}"))
            if older is not None:
                self.by_key.pop(f"{older.cause.value}:{older.entity}", None)
                older.cause = f.cause
                older.summary = f.summary
                self.by_key[f.key] = older.id
                return older
        for newer, superseded in SUPERSEDES.items():  # a link down seen after it was found flapping is the flap
            if f.cause is superseded:
                flapping = self._live(self.by_key.get(f"{newer.value}:{f.entity}"))
                if flapping is not None:
                    return flapping
        if f.source == "kmsg" and f.action != ESCALATED_ACTION:
            for inc in self._on(_resource_keys(f.entity)[:1]):
                if (
                    inc.entity == f.entity
                    and f.time - inc.first_seen <= BURST_S
                    and inc.evidence[0].source == "kmsg"
                    and f.severity.rank <= inc.severity.rank
                ):
                    return inc
        if f.effect:
            return self._cause_of(f)
        return None

    def _cause_of(self, f: Finding) -> Incident | None:
        """The open hardware incident that explains an effect, if one does.

        It must be of a kind that can produce the effect, on the effect's own GPU or node (or, for a hang, on
        any resource of the job), and active when the effect began: a fault that healed long before a job hung
        did not hang it.
        """
        joins = JOINS.get(f.cause, HANG_CAUSES)
        on_cable = f.entity.kind in (EntityKind.port, EntityKind.link) and f.cause not in LOCAL_EFFECTS
        if on_cable:
            joins = joins | CABLE_CAUSES
        began = f.began if f.began is not None else f.time

        def explains(i: Incident) -> bool:
            if i.cause not in joins or i.cause == f.cause or i.last_seen < began - ACTIVE_SLACK_S:
                return False
            return not (i.cause is RootCause.gpu_xid and i.action in APP_ACTIONS)

        own = [i for i in self._on(_resource_keys(f.entity)) if explains(i)]
        if f.cause in LOCAL_EFFECTS:
            own = [i for i in own if i.entity == f.entity or i.entity.kind is EntityKind.node]
        if on_cable:
            own = [i for i in own if i.entity == f.entity] or own
        if own:
            return max(own, key=lambda i: i.first_seen)
        if f.job and f.cause not in LOCAL_EFFECTS:
            wide = [i for i in self._on(self.job_resources(f.job)) if explains(i)]
            if wide:
                return max(wide, key=lambda i: i.first_seen)
        return None

    def live(self, key: str) -> Incident | None:
        """The unresolved incident a finding with this key ("cause:entity") belongs to, if one is open."""
        return self._live(self.by_key.get(key))

    def _live(self, incident_id: str | None) -> Incident | None:
        inc = self.incidents.get(incident_id) if incident_id else None
        return inc if inc is not None and inc.state is not IncidentState.resolved else None

    def _on(self, keys: list[str]) -> list[Incident]:
        found: dict[str, Incident] = {}
        for key in keys:
            for incident_id in self.by_resource.get(key, ()):
                inc = self._live(incident_id)
                if inc is not None:
                    found[inc.id] = inc
        return list(found.values())

    # -- changing incidents -------------------------------------------------------------------------------

    def _open(self, f: Finding) -> Incident:
        number = next(self._ids)
        self.first_number = number + 1
        inc = Incident(
            id=f"INC-{number:06d}",
            cause=f.cause,
            entity=f.entity,
            severity=f.severity,
            summary=f.summary,
            first_seen=f.time,
            last_seen=f.time,
            evidence=[Evidence(f.time, f.source, f.evidence)],
            action=f.action,
            xid=f.xid,
        )
        if f.job and f.cause in JOB_EFFECTS:
            inc.effects.append(f"job {f.job}")
        self.incidents[inc.id] = inc
        self.by_key[f.key] = inc.id
        for key in _resource_keys(f.entity):
            self.by_resource.setdefault(key, []).append(inc.id)
        return inc

    def _repeat(self, inc: Incident, f: Finding) -> None:
        inc.count += 1
        inc.last_seen = max(inc.last_seen, f.time)
        if f.severity.rank > inc.severity.rank:
            inc.severity = f.severity
        if inc.xid is None and f.xid is not None:
            inc.xid, inc.action = f.xid, f.action or inc.action
        if len(inc.evidence) < MAX_EVIDENCE and f.evidence != inc.evidence[-1].text:
            inc.evidence.append(Evidence(f.time, f.source, f.evidence))

    def _effect(self, inc: Incident, f: Finding) -> None:
        inc.last_seen = max(inc.last_seen, f.time)
        what = f.summary
        if what not in inc.effects:
            inc.effects.append(what)
            if len(inc.evidence) < MAX_EVIDENCE:
                inc.evidence.append(Evidence(f.time, f.source, f.evidence))

    # -- lifecycle ----------------------------------------------------------------------------------------

    def resolve_cleared(self, now: float, holds: Mapping[RootCause, float]) -> list[Incident]:
        """Resolve incidents of measured conditions that no finding has confirmed for their cause's hold time."""
        done = []
        for inc in list(self.incidents.values()):
            hold = holds.get(inc.cause)
            if hold is None or inc.state is IncidentState.resolved or now - inc.last_seen < hold:
                continue
            if inc.evidence and inc.evidence[0].source == "kmsg":  # a reported fault: remediation or people close it
                continue
            inc.state = IncidentState.resolved
            if len(inc.evidence) < MAX_EVIDENCE + 1:
                inc.evidence.append(Evidence(now, "control", f"cleared: not seen for {now - inc.last_seen:.0f} s"))
            self._forget(inc)
            done.append(inc)
            if self.on_change is not None:
                self.on_change(inc)
        return done

    def _forget(self, inc: Incident) -> None:
        """Drop a resolved incident from the lookups (it stays in `incidents`, and in the database)."""
        key = f"{inc.cause.value}:{inc.entity}"
        if self.by_key.get(key) == inc.id:
            del self.by_key[key]
        for resource in _resource_keys(inc.entity):
            ids = self.by_resource.get(resource)
            if ids and inc.id in ids:
                ids.remove(inc.id)
                if not ids:
                    del self.by_resource[resource]

    def transition(self, incident_id: str, state: IncidentState) -> Incident:
        from gpufleet.errors import NotFoundError, UserError

        inc = self.incidents.get(incident_id)
        if inc is None:
            raise NotFoundError(f"no incident {incident_id}", fix="list them with `gpufleet get incidents`")
        order = list(IncidentState)
        if order.index(state) < order.index(inc.state):
            raise UserError(f"{incident_id} is {inc.state.value}; it cannot go back to {state.value}")
        inc.state = state
        if state is IncidentState.resolved:
            self._forget(inc)
        if self.on_change is not None:
            self.on_change(inc)
        return inc
