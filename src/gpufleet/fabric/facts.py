"""The fabric facts the incident correlation needs to blame a hang on a link (`model.fabric_facts.FabricFacts`):
for a hung job's hosts, the leaf each of their rails goes through, and the cables with an active finding that
can stop a collective, either a host's own cable or an uplink of a leaf its rails go through."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, NodeKind
from gpufleet.fabric.rails import FabricIndex
from gpufleet.model import Severity
from gpufleet.model.fabric_facts import FabricFacts, HostRail, LinkProblem
from gpufleet.model.observe import Finding

# what a cable with such a finding does, to finish "whose uplink X ..."; these can stall a collective
STATES = {
    "link-down": "is down",
    "missing-link": "is missing (down, or not cabled)",
    "link-flap": "is flapping",
    "link-downed": "went down and came back",
    "symbol-errors": "counts symbol errors",
    "rcv-errors": "counts receive errors",
    "packet-drop-rate": "is dropping packets",
    "link-integrity": "is losing link integrity",
    "buffer-overrun": "overruns its buffers",
}


def hang_facts(
    graph: FabricGraph, problems: Iterable[tuple[FabricFinding, Finding]], hosts: Collection[str]
) -> FabricFacts:
    """The facts for `hosts` (as the nodes' agents name them; a fabric host with the same short name counts):
    each finding that can stop a collective, with the finding the fabric service pushed for it."""
    index = FabricIndex(graph)
    facts = FabricFacts()
    ours: dict[str, str] = {}  # fabric host -> the name asked for
    for host in hosts:
        resolved, _ = index.resolve([host])
        if resolved:
            ours.setdefault(resolved[0], host)
    leaves: dict[str, set[str]] = {}  # leaf -> the hosts asked for whose rails go through it
    for fabric_host, host in ours.items():
        rails = index.rails.get(fabric_host, [])
        facts.rails[host] = tuple(HostRail(str(r.end), r.rail, r.leaf) for r in rails)
        for r in rails:
            leaves.setdefault(r.leaf, set()).add(host)
    cables: dict[str, dict[str, LinkProblem]] = {}
    uplinks: dict[str, dict[str, LinkProblem]] = {}
    for found, finding in sorted(problems, key=lambda p: -p[0].severity.rank):
        if found.kind not in STATES or found.severity is Severity.info:
            continue
        ends = list(found.ends) if found.ends else [found.port] if found.port else []
        if len(ends) == 1 and (peer := graph.peer(ends[0])) is not None:
            ends.append(peer)
        if not ends:
            continue
        text = " <-> ".join(str(end) for end in ends)
        problem = LinkProblem(text, STATES[found.kind], finding)
        hca = next((end for end in ends if _is_hca(graph, end)), None)
        if hca is not None:
            node = graph.nodes.get(hca.node)
            fabric_host = (node.host if node is not None else "") or hca.node.split("/", 1)[0]
            if fabric_host in ours:
                cables.setdefault(ours[fabric_host], {}).setdefault(found.key, problem)
            continue
        for end in ends:
            if end.node in leaves:
                uplinks.setdefault(end.node, {}).setdefault(found.key, problem)
    facts.cables = {host: tuple(seen.values()) for host, seen in cables.items()}
    facts.uplinks = {leaf: tuple(seen.values()) for leaf, seen in uplinks.items()}
    return facts


def _is_hca(graph: FabricGraph, end: End) -> bool:
    node = graph.nodes.get(end.node)
    if node is not None:
        return node.kind is not NodeKind.switch
    return "/" in end.node  # "host/device": an HCA the graph no longer shows (its cable is missing)
