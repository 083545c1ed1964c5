"""Correlate in the control plane: the findings every node's agent made, plus the fleet-wide detectors
(`registered_fleet()`: the checks that need more than one node), into one incident per root cause.

Fleet-wide checks: a training job's hang and the rank that caused it, stragglers against the job's median, what
the jobs' own metrics say, the inference services' SLOs, a node whose driver differs from the fleet's. The incident
book joins effects to their causes across nodes (a job's hang on the lost GPU of one of its ranks, wherever that
rank runs) and resolves conditions that have cleared.

With a view of the fabric, a hang or stall whose ranks' hosts reach the fabric through a cable with an active
finding (their own HCA cable, or an uplink of a leaf their rails share while the job spans more than that leaf)
is put on that cable: the hang names it and joins the cable's incident instead of blaming a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from gpufleet.health.detectors.base import FleetDetector, FleetSetup, registered_fleet
from gpufleet.health.detectors.seen import (
    FleetSeen,
    HostLoads,
    Inventories,
    JobSignals,
    JobView,
    RankUtil,
    ServiceReplicas,
)
from gpufleet.health.detectors.slo import ServiceSloDetector
from gpufleet.health.fault_history import FaultHistory
from gpufleet.health.incidents import IncidentBook
from gpufleet.health.thresholds import Thresholds, load_thresholds
from gpufleet.model import Entity, EntityKind, Incident, RootCause, Severity
from gpufleet.model.fabric_facts import FabricFacts, FabricView, LinkProblem
from gpufleet.model.observe import Finding
from gpufleet.telemetry.monitoring.objectives import SloConfig

RankOwner = Callable[[str, int | None], str | None]  # (node, GPU index) -> the job whose rank holds it
# cable findings that stop a collective outright rank before those that only lose packets
_STOPS = (RootCause.ib_link_down, RootCause.ib_link_flap)


class Correlator:
    def __init__(
        self,
        book: IncidentBook | None = None,
        thresholds: Thresholds | None = None,
        history: FaultHistory | None = None,
        fabric: FabricView | None = None,
        slo: SloConfig | None = None,
    ) -> None:
        self.thresholds = thresholds or load_thresholds()
        self.fabric = fabric  # what the fabric knows of a hung job's hosts (the control plane's fabric service)
        self.book = book or IncidentBook()
        # the Xid escalations judge a report against the GPU's and node's past, rebuilt from kept incidents
        self.history = history or FaultHistory()
        self.history.remember(self.book.incidents.values())
        setup = FleetSetup(self.thresholds, slo or SloConfig())
        self._run = [(entry, entry.build(setup)) for entry in registered_fleet()]
        self.detectors: dict[str, FleetDetector] = {entry.name: detector for entry, detector in self._run}
        self.holds = self.thresholds.control.resolve_after_s
        self.findings = 0

    @property
    def slo(self) -> ServiceSloDetector:
        """The SLO detector, whose statuses the control plane shows."""
        detector = self.detectors["slo"]
        assert isinstance(detector, ServiceSloDetector)
        return detector

    def add(self, findings: Sequence[Finding], owner: RankOwner | None = None) -> list[Incident]:
        """Findings into incidents; returns the incidents that opened or changed. Root causes go in before
        effects, so an effect seen together with its cause finds the incident it belongs to."""
        if owner is not None:
            for f in findings:
                if f.job is None and f.entity.kind is EntityKind.gpu:
                    f.job = owner(f.entity.node, f.entity.index)
        changed: dict[str, Incident] = {}
        for finding in sorted(findings, key=lambda f: f.effect):
            inc = self.book.add(self.history.judge(finding))
            changed[inc.id] = inc
        self.findings += len(findings)
        return list(changed.values())

    def tick(
        self,
        now: float,
        jobs: list[JobView],
        rank_util: RankUtil,
        inventories: Inventories,
        owner: RankOwner | None = None,
        signals: JobSignals | None = None,
        services: ServiceReplicas | None = None,
        host_load: HostLoads | None = None,
    ) -> list[Incident]:
        """The fleet-wide detectors whose inputs are given, for this moment (with a view of the fabric, hangs put
        on the cables that explain them), then the incidents whose condition has cleared."""
        seen = FleetSeen(jobs, rank_util, inventories, signals, services, host_load)
        findings: list[Finding] = []
        for entry, detector in self._run:
            if entry.ready(seen):
                findings += detector.detect(now, seen)
        if self.fabric is not None:
            findings = self.blame_fabric(now, findings, jobs, rank_util)
        changed = self.add(findings, owner)
        return changed + self.book.resolve_cleared(now, self.holds)

    def blame_fabric(
        self, now: float, findings: list[Finding], jobs: list[JobView], rank_util: RankUtil
    ) -> list[Finding]:
        """Hangs and stalls whose hosts' cables (or shared leaf uplinks) have an active fabric finding, put on that
        cable; the cable's own finding goes first when its incident is not open, so the hang has one to join."""
        by_name = {job.name: job for job in jobs}
        hung: dict[str, list[str]] = {}
        for f in findings:
            job = by_name.get(f.job or "")
            if job is not None and _hang(f) and not np.isnan(rank_util(job)).any():  # a lost GPU explains it
                hung[job.name] = list(dict.fromkeys(node for node, _ in job.ranks))
        wanted = sorted({host for hosts in hung.values() for host in hosts if len(hosts) > 1})
        facts = self.fabric(wanted) if wanted and self.fabric is not None else None
        if facts is None:
            return findings
        out: list[Finding] = []
        for f in findings:
            hosts = hung.get(f.job or "") if _hang(f) else None
            quiet = f.entity.node if f.entity.kind is EntityKind.gpu else ""
            blame = suspect(hosts, facts, quiet) if hosts and len(hosts) > 1 else None
            if blame is None:
                out.append(f)
                continue
            problem, why, others = blame
            cause = problem.finding
            if self.book.live(cause.key) is None:
                out.append(msgspec.structs.replace(cause, time=now))
            what = "hung in a collective" if f.cause is RootCause.nccl_hang else "stalled"
            also = f"; {others} other cable problem(s) on the job's path" if others else ""
            out.append(
                Finding(
                    f.time,
                    f.cause,
                    cause.entity,
                    f.severity,
                    f"job {f.job} {what}: {why}",
                    f"{f.summary}; {f.evidence}; fabric: {cause.summary}{also}",
                    f.source,
                    action=f.action,
                    job=f.job,
                    effect=True,
                    began=f.began,
                )
            )
        return out


def _hang(f: Finding) -> bool:
    """A job stopped in its collectives: NCCL's hang signature, or a stall with no rank to blame."""
    return bool(f.job) and f.effect and f.cause in (RootCause.nccl_hang, RootCause.training_stall)


def _names(hosts: list[str], limit: int = 4) -> str:
    if len(hosts) > limit:
        return f"{', '.join(hosts[:limit])} and {len(hosts) - limit} more"
    return hosts[0] if len(hosts) == 1 else f"{', '.join(hosts[:-1])} and {hosts[-1]}"


def suspect(hosts: list[str], facts: FabricFacts, quiet: str = "") -> tuple[LinkProblem, str, int] | None:
    """The cable most likely to have stopped a job on `hosts` (the gravest finding; then one on the path of the
    rank that never arrived; then a cable down or flapping before one losing packets), why, and how many other
    cable problems lie on the job's path. A leaf's uplinks count only on a rail that spans more than one leaf (or
    that some of the job's hosts lack, so its traffic crosses to another rail): ranks under one leaf never cross
    them."""
    candidates: list[tuple[LinkProblem, str, list[str]]] = []
    for host in hosts:
        for problem in facts.cables.get(host, ()):
            candidates.append((problem, f"ranks on {host} reach the fabric through {problem.link}, which "
                               f"{problem.state}", [host]))  # fmt: skip
    by_rail: dict[int, dict[str, list[str]]] = {}
    for host in hosts:
        for rail in facts.rails.get(host, ()):
            by_rail.setdefault(rail.rail, {}).setdefault(rail.leaf, []).append(host)
    seen: set[str] = set()
    for leaves in by_rail.values():
        if len(leaves) < 2 and sum(len(under) for under in leaves.values()) == len(hosts):
            continue  # every rank on this rail under one leaf: nothing crosses its uplinks
        for leaf, under in leaves.items():
            for problem in facts.uplinks.get(leaf, ()):
                if problem.finding.key in seen:
                    continue
                seen.add(problem.finding.key)
                share = f"share {leaf}" if len(under) > 1 else f"go through {leaf}"
                why = f"ranks on {_names(under)} {share}, whose uplink {problem.link} {problem.state}"
                candidates.append((problem, why, under))
    if not candidates:
        return None

    def rank(item: tuple[LinkProblem, str, list[str]]) -> tuple[int, int, int, int]:
        finding = item[0].finding
        return (
            -finding.severity.rank,
            0 if quiet and quiet in item[2] else 1,
            0 if finding.cause in _STOPS else 1,
            -len(item[2]),
        )

    best = min(candidates, key=rank)
    return best[0], best[1], len({c[0].finding.key for c in candidates}) - 1


def collective_findings(now: float, findings: Sequence[object], where: str) -> list[Finding]:
    """`gpufleet nccl compare --report`: a run slower than the fabric should give. On the host when the run covered
    one host, else on the run itself (`where`, e.g. the results file)."""
    out = []
    for f in findings:
        host, kind, message = getattr(f, "host", None), getattr(f, "kind", ""), getattr(f, "message", "")
        ratio = getattr(f, "ratio", None)
        entity = Entity(EntityKind.node, host) if host else Entity(EntityKind.job, name=where)
        severity = Severity.critical if str(getattr(f, "severity", "")) in ("critical", "error") else Severity.warning
        out.append(
            Finding(
                now,
                RootCause.collective_slow,
                entity,
                severity,
                f"{kind}: {message}",
                message if ratio is None else f"{message} (measured/expected {ratio:.2f})",
                "nccl",
                action="RUN_DIAG",
            )
        )
    return out
