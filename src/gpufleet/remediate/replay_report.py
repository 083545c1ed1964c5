"""What a rehearsed policy would have done differently: per incident, the actions carried out and how each step
ended, and for the whole window the nodes and GPUs out of service, breaker trips, refusals and deferrals; the
recorded run (or, without one, the built-in default policy replayed the same way) next to the candidate.

Both sides are measured by the same rules from their decisions: a node is out of service from the step that
cordons, drains or reboots it until a step or a person returns it (uncordon) or its reboot ends, whichever is later,
and to the end of the window if nothing returns it; it costs its GPU count per hour. A GPU-scoped step costs one
GPU: a reset for `gpu_reset_s`, a GPU cordon or drain until that GPU is returned; never while its node is out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.remediate.config import RemediationPolicy
from gpufleet.remediate.replay import (
    CARRIED_OUT,
    GPU_RESET_S,
    REBOOT_S,
    RESUME_EVERY_S,
    Progress,
    Recorded,
    Recording,
    replay,
)
from gpufleet.remediate.runbook import RunbookSet
from gpufleet.remediate.store import ACTOR
from gpufleet.state import AuditEntry

Interval = tuple[float, float]
TAKES_OUT = frozenset({"cordon", "drain"})


@dataclass(slots=True)
class IncidentOutcome:
    incident: str
    cause: str
    node: str
    actions: list[str] = field(default_factory=list)  # "drain node/dgx-001", carried out, in order
    steps: dict[str, str] = field(default_factory=dict)  # step -> how it ended
    node_hours: float = 0.0  # out of service through this incident's own steps


@dataclass(slots=True)
class RunSummary:
    actions: int
    nodes_out: int  # distinct nodes taken out of service
    node_hours: float
    gpu_hours: float
    breaker_trips: int
    refusals: int  # steps refused (budget, breaker) at least once
    deferrals: int  # steps deferred by a rate limit at least once
    incidents: dict[str, IncidentOutcome]

    def totals(self) -> dict[str, float]:
        return {
            "actions": self.actions,
            "nodes_out": self.nodes_out,
            "node_hours": round(self.node_hours, 3),
            "gpu_hours": round(self.gpu_hours, 3),
            "breaker_trips": self.breaker_trips,
            "refusals": self.refusals,
            "deferrals": self.deferrals,
        }


def _union(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(intervals: list[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def _outside(interval: Interval, covered: list[Interval]) -> float:
    """How much of `interval` lies outside the (merged) `covered` intervals."""
    a, b = interval
    inside = sum(max(0.0, min(b, y) - max(a, x)) for x, y in covered)
    return max(0.0, (b - a) - inside)


def summarize(
    entries: list[AuditEntry],
    recording: Recording,
    reboot_until: Callable[[str, float], float],
    gpu_reset_s: float = GPU_RESET_S,
) -> RunSummary:
    """One run's decisions, measured."""
    bodies = {b["id"]: b for b in recording.incidents}
    incidents = {
        i: IncidentOutcome(i, b["cause"], (b.get("entity") or {}).get("node") or "") for i, b in bodies.items()
    }
    node_out: dict[str, list[Interval]] = {}
    gpu_out: dict[str, list[Interval]] = {}  # "node/index" -> intervals
    out_since: dict[str, tuple[float, str]] = {}  # node or gpu key -> (since, incident)
    refused: set[tuple[str, str]] = set()
    deferred: set[tuple[str, str]] = set()
    trips = actions = 0
    end = recording.end

    def close(key: str, at: float, into: dict[str, list[Interval]]) -> None:
        since = out_since.pop(key, None)
        if since is not None:
            into.setdefault(key, []).append((since[0], at))
            if since[1] in incidents and into is node_out:
                incidents[since[1]].node_hours += (at - since[0]) / 3600.0

    # a person returning a node ends its time out of service too (the replay applies it at its moment, first)
    people = [
        e
        for e in recording.audit
        if e.actor != ACTOR and e.action == "uncordon" and not e.dry_run and not e.decision.startswith("failed")
    ]
    ordered = sorted([(e.time, 0, e.seq, e) for e in people] + [(e.time, 1, e.seq, e) for e in entries])
    for _, by_person, _, e in ordered:
        if not by_person:
            kind, _, rest = e.target.partition("/")
            if kind == "node":
                close(rest, e.time, node_out)
            continue
        if e.action == "breaker-trip":
            trips += e.decision in ("breaker-tripped", "would-trip")
            continue
        outcome = incidents.get(e.incident)
        if outcome is None or e.step in ("", "-"):
            continue  # an incident first seen before the window, or the control plane's own row (one resolved)
        outcome.steps[e.step] = e.decision
        if e.decision == "refused":
            refused.add((e.incident, e.step))
        elif e.decision == "deferred":
            deferred.add((e.incident, e.step))
        if e.decision not in CARRIED_OUT:
            continue
        actions += 1
        outcome.actions.append(f"{e.action} {e.target}")
        kind, _, rest = e.target.partition("/")
        if kind == "node":
            if e.action in TAKES_OUT and rest not in out_since:
                out_since[rest] = (e.time, e.incident)
            elif e.action == "uncordon":
                close(rest, e.time, node_out)
            elif e.action == "reboot-node":
                back = max(e.time, reboot_until(rest, e.time))
                node_out.setdefault(rest, []).append((e.time, back))
                if rest not in out_since:
                    outcome.node_hours += (back - e.time) / 3600.0
        elif kind == "gpu":
            key = rest
            if e.action in TAKES_OUT and f"gpu:{key}" not in out_since:
                out_since[f"gpu:{key}"] = (e.time, e.incident)
            elif e.action == "uncordon":
                close(f"gpu:{key}", e.time, gpu_out)
            elif e.action == "reset-gpu":
                gpu_out.setdefault(f"gpu:{key}", []).append((e.time, e.time + gpu_reset_s))
    for key in list(out_since):
        if key.startswith("gpu:"):
            close(key, end, gpu_out)
        else:
            close(key, end, node_out)
    gpu_out = {k.removeprefix("gpu:"): v for k, v in gpu_out.items()}
    node_hours = gpu_hours = 0.0
    merged = {node: _union([(a, min(b, max(a, end))) for a, b in spans]) for node, spans in node_out.items()}
    for node, spans in merged.items():
        hours = _length(spans) / 3600.0
        node_hours += hours
        facts = recording.nodes.get(node)
        gpu_hours += hours * (facts.gpus if facts is not None else 8)
    for key, spans in gpu_out.items():
        node = key.split("/", 1)[0]
        covered = merged.get(node, [])
        gpu_hours += sum(_outside(span, covered) for span in _union(spans)) / 3600.0
    return RunSummary(
        actions=actions,
        nodes_out=len(merged),
        node_hours=node_hours,
        gpu_hours=gpu_hours,
        breaker_trips=trips,
        refusals=len(refused),
        deferrals=len(deferred),
        incidents=incidents,
    )


@dataclass(slots=True)
class Comparison:
    start: float
    end: float
    events: int
    incidents: int
    nodes: int
    baseline: str  # "recorded", "recorded dry-run" or "default policy"
    notes: list[str]
    current: RunSummary
    candidate: RunSummary

    def differing(self) -> list[tuple[IncidentOutcome, IncidentOutcome]]:
        """The incidents the candidate would have handled differently, by first sighting."""
        out = []
        for incident_id, now in self.current.incidents.items():
            then = self.candidate.incidents[incident_id]
            if (now.actions, now.steps, round(now.node_hours, 3)) != (
                then.actions,
                then.steps,
                round(then.node_hours, 3),
            ):
                out.append((now, then))
        return out

    def as_dict(self) -> dict[str, Any]:
        current, candidate = self.current.totals(), self.candidate.totals()
        return {
            "window": {"start": self.start, "end": self.end},
            "events": self.events,
            "incidents": self.incidents,
            "nodes": self.nodes,
            "baseline": self.baseline,
            "notes": self.notes,
            "totals": {
                k: {"current": current[k], "candidate": candidate[k], "difference": round(candidate[k] - current[k], 3)}
                for k in current
            },
            "differences": [
                {
                    "incident": now.incident,
                    "cause": now.cause,
                    "node": now.node,
                    "current": {"actions": now.actions, "steps": now.steps, "node_hours": round(now.node_hours, 3)},
                    "candidate": {
                        "actions": then.actions,
                        "steps": then.steps,
                        "node_hours": round(then.node_hours, 3),
                    },
                }
                for now, then in self.differing()
            ],
        }


def compare(
    recording: Recording,
    candidate: RemediationPolicy,
    runbooks: RunbookSet | None = None,
    *,
    reboot_s: float = REBOOT_S,
    gpu_reset_s: float = GPU_RESET_S,
    resume_every_s: float = RESUME_EVERY_S,
    progress: Callable[[str, int, int], None] | None = None,
) -> Comparison:
    """The candidate replayed over the recording, next to what was done (or the default policy replayed)."""
    ids = {b["id"] for b in recording.incidents}
    entries, mode = recording.remediation()
    entries = [e for e in entries if e.incident in ids]
    recorded = Recorded.of(entries, resume_every_s)
    notes: list[str] = []

    def phase(label: str) -> Progress | None:
        if progress is None:
            return None
        return lambda done, total: progress(label, done, total)

    def until(node: str, when: float) -> float:
        return recorded.reboot_until(node, when, reboot_s, resume_every_s / 2)

    kw: dict[str, Any] = {"recorded": recorded, "reboot_s": reboot_s, "resume_every_s": resume_every_s}
    if mode:
        current = summarize(entries, recording, until, gpu_reset_s)
        baseline = "recorded" if mode == "on" else "recorded dry-run"
        if mode == "dry-run":
            notes.append("remediation ran in dry-run: 'current' is what it decided it would do")
    else:
        base = replay(recording, RemediationPolicy(), RunbookSet.builtin(), progress=phase("default policy"), **kw)
        current = summarize(base.entries, recording, base.reboot_until, gpu_reset_s)
        baseline = "default policy"
        notes.append(
            "no remediation run is recorded in this window: 'current' is the built-in default policy replayed "
            "the same way"
        )
    run = replay(recording, candidate, runbooks, progress=phase("candidate"), **kw)
    cand = summarize(run.entries, recording, run.reboot_until, gpu_reset_s)
    guessed = sorted(n for n, f in recording.nodes.items() if not f.described)
    if guessed:
        notes.append(f"{len(guessed)} node(s) without an inventory counted as 8 GPUs: {', '.join(guessed[:5])}")
    return Comparison(
        recording.start,
        recording.end,
        recording.events,
        len(recording.incidents),
        len(recording.nodes),
        baseline,
        notes,
        current,
        cand,
    )


def as_plain(summary: RunSummary) -> dict[str, Any]:
    return asdict(summary)
