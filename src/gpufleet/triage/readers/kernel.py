"""Kernel logs: streamed line by line through the agent's kernel-log parser and judged by the Xid policy, each report
rated and filed as the agent's kernel detector files it (health.xid_rating, a burst of corrected errors included) and
escalated as the control plane escalates it; link events and the OOM killer's kills are read from the same lines.

A kill by the OOM killer is host memory, never the GPU's. The node running out (`Out of memory: Killed process`) is
critical: any process on it, the kubelet or a GPU daemon included, may be next. A kill at a memory cgroup's limit (a
container's or a job's) is a warning for the node: the workload outgrew its own limit, the node is fine."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from gpufleet.health.detectors.kernel import KernelDetector
from gpufleet.health.fault_history import FaultHistory
from gpufleet.health.thresholds import load_thresholds
from gpufleet.health.xid_policy import XidPolicy, classify, load_policy
from gpufleet.health.xid_rating import finding_severity
from gpufleet.model import Severity
from gpufleet.model.kernel import KernelEvent
from gpufleet.model.observe import Finding
from gpufleet.parsers.infiniband.diags import LinkStateEvent, link_event
from gpufleet.parsers.kernel.kmsg import KmsgParser
from gpufleet.triage.readers.common import MAX_FINDINGS
from gpufleet.triage.readers.oom import HOST_OOM, OomKill, OomKillTracker, describe_kills
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport

MAX_REJECTED = 20  # unreadable lines quoted


def _kernel_severity(event: KernelEvent, policy: XidPolicy) -> tuple[Severity, str, str]:
    """The policy's verdict on the event, rated as the agent's kernel detector files it (`finding_severity`)."""
    verdict = classify(event, policy)
    return finding_severity(verdict), verdict.action.value, verdict.reason


def read_kernel_log(lines: Iterable[str], source: str) -> TriageReport:
    """Xid, SXid, fallen-off-the-bus and reset-required reports, judged by the Xid policy, line by line."""
    return read_numbered_kernel_log(enumerate(lines, start=1), source)


@dataclass(slots=True)
class _Group:
    """The reports of one code on one GPU or switch: a burst of 16 Xid 13 lines is one finding saying 16."""

    finding: TriageFinding
    first_line: int
    last_line: int
    escalated: bool
    count: int = 1


class _Findings:
    """Findings grouped by (code, entity) in order of first appearance. Past MAX_FINDINGS groups, new ones are only
    counted by severity, so a fatal report late in a huge log still makes it faulty."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, str], _Group] = {}
        self.unlisted: dict[Severity, int] = {}

    def add(self, finding: TriageFinding, line: int, escalated: bool) -> None:
        key = (finding.check, finding.code, finding.entity)
        group = self.groups.get(key)
        if group is None:
            if len(self.groups) < MAX_FINDINGS:
                self.groups[key] = _Group(finding, line, line, escalated)
            else:
                self.unlisted[finding.severity] = self.unlisted.get(finding.severity, 0) + 1
            return
        group.count += 1
        group.last_line = line
        # the worst report speaks for the group
        if (finding.severity.rank, escalated) > (group.finding.severity.rank, group.escalated):
            finding.evidence = group.finding.evidence + finding.evidence
            group.finding, group.escalated = finding, escalated
        elif len(group.finding.evidence) < MAX_EVIDENCE:
            group.finding.evidence += finding.evidence

    def into(self, report: TriageReport) -> None:
        for group in sorted(self.groups.values(), key=lambda g: -g.finding.severity.rank):
            finding = group.finding
            if group.count > 1:
                finding.message += f" ({group.count} reports, lines {group.first_line}-{group.last_line})"
            finding.evidence = finding.evidence[:MAX_EVIDENCE]
            report.findings.append(finding)
        for severity, n in self.unlisted.items():
            message = f"{n} more {severity} report(s) on other GPUs or codes (the first {MAX_FINDINGS} are listed)"
            report.findings.append(TriageFinding("unlisted", severity, message, code="unlisted"))


def _event_finding(event: KernelEvent, policy: XidPolicy) -> TriageFinding:
    severity, action, reason = _kernel_severity(event, policy)
    code = f"Xid {event.xid}" if event.kind == "xid" else f"SXid {event.sxid}" if event.kind == "sxid" else event.kind
    message = event.message if event.known else f"{event.message} (a code NVIDIA's catalog does not list)"
    if event.kind == "xid" and event.pci is None:
        message += " (the line's PCI address is redacted: which GPU is unknown)"
    return TriageFinding(
        check=event.kind,
        severity=severity,
        entity=f"PCI {event.pci}" if event.pci else (event.sxid_detail.switch if event.sxid_detail else ""),
        code=code,
        message=message,
        fix=f"{action}: {reason}" if reason else action,
        evidence=[event.raw],
    )


def _seconds(event: KernelEvent) -> float | None:
    when = event.time
    return when.timestamp() if isinstance(when, datetime) else when


def _escalate(finding: TriageFinding, event: KernelEvent, history: FaultHistory, filed: Finding | None) -> bool:
    """The fleet's escalation rules over this log's own history: a row remap then an uncorrectable ECC error on one
    GPU, or a node losing GPUs again and again. True when the finding was escalated."""
    if filed is None or _seconds(event) is None:
        return False  # nothing the agent files, or no time on the line: the rules' windows cannot be applied
    judged = history.judge(filed)
    if judged.action != filed.action:
        finding.severity = judged.severity  # as the control plane files the escalated report
        why = judged.summary.rsplit(" - escalated: ", 1)[-1]
        finding.message = f"{finding.message} - escalated: {why}"
        finding.fix = f"{judged.action}: {why}"
        return True
    return False


def _as_filed(finding: TriageFinding, filed: Finding | None) -> TriageFinding:
    """The finding as the agent's kernel detector files the line: a corrected error that completes a burst past its
    rate is that burst (its severity, words and action), as the agent reports it."""
    if filed is None or filed.severity is finding.severity:
        return finding
    finding.severity = filed.severity
    finding.message = filed.summary
    finding.fix = f"{filed.action}: keep new work off the GPU and file a repair" if filed.action else finding.fix
    return finding


def streaming_parser(*, host: str | None = None, year: int | None = None) -> KmsgParser:
    """A parser that hands events on without keeping them and quotes at most MAX_REJECTED unreadable lines."""
    return KmsgParser(host=host, year=year, keep_events=False, max_rejected=MAX_REJECTED)


def kernel_events(lines: Iterable[tuple[int, str]], parser: KmsgParser) -> Iterator[KernelEvent]:
    """The events of (line number, text) pairs as the parser completes them."""
    for number, line in lines:
        parser.skip_to(number)
        yield from parser.feed_line(line)
    yield from parser.finish()


class _LinkWatch:
    """Network links going down and up (systemd-networkd's carrier lines, mlx5_core's Link down/up): two downs of
    one interface within the flap window is a flapping link, and a link whose last report was down is down."""

    MAX_INTERFACES = 256

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.recent: dict[str, deque[float]] = {}  # interface -> times of its downs within the window
        self.downs: dict[str, int] = {}
        self.worst: dict[str, int] = {}  # most downs seen within one window
        self.untimed: set[str] = set()
        self.last: dict[str, LinkStateEvent] = {}
        self.evidence: dict[str, list[str]] = {}

    def see(self, number: int, line: str) -> None:
        # a syslog stamp has no year; any fixed leap year orders the lines of one log for the window
        event = link_event(line, number, year=2000)
        if event is None:
            return
        name = f"{event.host}:{event.interface}" if event.host else event.interface
        if name not in self.last and len(self.last) >= self.MAX_INTERFACES:
            return
        self.last[name] = event
        quoted = self.evidence.setdefault(name, [])
        if len(quoted) < MAX_EVIDENCE:
            quoted.append(line)
        if event.state != "down":
            return
        self.downs[name] = self.downs.get(name, 0) + 1
        if event.wall_time is None:
            self.untimed.add(name)
            return
        when = event.wall_time.timestamp()
        recent = self.recent.setdefault(name, deque())
        recent.append(when)
        while recent and when - recent[0] > self.window_s:
            recent.popleft()
        self.worst[name] = max(self.worst.get(name, 0), len(recent))

    def into(self, report: TriageReport) -> None:
        minutes = self.window_s / 60
        for name, last in self.last.items():
            downs = self.downs.get(name, 0)
            evidence = self.evidence[name]
            flapping = self.worst.get(name, 0) >= 2 or (name in self.untimed and downs >= 2)
            if flapping:
                within = (
                    f"{self.worst[name]} within {minutes:.0f} min"
                    if name not in self.untimed
                    else "the lines carry no time to window them"
                )
                report.findings.append(
                    TriageFinding("link", Severity.critical, f"{name} is flapping: {downs} link downs ({within})", name,
                                  "link flap", "check the cable and transceiver at both ends (reseat, then replace); "
                                  "read the port's counters (`perfquery`, symbol errors and link downed)", evidence)
                )  # fmt: skip
            if last.state == "down":
                report.findings.append(
                    TriageFinding("link", Severity.critical,
                                  f"{name} is down: its last report (line {last.line}) lost the "
                                  "link", name, "link down", "check the cable, the switch port and `ibstat`",
                                  [last.raw])
                )  # fmt: skip
            elif downs and not flapping:
                report.findings.append(
                    TriageFinding("link", Severity.warning, f"{name} went down {downs} time(s) and came back", name,
                                  "link down", "watch it: a second drop within the window makes it a flapping link",
                                  evidence)
                )  # fmt: skip


def _oom_findings(tracker: OomKillTracker, report: TriageReport) -> None:
    """One finding per memory cgroup (or for the node), with the kills in it."""
    groups: dict[tuple[str, str], list[OomKill]] = {}
    for kill in tracker.kills:
        groups.setdefault((kill.scope, kill.pod_uid or kill.memcg or kill.task_memcg), []).append(kill)
    for (scope, where), kills in list(groups.items())[:MAX_FINDINGS]:
        message, fix = describe_kills(kills)
        if len(kills) > 1:
            message += f" ({len(kills)} kills, lines {kills[0].first_line}-{kills[-1].first_line})"
        entity = f"pod {kills[0].pod_uid}" if kills[0].pod_uid else where or ("node" if scope == "node" else "")
        # the first kill's report (its cgroup, limit and victim), then the last kill's own lines
        evidence = kills[0].lines[: MAX_EVIDENCE - 2] + (kills[-1].lines[-2:] if len(kills) > 1 else [])
        severity: Severity = Severity.critical if scope == "node" else Severity.warning
        report.findings.append(TriageFinding("oom-kill", severity, message, entity, HOST_OOM, fix, evidence))
    if tracker.unlisted:
        report.notes.append(f"{tracker.unlisted} more OOM kill(s) not listed")


def read_numbered_kernel_log(lines: Iterable[tuple[int, str]], source: str) -> TriageReport:
    """The same from (line number, text) pairs, which may leave out lines that hold nothing to read
    (`kmsg_stream.candidate_lines`). Memory stays bounded: events are judged and grouped as they come."""
    report = TriageReport("kernel-log", source)
    parser = streaming_parser()
    policy = load_policy()
    history = FaultHistory(policy)
    detector = KernelDetector({}, policy)
    findings = _Findings()
    seen = 0

    links = _LinkWatch(load_thresholds().infiniband.flap_window_s)
    ooms = OomKillTracker()

    def judge(events: list[KernelEvent]) -> None:
        for event in events:
            when = _seconds(event)
            # what the agent's kernel detector files for the line, at the line's own time (a line without one: all
            # at once, as an agent reading the whole log in one go)
            filed = detector.filed(when or 0.0, event, detector.finding(when or 0.0, event.host or "this host", event))
            finding = _as_filed(_event_finding(event, policy), filed)
            findings.add(finding, event.line, _escalate(finding, event, history, filed))

    # one loop, each line handed to each reader in turn (no generator between them: a log may pass a million lines)
    for number, line in lines:
        links.see(number, line)
        ooms.feed(number, line)
        parser.skip_to(number)
        if events := parser.feed_line(line):
            seen += len(events)
            judge(events)
    if events := parser.finish():
        seen += len(events)
        judge(events)
    findings.into(report)
    links.into(report)
    _oom_findings(ooms, report)
    seen += len(links.last) + len(ooms.kills)
    for bad in parser.scan.rejected:
        report.findings.append(
            TriageFinding(
                "unreadable",
                Severity.info,
                f"line {bad.line} looks like a GPU fault report but cannot be read: {bad.reason}",
                code="unreadable",
                evidence=[bad.raw],
            )
        )
    if parser.rejected_unlisted:
        report.notes.append(f"{parser.rejected_unlisted} more unreadable GPU lines not listed")
    if not seen:
        if parser.scan.rejected:  # the only GPU lines could not be read: saying healthy would be a guess
            report.judged = False
            report.notes.append("no readable GPU fault report; the lines that look like one are listed")
        else:
            report.notes.append(
                "no GPU fault report (Xid, SXid, fallen off the bus, RmInitAdapter failed), link event or OOM kill in "
                "this log"
            )
    return report
