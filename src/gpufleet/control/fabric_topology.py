"""The fabric's topology as the control plane keeps it: the scheduler's model (gpufleet.fabric.topology) of the latest
polls, what changed between two of them (events), and the node labels it settles before they are applied.

The topology is built again only when a poll discovered something new (most polls find the fabric as the last one
did, and keep its topology). What changed is told once, as the fabric's events: a host's home leaf moved, a host or a
switch appeared or went.

Labels follow the topology, but not at once. A host's new labels are applied only once the same labels were wanted
in `settle_polls` consecutive polls (default 3: 90 s at the fabric watch's 30 s). Counting polls, not seconds, is
what makes a flapping link harmless: every poll that flips a host's home back resets its count, so a link that goes
and comes on alternate polls moves no label, whatever the poll interval. Where several watchers each poll a subnet
(a fabric of rail planes, a storage fabric beside the compute one), the polls counted are those of the subnet whose
report brought the new labels: the other subnets' reports between two flips of one cable never count it settled,
however often they come. Three polls outlast the subnet manager's
re-sweep after a change (one poll sees the cable gone, the next sees the SM's new routes) with one to spare. A host
that vanished from the fabric keeps the labels it has: a node that is down or rebooting has not moved, and its
labels are what places its work when it is back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gpufleet.errors import UserError
from gpufleet.fabric.graph import FabricGraph
from gpufleet.fabric.topology import Topology, TopologyHost, TopologySwitch, topology_from_graph
from gpufleet.integrations.kubernetes.topology import label_changes

SETTLE_POLLS = 3
EVENTS_PER_KIND = 20  # beyond this many of one kind in one change, the rest are one event with their count

Labels = dict[str, str]
LabelChange = dict[str, str | None]  # a label's new value; None removes it
# the labels each host should carry, given the labels in force (which keep a switch group's name)
LabelsOf = Callable[[Topology, Mapping[str, Mapping[str, str]]], Mapping[str, Mapping[str, str]]]


@dataclass(frozen=True, slots=True)
class TopologyChange:
    kind: str  # host-moved, host-new, host-gone, switch-new, switch-gone
    severity: str  # info, warning
    message: str
    names: tuple[str, ...] = ()  # the hosts or switches it is about


def topology_changes(before: Topology, after: Topology) -> list[TopologyChange]:
    """What differs between two topologies: hosts whose home leaf moved, hosts and switches that appeared or went.
    A host's other leaves (its other rails) are not a change of its place."""
    out: list[TopologyChange] = []
    moved = [
        (host, before.hosts[host].home, now.home)
        for host, now in after.hosts.items()
        if host in before.hosts and before.hosts[host].home != now.home
    ]
    out += _told(
        "host-moved", "warning", [(h, f"{h}'s home leaf is now {new} (was {old})") for h, old, new in moved],
        "hosts' home leaves moved",
    )  # fmt: skip
    out += _told(
        "host-gone", "warning",
        [(h, f"{h} is no longer in the fabric (under {before.hosts[h].home}); its labels stay")
         for h in before.hosts if h not in after.hosts],
        "hosts are no longer in the fabric; their labels stay",
    )  # fmt: skip
    out += _told(
        "host-new", "info",
        [(h, f"{h} joined the fabric under {after.hosts[h].home}") for h in after.hosts if h not in before.hosts],
        "hosts joined the fabric",
    )  # fmt: skip
    out += _told(
        "switch-gone", "warning",
        [(s.name, f"{s.tier} {s.name} is no longer in the topology") for s in before.switches.values()
         if s.name not in after.switches],
        "switches are no longer in the topology",
    )  # fmt: skip
    out += _told(
        "switch-new", "info",
        [(s.name, f"{s.tier} {s.name} joined the topology") for s in after.switches.values()
         if s.name not in before.switches],
        "switches joined the topology",
    )  # fmt: skip
    return out


def _told(kind: str, severity: str, items: list[tuple[str, str]], many: str) -> list[TopologyChange]:
    """One change per item, up to EVENTS_PER_KIND; the rest as one change with their count."""
    out = [TopologyChange(kind, severity, message, (name,)) for name, message in items[:EVENTS_PER_KIND]]
    rest = items[EVENTS_PER_KIND:]
    if rest:
        names = tuple(name for name, _ in rest[:EVENTS_PER_KIND])
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        out.append(TopologyChange(kind, severity, f"{len(rest)} more {many}: {shown}", names))
    return out


@dataclass(slots=True)
class LabelSettler:
    """The labels each host should carry, applied only once they have held for `polls` consecutive polls."""

    polls: int = SETTLE_POLLS
    wanted: dict[str, Labels] = field(default_factory=dict)  # per host, from the latest topology
    applied: dict[str, Labels] = field(default_factory=dict)  # per host, as last written (or found written)
    # a host whose wanted labels differ from what it carries: the subnet whose report brought them, and that
    # subnet's count of reports then
    since: dict[str, tuple[str, int]] = field(default_factory=dict)
    reports: dict[str, int] = field(default_factory=dict)  # per subnet

    def __post_init__(self) -> None:
        if self.polls < 1:
            raise UserError(f"settle polls {self.polls}", fix="labels settle over 1 poll or more (default 3)")

    def observe(self, wanted: Mapping[str, Mapping[str, str]] | None, subnet: str = "") -> None:
        """One subnet's poll; `wanted` is every host's labels now, or None when the topology did not change."""
        count = self.reports[subnet] = self.reports.get(subnet, 0) + 1
        if wanted is None:
            return
        for host, labels in wanted.items():
            if self.wanted.get(host) != labels:
                self.since[host] = (subnet, count)  # a new value: its count starts again
            if self.applied.get(host) == labels:
                self.since.pop(host, None)  # back to what it carries: nothing to write
        for host in self.since.keys() - wanted.keys():
            del self.since[host]  # vanished: keeps what it carries
        self.wanted = {host: dict(labels) for host, labels in wanted.items()}

    def due(self) -> dict[str, LabelChange]:
        """The hosts whose labels have settled on something other than what they carry, and the writes for each."""
        out = {}
        for host, (subnet, first) in self.since.items():
            if self.reports[subnet] - first + 1 >= self.polls:
                change = label_changes({host: self.applied.get(host, {})}, {host: self.wanted[host]})
                if change:
                    out[host] = change[host]
        return out

    def written(self, host: str, labels: Mapping[str, str]) -> None:
        """`labels` are now on `host` (applied, or found there already)."""
        self.applied[host] = dict(labels)
        if self.wanted.get(host) == self.applied[host]:
            self.since.pop(host, None)

    def pending(self) -> dict[str, dict[str, Any]]:
        """Hosts waiting for their labels to settle: what they will carry and the polls seen so far."""
        return {
            host: {"labels": self.wanted[host], "polls": self.reports[subnet] - first + 1, "of": self.polls}
            for host, (subnet, first) in sorted(self.since.items())
        }


@dataclass(slots=True)
class TopologyTracker:
    """The topology of the latest polls, and the labels that follow it. `labels_of` None: no labels are kept (a
    control plane without a backend that labels nodes)."""

    labels_of: LabelsOf | None = None
    settler: LabelSettler = field(default_factory=LabelSettler)
    topology: Topology | None = None
    domains: dict[str, str] = field(default_factory=dict)  # host -> NVLink domain the topology was built with
    error: str = ""  # why there is no topology (a fabric with no host behind a switch)
    changes: int = 0  # topologies built that differed from the one before

    def update(
        self,
        fabric: Callable[[], FabricGraph | None],
        domains: Mapping[str, str],
        *,
        changed: bool,
        subnet: str = "",
    ) -> list[TopologyChange]:
        """One poll of `subnet`. `fabric` gives the fabric's graph, asked for only when `changed` (the subnet differs
        from its last poll), when there is no topology yet, or when the hosts' NVLink domains changed: only then is
        the topology built again. Returns what changed in it."""
        out: list[TopologyChange] = []
        rebuilt = False
        graph = fabric() if changed or self.topology is None or dict(domains) != self.domains else None
        if graph is not None:
            rebuilt = True
            self.domains = dict(domains)
            try:
                topology = topology_from_graph(graph, nvlink_domains=self.domains)
            except UserError as exc:
                self.error = exc.message
                topology = None
            if topology is not None:
                self.error = ""
                if self.topology is not None:
                    out = topology_changes(self.topology, topology)
                    self.changes += bool(out) or _domains_moved(self.topology, topology)
                self.topology = topology
        if self.labels_of is not None:
            wanted = None
            if rebuilt and self.topology is not None:
                in_force = {**self.settler.wanted, **self.settler.applied}
                wanted = {host: dict(labels) for host, labels in self.labels_of(self.topology, in_force).items()}
            self.settler.observe(wanted, subnet)
        return out


def _domains_moved(before: Topology, after: Topology) -> bool:
    return any(
        host in before.hosts and before.hosts[host].nvlink_domain != now.nvlink_domain
        for host, now in after.hosts.items()
    )


def nvlink_domains(gpus_by_host: Iterable[tuple[str, Iterable[tuple[str, int | None]]]]) -> dict[str, str]:
    """Each host's NVLink domain from what its GPUs joined (NVML fabric info: cluster UUID, clique): the domain most
    of its GPUs are in, named `<cluster uuid>.<clique>` (a label value's characters). Hosts whose GPUs joined none
    have none."""
    out = {}
    for host, gpus in gpus_by_host:
        counts: dict[str, int] = {}
        for cluster, clique in gpus:
            if cluster and clique is not None:
                name = f"{cluster}.{clique}"
                counts[name] = counts.get(name, 0) + 1
        if counts:
            out[host] = max(counts, key=lambda name: counts[name])
    return out


# --- the topology as JSON (/api/v1/fabric/topology), and back for the exports made from a running control plane --


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    return {
        "source": topology.source,
        "notes": list(topology.notes),
        "switches": [asdict(s) for s in topology.switches.values()],
        "hosts": [asdict(h) for h in topology.hosts.values()],
    }


def topology_from_dict(body: Mapping[str, Any], where: str = "the topology") -> Topology:
    """A Topology from `topology_to_dict`'s shape (fields it does not know are left out, so an older client reads
    a newer server); a malformed body is a UserError naming what is wrong."""
    switch_fields = {f.name for f in fields(TopologySwitch)}
    host_fields = {f.name for f in fields(TopologyHost)}
    try:
        topology = Topology(source=str(body.get("source", "")), notes=[str(n) for n in body.get("notes", [])])
        for row in body["switches"]:
            switch = TopologySwitch(**{k: _tupled(v) for k, v in row.items() if k in switch_fields})
            topology.switches[switch.name] = switch
        for row in body["hosts"]:
            host = TopologyHost(**{k: _tupled(v) for k, v in row.items() if k in host_fields})
            topology.hosts[host.name] = host
    except (KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"{where} is not a topology ({type(exc).__name__}: {exc})",
            fix="ask a control plane of the same version (GET /api/v1/fabric/topology)",
        ) from None
    return topology


def _tupled(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
