"""An incident's blast radius when a fabric switch is at fault: the hosts under the switch and the jobs running on
them.

A fabric incident names a cable or a switch port. The switch at fault is the lower of the cable's switches (an
uplink between a leaf and a spine takes traffic away from the leaf's hosts; one between a spine and a core from
every host under the spine's leaves). Hosts come from the fabric's topology model (gpufleet.fabric.topology, built
from the graph the fabric service holds); jobs from the fleet's workload attribution (the nodes that host each job's
ranks, as the nodes' agents report them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.control.fabric import FabricService, ends_of
from gpufleet.errors import UserError
from gpufleet.fabric.rails import natural
from gpufleet.fabric.topology import Topology, topology_from_graph
from gpufleet.health.detectors.seen import JobView
from gpufleet.model.observation import Entity, EntityKind


def entity_from_dict(body: Mapping[str, Any]) -> Entity | None:
    try:
        kind = EntityKind(str(body.get("kind", "")))
    except ValueError:
        return None
    index = body.get("index")
    return Entity(
        kind, str(body.get("node") or ""), int(index) if index is not None else None, str(body.get("name") or "")
    )


def hosts_under(topology: Topology, switch: str) -> list[str]:
    """Every host below `switch`: a leaf's own, a spine's or a core's through the switches below it."""
    found: set[str] = set()
    stack = [switch]
    while stack:
        sw = topology.switches.get(stack.pop())
        if sw is None:
            continue
        found.update(sw.hosts)
        stack.extend(sw.children)
    return sorted(found, key=natural)


def blast_radius(entity: Entity, topology: Topology, jobs: Iterable[JobView]) -> dict[str, Any] | None:
    """The switch at fault, its tier, the hosts under it and the jobs on them; None when the incident names no
    switch of the topology (a GPU, a node, an HCA port)."""
    switches = [topology.switches[end.node] for end in ends_of(entity) if end.node in topology.switches]
    if not switches:
        return None
    at_fault = min(switches, key=lambda s: (s.level, natural(s.name)))
    hosts = hosts_under(topology, at_fault.name)
    short = {h.split(".", 1)[0]: h for h in hosts}
    affected = []
    for job in jobs:
        there = [short[n.split(".", 1)[0]] for n, _gpu in job.ranks if n.split(".", 1)[0] in short]
        if there:
            affected.append({"job": job.name, "nodes": sorted(set(there), key=natural), "ranks_there": len(there)})
    affected.sort(key=lambda j: str(j["job"]))
    return {"switch": at_fault.name, "tier": at_fault.tier, "hosts": hosts, "jobs": affected}


_built: dict[int, tuple[int, Topology | None]] = {}  # fabric service -> (its report count, its topology)


def topology_of(service: FabricService) -> Topology | None:
    """The topology model of the fabric the service holds now (rebuilt only after a new report)."""
    seen = _built.get(id(service))
    if seen is not None and seen[0] == service.reports:
        return seen[1]
    graph = service.graph()
    topology = None
    if graph is not None:
        try:
            topology = topology_from_graph(graph)
        except UserError:  # a subnet with no host cabled yet
            topology = None
    _built.clear()
    _built[id(service)] = (service.reports, topology)
    return topology


def incident_blast_radius(
    service: FabricService, jobs: Iterable[JobView], body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The blast radius of a stored incident (its API body), or None when it names no switch."""
    entity = body.get("entity")
    if not isinstance(entity, Mapping):
        return None
    parsed = entity_from_dict(entity)
    topology = topology_of(service) if parsed is not None else None
    if parsed is None or topology is None:
        return None
    return blast_radius(parsed, topology, jobs)
