"""The fabric service of the control plane: UFM's core on the open tools.

The agent that watches a subnet (`gpufleet agent --fabric`, or the twin's) pushes one `FabricReport` per poll.
Here each new one is turned into the fabric as found, validated against the intended cabling (the cluster
manifest), its counters into rates (resets, saturation, silent ports) and judged per port and per cable (both
ends), its links compared with the last poll's (a link gone or back is an event). What is wrong becomes findings
for the incident pipeline; what happened is kept as events; the latest of everything is what `/api/v1/fabric`
shows. One poll is analysed once: a finding is out within the poll that saw its cause.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpufleet.control.fabric_topology import TopologyChange, TopologyTracker, topology_to_dict
from gpufleet.errors import NotFoundError
from gpufleet.fabric.counters import CounterTracker, Readings
from gpufleet.fabric.findings import FabricFinding, worst_first
from gpufleet.fabric.graph import End, FabricGraph, Link, NodeKind, parse_end
from gpufleet.fabric.port_health import PortHealth
from gpufleet.fabric.report import graph_from_report, readings_from_report, report_from_graph
from gpufleet.fabric.settings import is_tree
from gpufleet.fabric.settings import judge as judge_settings
from gpufleet.fabric.validate import validate
from gpufleet.health.thresholds import Thresholds
from gpufleet.locks import ordered_lock
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.fabric_settings import HostFabricSettings
from gpufleet.model.observe import FabricReport, Finding, SubnetManagerFact

MAX_EVENTS = 2000
UNWATCHED = "hosts"  # the `subnet` of settings findings on hosts no fabric watcher sees
HISTORY_POINTS = 720  # per port: a point per poll, 6 h at 30 s
MAX_HISTORY_PORTS = 5000  # ports with a history: the first that ever counted an error

CAUSES: dict[str, RootCause] = {
    "link-down": RootCause.ib_link_down,
    "link-downed": RootCause.ib_link_down,
    "link-flap": RootCause.ib_link_flap,
    "symbol-errors": RootCause.ib_symbol_errors,
    "rcv-errors": RootCause.ib_symbol_errors,
    "packet-drop-rate": RootCause.ib_symbol_errors,
    "link-integrity": RootCause.ib_symbol_errors,
    "link-recovery": RootCause.ib_symbol_errors,
    "remote-physical-errors": RootCause.ib_symbol_errors,
    "buffer-overrun": RootCause.ib_symbol_errors,
    "xmit-discards": RootCause.ib_congestion,
    "congestion": RootCause.ib_congestion,
    "vl15-dropped": RootCause.ib_congestion,
    "link-width": RootCause.ib_link_degraded,
    "link-speed": RootCause.ib_link_degraded,
    "missing-link": RootCause.fabric_cabling,
    "miscabled": RootCause.fabric_cabling,
    "unexpected-link": RootCause.fabric_cabling,
    "missing-node": RootCause.fabric_cabling,
    "unexpected-node": RootCause.fabric_cabling,
    "asymmetric-uplinks": RootCause.fabric_cabling,
    "duplicate-guid": RootCause.fabric_config,
    "duplicate-lid": RootCause.fabric_config,
    "zero-lid": RootCause.fabric_config,
    "duplicate-description": RootCause.fabric_config,
}
# about the watching, not the fabric: shown as alarms, never an incident
ALARMS_ONLY = frozenset(("counter-saturated", "port-silent"))


@dataclass
class SubnetState:
    name: str
    report: FabricReport
    graph: FabricGraph
    tracker: CounterTracker
    health: PortHealth
    polls: int = 0
    validation: list[FabricFinding] = field(default_factory=list)
    validated: bool = False  # `validation` judges `graph` (a restored poll is judged again when the next comes)
    port_findings: list[FabricFinding] = field(default_factory=list)
    settings: list[FabricFinding] = field(default_factory=list)  # the watching host's MTU, RoCE, OpenSM, SHARP
    port_mtus: list[HostFabricSettings] = field(default_factory=list)  # every HCA port's MTU, as SMPs last read it
    rates: dict[End, dict[str, float]] = field(default_factory=dict)  # per second, over the last poll
    # without a manifest, the fabric as first found (and every link seen since) is what is expected of the next
    # polls, as `ibnetdiscover --diff` compares with a cache: a link that goes stays missing until it is back
    baseline: FabricGraph = field(default_factory=FabricGraph)
    sweep_from: int | None = None  # the SM's activity count when a change was seen, until it sweeps again
    counters: dict[End, dict[str, int]] = field(default_factory=dict)  # latest values
    worst: dict[End, Severity] = field(default_factory=dict)  # the worst severity of a finding on each port


@dataclass(frozen=True, slots=True)
class FabricEvent:
    time: float
    subnet: str
    # link-down, link-up, sm-sweep, sm-change, poll-error; the topology's host-moved, host-new, host-gone,
    # switch-new, switch-gone; relabel (a node's topology labels written); scheduler-topology (Volcano's HyperNodes or
    # Slurm's topology.conf written, gpufleet.control.scheduler_topology)
    kind: str
    severity: Severity
    message: str
    ends: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "subnet": self.subnet,
            "kind": self.kind,
            "severity": str(self.severity),
            "message": self.message,
            "ends": list(self.ends),
        }


def _same_topology(before: FabricReport, after: FabricReport) -> bool:
    """Whether a poll discovered what the one before did: the same nodes, links, idle ports and cabling conflicts."""
    return (
        before.nodes == after.nodes
        and before.links == after.links
        and before.idle_ports == after.idle_ports
        and before.conflicts == after.conflicts
    )


class FabricService:
    def __init__(
        self,
        thresholds: Thresholds,
        expected: FabricGraph | None = None,
        topology: TopologyTracker | None = None,
        declared_domains: Mapping[str, str] | None = None,
    ) -> None:
        self.thresholds = thresholds
        self.expected = expected
        # the scheduler's topology of the latest polls, and the node labels that follow it (gpufleet.control.
        # fabric_topology). Each host's NVLink domain: what its GPUs report (`nvlink_domains`, the control plane's,
        # from its nodes), else what the cluster manifest declares (`declared_domains`, nodePools[].nvlinkDomainNodes)
        self.topology = topology or TopologyTracker()
        self.nvlink_domains: Callable[[], Mapping[str, str]] = dict
        self.declared_domains = dict(declared_domains or {})
        self.subnets: dict[str, SubnetState] = {}
        self.events: deque[FabricEvent] = deque(maxlen=MAX_EVENTS)
        self._undrained: list[FabricEvent] = []
        self.history: dict[End, deque[tuple[float, dict[str, int]]]] = {}
        self.isolated: dict[End, float] = {}  # ports isolation took out of service, and when
        self._pieces: dict[str, frozenset[str]] | None = None  # each expected node's connected piece
        self.lock = ordered_lock("fabric")
        self.reports = 0
        # each node's own fabric settings, its agent's latest read (NodeInventory.fabric_settings)
        self.host_settings: dict[str, HostFabricSettings] = {}
        # the settings findings on hosts no subnet's watcher sees (a RoCE fleet has no watcher at all)
        self.host_findings: list[FabricFinding] = []
        self._settings_stale = False  # a node's settings changed since the last judgement
        self.settings_judged = 0  # judgements of every host's settings made

    # --- taking a poll ------------------------------------------------------------------------------------------

    def take(self, report: FabricReport) -> list[Finding]:
        """Analyse a new poll; the findings of every problem it shows (the incident pipeline dedupes)."""
        with self.lock:
            state = self.subnets.get(report.subnet)
            if state is not None and report.time <= state.report.time:
                return []  # the same poll pushed again
            # most polls find the fabric as the last one did: its graph, what was learnt of it and its validation stand
            same = state is not None and state.validated and _same_topology(state.report, report)
            graph = state.graph if state is not None and same else graph_from_report(report)
            previous_sm = state.report.sm if state is not None else None
            if state is None:
                state = SubnetState(
                    report.subnet, report, graph, CounterTracker(), PortHealth(self.thresholds, graph=graph)
                )
                self.subnets[report.subnet] = state
            elif not same and self._link_events(report, state.graph, graph) and report.sm is not None:
                state.sweep_from = report.sm.activity
            state.report, state.graph = report, graph
            state.polls += 1
            self.reports += 1
            for error in report.errors:
                self._event(FabricEvent(report.time, report.subnet, "poll-error", Severity.warning, error))
            if not same:
                self._learn(state, graph)
            self._subnet_manager(state, report, previous_sm)
            changes = self.topology.update(self.graph, self._domains(), changed=not same, subnet=report.subnet)
            for change in changes:
                self._topology_event(report, change)
            if not same:
                expected = self._expected_for(graph) if self.expected is not None else state.baseline
                state.validation = self._seen_before(state, validate(graph, expected) if graph.nodes else [])
                state.validated = True
            read_by_sm = [s for s in report.settings if s.source == "sm"]
            if read_by_sm:  # the ports' MTU through SMPs comes every few polls: the last read stands between
                state.port_mtus = read_by_sm
            if report.settings or state.port_mtus or state.settings or self.host_settings or self._settings_stale:
                self._judge_settings()
            readings = readings_from_report(report)
            deltas = state.tracker.update(report.time, _rows(report), complete=report.counters_complete)
            # link changes are the topology's to tell (a cable gone from discovery), above
            state.port_findings, _changes = state.health.observe(report.time, deltas, graph)
            state.rates = deltas.rates()
            state.counters.update(readings)
            self._remember(report.time, readings, state)
            state.worst = {}
            for found in self.active(state):
                for end in found.ends or ((found.port,) if found.port else ()):
                    if end not in state.worst or found.severity.rank > state.worst[end].rank:
                        state.worst[end] = found.severity
            return [
                self.finding(report.time, f)
                for f in self.active(state)
                if f.severity is not Severity.info and f.kind not in ALARMS_ONLY
            ]

    def take_host_settings(self, node: str, settings: HostFabricSettings | None) -> None:
        """A node's own fabric settings from its inventory (None: it sends none, and what it sent before goes).
        Judged with every other host's when next asked (a fleet's inventories arrive together: one judgement)."""
        with self.lock:
            if settings is None:
                self._settings_stale |= self.host_settings.pop(node, None) is not None
            elif self.host_settings.get(node) != settings:  # an inventory resent unchanged: the judgement stands
                self.host_settings[node] = msgspec.structs.replace(settings, host=node, source="host")
                self._settings_stale = True

    def settings_findings(self, now: float, *, unwatched_only: bool = False) -> list[Finding]:
        """The settings findings for the incident pipeline: those on hosts no watcher sees (a watcher's polls push
        the rest), or all of them."""
        with self.lock:
            if self._settings_stale:
                self._judge_settings()
            found = list(self.host_findings)
            if not unwatched_only:
                found += [f for state in self.subnets.values() for f in state.settings]
            return [self.finding(now, f) for f in found if f.severity is not Severity.info]

    def _judge_settings(self) -> None:
        """One judgement of every host's settings: each watcher's own host and its SMP reads of the HCA ports,
        and each node's own read (which stands for its host over a watcher's). A finding is its host's subnet's
        (the subnet whose watcher reads the host or discovered its HCA), else the unwatched hosts'."""
        self._settings_stale = False
        self.settings_judged += 1
        hosts: list[HostFabricSettings] = []
        subnet_of: dict[str, str] = {}
        tree: bool | None = None
        for state in self.subnets.values():
            hosts += [s for s in state.report.settings if s.source != "sm" and s.host not in self.host_settings]
            hosts += state.port_mtus
            for read in (*state.report.settings, *state.port_mtus):
                subnet_of.setdefault(read.host, state.name)
            for node in state.graph.nodes.values():
                if node.host:
                    subnet_of.setdefault(node.host, state.name)
            if state.graph.nodes:
                tree = bool(tree) or is_tree(state.graph)
            state.settings = []
        hosts += self.host_settings.values()
        self.host_findings = []
        watched = next((s for s in self.subnets.values() if s.report.settings), None)
        for found in judge_settings(hosts, fat_tree=tree):
            host = found.port.node.partition("/")[0] if found.port else ""
            subnet = subnet_of.get(host)
            if subnet is None and host not in self.host_settings and watched is not None:
                watched.settings.append(found)  # of no host (the subnet's SMs as its watcher lists them)
            elif subnet is None:
                self.host_findings.append(found)
            else:
                self.subnets[subnet].settings.append(found)

    def _seen_before(self, state: SubnetState, found: list[FabricFinding]) -> list[FabricFinding]:
        """A cable the manifest expects and this service has seen up is down, not missing: an incident about a
        link, not about cabling (and the same after a restart, the baseline being kept)."""
        out = []
        for finding in found:
            ends = finding.ends
            if finding.kind == "missing-link" and ends and state.baseline.link_at(ends[0]) is not None:
                seen = state.baseline.link_at(ends[0])
                if seen is not None and seen.other(ends[0]) == ends[1]:
                    shown = state.graph.idle_ports.get(ends[0]) or state.graph.idle_ports.get(ends[1])
                    finding = FabricFinding(
                        "link-down",
                        Severity.critical,
                        f"link {ends[0]} <-> {ends[1]} is down: it was up before"
                        + (f", its ports show {shown}" if shown else ", it is no longer discovered"),
                        "check the cable and the transceivers at both ends, and that the far end is powered and its "
                        "port enabled (`ibportstate <lid> <port> query`); reseat or replace what is bad",
                        ends=ends,
                    )
            out.append(finding)
        return out

    # --- durable across restarts --------------------------------------------------------------------------------

    def snapshot(self, subnet: str) -> tuple[float, bytes, bytes] | None:
        """The subnet's last poll and its baseline (every cable seen up), to keep in the state database."""
        with self.lock:
            state = self.subnets.get(subnet)
            if state is None:
                return None
            baseline = report_from_graph(state.baseline, subnet=subnet, time=state.report.time, source="baseline")
            return state.report.time, _msgpack.encode(state.report), _msgpack.encode(baseline)

    def restore(self, rows: list[tuple[str, bytes, bytes]], isolated: list[tuple[str, float]]) -> None:
        """Take back what `snapshot` kept: the last poll primes the counters (the next one gives deltas, not
        resets) and the baseline tells which cables were up; no events or findings come of it."""
        with self.lock:
            for subnet, report_bytes, baseline_bytes in rows:
                report = _report_decoder.decode(report_bytes)
                graph = graph_from_report(report)
                state = SubnetState(subnet, report, graph, CounterTracker(), PortHealth(self.thresholds, graph=graph))
                state.baseline = graph_from_report(_report_decoder.decode(baseline_bytes))
                state.tracker.update(report.time, _rows(report), complete=report.counters_complete)
                state.counters = readings_from_report(report)
                state.polls = 1
                self.subnets[subnet] = state
            for text, since in isolated:
                end = parse_end(text)
                if end is not None:
                    self.isolated[end] = since
            if rows:  # the topology of the last polls, without events: nothing changed that was not told before
                self.topology.update(self.graph, self._domains(), changed=True, subnet=rows[-1][0])

    def _learn(self, state: SubnetState, graph: FabricGraph) -> None:
        baseline = state.baseline
        for node in graph.nodes.values():
            if node.name not in baseline.nodes:
                baseline.add_node(node)
        for link in graph.links:
            if link.up and baseline.link_at(link.a) is None and baseline.link_at(link.b) is None:
                # only the cable: its width and speed are judged against the fabric's usual, not against itself
                baseline.add_link(Link(link.a, link.b))

    def _subnet_manager(self, state: SubnetState, report: FabricReport, before: SubnetManagerFact | None) -> None:
        """The master SM: a new one is an event, and so is its first sweep after a link changed (the SM saw it)."""
        sm = report.sm
        if sm is None:
            return
        if before is not None and before.guid != sm.guid:
            self._event(
                FabricEvent(report.time, report.subnet, "sm-change", Severity.warning,
                            f"master subnet manager is now {sm.guid} (lid {sm.lid}), was {before.guid}")
            )  # fmt: skip
        if state.sweep_from is not None and sm.activity > state.sweep_from:
            self._event(
                FabricEvent(report.time, report.subnet, "sm-sweep", Severity.info,
                            f"subnet manager {sm.guid} swept the fabric after the change "
                            f"(activity {state.sweep_from} -> {sm.activity})")
            )  # fmt: skip
            state.sweep_from = None

    def _domains(self) -> dict[str, str]:
        return {**self.declared_domains, **self.nvlink_domains()}

    def _topology_event(self, report: FabricReport, change: TopologyChange) -> None:
        severity = Severity.warning if change.severity == "warning" else Severity.info
        self._event(FabricEvent(report.time, report.subnet, change.kind, severity, change.message, change.names))

    def relabelled(self, now: float, host: str, message: str) -> None:
        """A node's topology labels were written (or would be, in a dry run): an event like the fabric's others."""
        with self.lock:
            self._event(FabricEvent(now, "", "relabel", Severity.info, message, (host,)))

    def scheduler_topology_written(self, now: float, message: str) -> None:
        """A scheduler's topology input was written from the settled topology (or would be, in a dry run)."""
        with self.lock:
            self._event(FabricEvent(now, "", "scheduler-topology", Severity.info, message))

    def drain_events(self) -> list[FabricEvent]:
        """Events since the last call, for the control plane's event log."""
        with self.lock:
            out, self._undrained = self._undrained, []
            return out

    def _event(self, event: FabricEvent) -> None:
        self.events.append(event)
        self._undrained.append(event)
        if len(self._undrained) > MAX_EVENTS:
            del self._undrained[: len(self._undrained) - MAX_EVENTS]

    def _expected_for(self, graph: FabricGraph) -> FabricGraph | None:
        """The intended fabric may cover several subnets (a compute and a storage fabric): each subnet is checked
        against the parts of it (its connected pieces) that it shows something of."""
        if self.expected is None:
            return None
        if self._pieces is None:
            self._pieces = _pieces(self.expected)
        names: set[str] = set()
        for piece in {self._pieces[name] for name in graph.nodes if name in self._pieces}:
            names |= piece
        if len(names) == len(self.expected.nodes):
            return self.expected
        return self.expected.restricted_to(names)

    def active(self, state: SubnetState) -> list[FabricFinding]:
        if self._settings_stale:
            self._judge_settings()
        return merged_findings(state.validation, state.port_findings) + state.settings

    def _link_events(self, report: FabricReport, before: FabricGraph, after: FabricGraph) -> bool:
        """Links that went away or came (ibnetdiscover lists only links that are up) and ports whose state moved."""
        now = report.time
        old = {link.key: link for link in before.links if link.up}
        new = {link.key: link for link in after.links if link.up}
        for key in old.keys() - new.keys():
            a, b = key
            why = after.idle_ports.get(a) or after.idle_ports.get(b) or "no longer discovered"
            self._event(
                FabricEvent(now, report.subnet, "link-down", Severity.critical, f"link {a} <-> {b} went down ({why})",
                            (str(a), str(b)))
            )  # fmt: skip
        for key in new.keys() - old.keys():
            a, b = key
            self._event(
                FabricEvent(now, report.subnet, "link-up", Severity.info, f"link {a} <-> {b} came up", (str(a), str(b)))
            )
        return old.keys() != new.keys()

    def _remember(self, now: float, readings: dict[End, dict[str, int]], state: SubnetState) -> None:
        for end, values in readings.items():
            series = self.history.get(end)
            if series is None:
                if len(self.history) >= MAX_HISTORY_PORTS or not any(values.values()):
                    continue
                series = self.history[end] = deque(maxlen=HISTORY_POINTS)
            series.append((now, dict(values)))

    # --- into the incident pipeline -----------------------------------------------------------------------------

    def finding(self, now: float, found: FabricFinding) -> Finding:
        return Finding(
            now,
            CAUSES.get(found.kind, RootCause.fabric_config),
            entity_of(found),
            found.severity,
            found.message[:1000],
            found.fix[:2000],
            "fabric",
            action="ISOLATE_PORT" if found.action == "isolate-port" else "",
        )

    # --- what the API shows -------------------------------------------------------------------------------------

    def graph(self) -> FabricGraph | None:
        """Every subnet's fabric as one graph (names are unique across subnets in every fabric we have seen)."""
        with self.lock:
            if not self.subnets:
                return None
            if len(self.subnets) == 1:
                return next(iter(self.subnets.values())).graph
            merged = FabricGraph(source="merged")
            for state in self.subnets.values():
                for node in state.graph.nodes.values():
                    merged.add_node(node)
                for link in state.graph.links:
                    merged.add_link(link)
                merged.idle_ports.update(state.graph.idle_ports)
            return merged

    def findings(self) -> list[tuple[str, FabricFinding]]:
        """Every active finding with its subnet; the settings findings of hosts no watcher sees under "hosts"."""
        with self.lock:
            if self._settings_stale:
                self._judge_settings()
            found = [(name, f) for name, state in self.subnets.items() for f in self.active(state)]
            return found + [(UNWATCHED, f) for f in self.host_findings]

    def link_state(self, link: Link, subnet: SubnetState) -> dict[str, Any]:
        """A link's health for the map: its worst finding and its error rate."""
        worst = Severity.worst(subnet.worst[end] for end in link.ends() if end in subnet.worst)
        errors = sum(
            rate
            for end in link.ends()
            for name, rate in subnet.rates.get(end, {}).items()
            if name not in _TRAFFIC and not name.startswith(_TRAFFIC_PREFIXES)
        )
        return {"worst": "" if worst is None else str(worst), "error_rate_per_s": round(errors, 6)}

    def port_history(self, end: End) -> list[tuple[float, dict[str, int]]]:
        with self.lock:
            return list(self.history.get(end, ()))

    def locate(self, end: End) -> tuple[SubnetState, Link | None] | None:
        with self.lock:
            for state in self.subnets.values():
                if end.node in state.graph.nodes:
                    return state, state.graph.link_at(end)
            return None

    def switch_port_for(self, entity: Entity) -> tuple[str, int, int | None] | None:
        """The switch port whose isolation takes the entity's port or cable out of service."""
        for end in ends_of(entity):
            found = self.switch_port_of(end)
            if found is not None:
                return found[0].node, found[0].port, found[1]
        return None

    def switch_port_of(self, end: End) -> tuple[End, int | None] | None:
        """The switch port that isolates `end` (itself for a switch port, the far end of an HCA's cable), with the
        switch's LID for the tools."""
        located = self.locate(end)
        if located is None:
            return None
        state, link = located
        graph = state.graph
        target = end
        if graph.kind_of(end) is not NodeKind.switch:
            if link is None:
                return None
            target = link.other(end)
        node = graph.nodes.get(target.node)
        if node is None or node.kind is not NodeKind.switch:
            return None
        return target, node.lid


_DOWN = frozenset(("link-down", "link-flap"))
_msgpack = msgspec.msgpack.Encoder()
_report_decoder = msgspec.msgpack.Decoder(FabricReport)


def _rows(report: FabricReport) -> Readings:
    return Readings.from_rows(
        [End(row.node, row.port) for row in report.counters],
        report.counter_names,
        [row.values for row in report.counters],
        left_out="silent" if report.counters_complete else "unchanged",
    )


def _pieces(graph: FabricGraph) -> dict[str, frozenset[str]]:
    """Each node's connected piece of the graph (union-find over the links)."""
    parent = {name: name for name in graph.nodes}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for link in graph.links:
        if link.a.node in parent and link.b.node in parent:
            parent[root(link.a.node)] = root(link.b.node)
    members: dict[str, set[str]] = {}
    for name in parent:
        members.setdefault(root(name), set()).add(name)
    frozen = {top: frozenset(names) for top, names in members.items()}
    return {name: frozen[root(name)] for name in parent}


def merged_findings(validation: list[FabricFinding], port: list[FabricFinding]) -> list[FabricFinding]:
    """One finding per problem: a cable the ports' history says went down is a link-down (or flap), not also a
    missing cable of the intended fabric; the same kind on the same ends from both checks is said once."""

    def cable(found: FabricFinding) -> frozenset[End]:
        return frozenset(found.ends) if found.ends else frozenset((found.port,) if found.port else ())

    down = {cable(f) for f in [*validation, *port] if f.kind in _DOWN}
    seen: set[tuple[str, frozenset[End]]] = set()
    out: list[FabricFinding] = []
    for found in [*port, *validation]:
        key = (found.kind, cable(found))
        if key in seen or (found.kind == "missing-link" and key[1] in down):
            continue
        seen.add(key)
        out.append(found)
    return worst_first(out)


def ends_of(entity: Entity) -> list[End]:
    """The ports an incident's entity names: an HCA port, a switch port, or both ends of a cable."""
    if entity.kind is EntityKind.port and entity.node and entity.name and entity.index is not None:
        return [End(f"{entity.node}/{entity.name}", entity.index)]
    if entity.kind is EntityKind.link:
        found = [parse_end(part) for part in entity.name.split("<->")]
        return [end for end in found if end is not None]
    return []


def entity_of(found: FabricFinding) -> Entity:
    """The incident's entity: an HCA port as the node's agent names it (so the fabric's view and the node's merge,
    and the node's jobs are the ones affected), else the cable or the switch port."""
    ends = list(found.ends) if found.ends else [found.port] if found.port else []
    for end in ends:
        host, sep, rest = end.node.partition("/")
        if sep:  # host/device: an HCA
            return Entity(EntityKind.port, host, end.port, rest)
    if found.ends:
        return Entity(EntityKind.link, "", None, f"{found.ends[0]}<->{found.ends[1]}")
    if found.port:
        return Entity(EntityKind.link, "", None, str(found.port))
    return Entity(EntityKind.link, "", None, found.kind)


# --- the views /api/v1/fabric answers with (shaped after UFM's resources) ---------------------------------------


def ufm_port_name(graph: FabricGraph, end: End) -> str:
    """UFM names a port "<GUID without 0x>_<port>" (the node GUID for switches)."""
    node = graph.nodes.get(end.node)
    guid = node.guid if node is not None else ""
    return f"{guid.removeprefix('0x')}_{end.port}" if guid else ""


def summary(service: FabricService) -> dict[str, Any]:
    with service.lock:
        subnets = []
        for state in service.subnets.values():
            report = state.report
            by_severity = {"critical": 0, "warning": 0, "info": 0}
            for found in service.active(state):
                by_severity[found.severity] += 1
            subnets.append(
                {
                    "subnet": state.name,
                    "source": report.source,
                    "time": report.time,
                    "polls": state.polls,
                    "poll_s": report.poll_s,
                    "took_s": round(report.took_s, 3),
                    **_subnet_counts(service, state),
                    "findings": by_severity,
                    "errors": list(report.errors),
                    "subnet_manager": None
                    if report.sm is None
                    else {
                        "lid": report.sm.lid,
                        "guid": report.sm.guid,
                        "activity": report.sm.activity,
                        "priority": report.sm.priority,
                        "state": report.sm.state,
                    },
                    "expected": "manifest" if service.expected is not None else "first discovery",
                    "settings": msgspec.to_builtins(report.settings),
                }
            )
        return {"subnets": subnets, "reports": service.reports, "isolated_ports": len(service.isolated)}


def _subnet_counts(service: FabricService, state: SubnetState) -> dict[str, int]:
    """A subnet's switches, HCAs and links, counted once for every view: the links are the cables discovered and
    the expected ones now missing (as `links` lists them), `links_down` those not up."""
    graph = state.graph
    missing = len(_missing(service, state))
    return {
        "switches": len(graph.switches()),
        "hcas": len(graph.hcas()),
        "links": len(graph.links) + missing,
        "links_down": missing + sum(1 for x in graph.links if not x.up),
    }


def counts(service: FabricService) -> dict[str, int] | None:
    """The fabric's switches, HCAs and links over every subnet its watchers discovered; None when none reported."""
    with service.lock:
        per = [_subnet_counts(service, state) for state in service.subnets.values()]
    if not per:
        return None
    return {key: sum(c[key] for c in per) for key in ("switches", "hcas", "links", "links_down")}


def systems(service: FabricService) -> list[dict[str, Any]]:
    with service.lock:
        out = []
        for state in service.subnets.values():
            for node in state.graph.nodes.values():
                out.append(
                    {
                        "name": node.name,
                        "type": node.kind.value,
                        "guid": node.guid,
                        "lid": node.lid,
                        "ports": node.ports,
                        "description": node.description,
                        "tier": node.tier,
                        "host": node.host,
                        "subnet": state.name,
                    }
                )
        return out


def links(service: FabricService) -> list[dict[str, Any]]:
    with service.lock:
        out = []
        for state in service.subnets.values():
            graph = state.graph
            for link in graph.links:
                out.append(_link_row(service, state, link, up=link.up))
            # cables the expected fabric has whose ports are now without a link: down, and drawn so
            for link in _missing(service, state):
                row = _link_row(service, state, link, up=False)
                row["state"] = graph.idle_ports.get(link.a) or graph.idle_ports.get(link.b) or "missing"
                out.append(row)
        return out


def _missing(service: FabricService, state: SubnetState) -> list[Link]:
    """Cables expected (the manifest's, or every one seen) with neither end linked now, of this subnet: one end's node
    still discovered (an HCA whose only cable is down is not, and either end may be the one listed first)."""
    graph = state.graph
    expected = state.baseline.links if service.expected is None else service.expected.links
    return [
        link
        for link in expected
        if graph.link_at(link.a) is None
        and graph.link_at(link.b) is None
        and (link.a.node in graph.nodes or link.b.node in graph.nodes)
    ]


def _link_row(service: FabricService, state: SubnetState, link: Link, *, up: bool) -> dict[str, Any]:
    tiers = [state.graph.nodes[e.node].tier if e.node in state.graph.nodes else "" for e in link.ends()]
    return {
        "a": str(link.a),
        "b": str(link.b),
        "a_node": link.a.node,
        "b_node": link.b.node,
        "tiers": tiers,
        "width": f"{link.width}x" if link.width else None,
        "speed": link.speed,
        "rate_gbps": link.rate_gbps,
        "up": up,
        "state": "Active" if up else "Down",
        "subnet": state.name,
        **service.link_state(link, state),
    }


def ports(service: FabricService, *, errors_only: bool = False) -> list[dict[str, Any]]:
    with service.lock:
        out = []
        for state in service.subnets.values():
            graph = state.graph
            seen: set[End] = set()
            for link in graph.links:
                for end in link.ends():
                    seen.add(end)
                    out.append(_port_row(state, end, link.other(end), "Active" if link.up else "Down"))
            for end, text in graph.idle_ports.items():
                if end not in seen:
                    out.append(_port_row(state, end, None, text))
        if errors_only:
            out = [row for row in out if row["errors"]]
        return out


def _port_row(state: SubnetState, end: End, peer: End | None, port_state: str) -> dict[str, Any]:
    counters = state.counters.get(end, {})
    return {
        "name": str(end),
        "ufm_name": ufm_port_name(state.graph, end),
        "node": end.node,
        "port": end.port,
        "peer": str(peer) if peer else None,
        "state": port_state,
        "counters": counters,
        "rates_per_s": {k: round(v, 6) for k, v in state.rates.get(end, {}).items()},
        "errors": sum(v for k, v in counters.items() if k not in _TRAFFIC and not k.startswith(_TRAFFIC_PREFIXES)),
        "subnet": state.name,
    }


_TRAFFIC = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait")
_TRAFFIC_PREFIXES = ("PortUnicast", "PortMulticast")


def alarms(service: FabricService) -> list[dict[str, Any]]:
    return [{**found.to_dict(), "subnet": subnet} for subnet, found in service.findings()]


def events(service: FabricService, limit: int = 200) -> list[dict[str, Any]]:
    with service.lock:
        return [event.to_dict() for event in list(service.events)[-limit:][::-1]]


def telemetry(service: FabricService, end: End) -> dict[str, Any]:
    """A port's counters over time, and its peer's (both ends of the cable)."""
    located = service.locate(end)
    peer = located[1].other(end) if located is not None and located[1] is not None else None
    series = []
    for port in (end, peer):
        if port is None:
            continue
        points = service.port_history(port)
        series.append({"port": str(port), "points": [{"time": t, **values} for t, values in points]})
    return {"port": str(end), "peer": str(peer) if peer else None, "series": series}


PENDING_SHOWN = 100  # hosts waiting for their labels to settle, listed in the topology's view


def topology(service: FabricService) -> dict[str, Any]:
    """The scheduler's topology of the latest polls (the shape `gpufleet fabric export --server` reads back) and
    where its node labels stand; NotFoundError before a poll (or while the fabric has no host behind a switch)."""
    with service.lock:
        tracker = service.topology
        if tracker.topology is None:
            raise NotFoundError(
                f"no fabric topology: {tracker.error or 'no fabric poll has reached the control plane'}",
                fix="run a fabric watcher (`gpufleet agent --fabric`) that pushes to this control plane; its hosts' "
                "HCAs need node descriptions that name them (rdma-ndd)",
            )
        settler = tracker.settler
        pending = settler.pending()
        return {
            **topology_to_dict(tracker.topology),
            "changes": tracker.changes,
            "labels": {
                "kept": tracker.labels_of is not None,
                "settle_polls": settler.polls,
                "applied": len(settler.applied),
                "pending": len(pending),
                "waiting": dict(list(pending.items())[:PENDING_SHOWN]),
            },
        }
