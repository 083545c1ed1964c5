"""What topology-aware placement needs from the fabric, in the scheduler's own plain types (`FabricHealth`):
per node the leaf each of its rails goes through, per leaf its health and the uplink capacity it has left, and
nodes whose own cable has a problem.

A leaf is
- `degraded` when an uplink is down, missing (it has fewer than the leaves around it, or than the intended
  fabric gives it), runs below the width or speed of the fabric's other uplinks, or carries a critical or warning
  physical finding (errors, flaps, a link that trained low);
- `down` when its links to the nodes are all down, or it has no uplink left while the intended fabric gives it
  some;
- `ok` otherwise. What the fabric does not show is ok: a scheduler without a fabric places as before.

A gang keeps off nodes whose rails go through a degraded or down leaf unless it fits nowhere else, and prefers
leaves with their uplinks whole (sched.framework.gang, scoring).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, Link, NodeKind
from gpufleet.fabric.rails import FabricIndex, rate_text
from gpufleet.model import Severity
from gpufleet.model.fabric_health import FabricHealth, LeafHealth, LeafState

# findings about a cable's or port's physical health (not cabling plans, addressing or congestion)
PHYSICAL_KINDS = frozenset(
    {
        "link-down",
        "link-downed",
        "link-flap",
        "symbol-errors",
        "rcv-errors",
        "packet-drop-rate",
        "link-integrity",
        "buffer-overrun",
        "link-width",
        "link-speed",
        "missing-link",
    }
)
DOWN_KINDS = frozenset({"link-down", "missing-link"})  # the cable carries nothing


def problems_by_end(findings: Iterable[FabricFinding]) -> dict[End, list[FabricFinding]]:
    """Active critical and warning physical findings, under each port they name (both ends of a cable)."""
    out: dict[End, list[FabricFinding]] = {}
    for found in findings:
        if found.severity is Severity.info or found.kind not in PHYSICAL_KINDS:
            continue
        for end in found.ends or ((found.port,) if found.port else ()):
            out.setdefault(end, []).append(found)
    return out


def _on(link: Link, problems: dict[End, list[FabricFinding]]) -> list[FabricFinding]:
    seen: dict[str, FabricFinding] = {}
    for end in link.ends():
        for found in problems.get(end, ()):
            seen.setdefault(found.key, found)
    return list(seen.values())


def _usual(values: Iterable[float]) -> float:
    """The value most of them have (the larger on a tie): what the fabric's design is, before something broke."""
    counts = Counter(values)
    if not counts:
        return 0.0
    top = max(counts.values())
    return max(v for v, n in counts.items() if n == top)


def placement_health(
    graph: FabricGraph,
    findings: Iterable[FabricFinding] = (),
    *,
    expected: FabricGraph | None = None,
    names: Sequence[str] | None = None,
) -> FabricHealth:
    """The fabric's health for placement. `expected` (the intended fabric) says how many uplinks each leaf should
    have; without it, a leaf should have what most leaves have. `names` are the scheduler's node names: a fabric
    host is filed under the one that is the same host (dgx-001 for dgx-001.cluster.local)."""
    index = FabricIndex(graph)
    problems = problems_by_end(findings)
    health = FabricHealth()
    mapped = _name_map(index.hosts(), names)
    for host, rails in index.rails.items():
        node = mapped.get(host)
        if node is None:
            continue
        health.rails[node] = {r.rail: r.leaf for r in rails}
        bad = []
        for r in rails:
            cable = f"{r.end} <-> {r.link.other(r.end)}"
            if not r.up:
                bad.append(f"cable {cable} is down")
            bad += [f"cable {cable}: {f.kind} ({f.severity})" for f in _on(r.link, problems)]
        if bad:
            health.cables[node] = tuple(bad)
    uplinks = {leaf: index.uplinks(leaf) for leaf in index.leaves}
    rates = [link.rate_gbps for links in uplinks.values() for link in links if link.up and link.rate_gbps]
    usual_rate = _usual(r for r in rates if r is not None)
    usual_count = int(_usual(float(len(links)) for links in uplinks.values()))
    for leaf in sorted(index.leaves):
        want = usual_count
        if expected is not None and leaf in expected.nodes:
            want = sum(1 for link in expected.links_of(leaf) if _uplink_in(expected, leaf, link))
        health.leaves[leaf] = _leaf(index, leaf, uplinks[leaf], want, usual_rate, problems)
    return health


def _uplink_in(graph: FabricGraph, leaf: str, link: Link) -> bool:
    far = link.b if link.a.node == leaf else link.a
    node = graph.nodes.get(far.node)
    return node is not None and node.kind is NodeKind.switch and node.tier != "leaf" and far.node != leaf


def _leaf(
    index: FabricIndex,
    leaf: str,
    uplinks: list[Link],
    want: int,
    usual_rate: float,
    problems: dict[End, list[FabricFinding]],
) -> LeafHealth:
    reasons: list[str] = []
    state: LeafState = "ok"
    carried = 0.0  # uplink bandwidth still there, in units of a full-speed uplink
    for link in uplinks:
        found = _on(link, problems)
        down = not link.up or any(f.kind in DOWN_KINDS for f in found)
        rate = link.rate_gbps
        if down:
            reasons.append(f"uplink {link} is down")
        else:
            carried += min(1.0, rate / usual_rate) if rate and usual_rate else 1.0
            if rate and usual_rate and rate < usual_rate:
                reasons.append(f"uplink {link} runs at {rate_text(link)}, below the {usual_rate:g} Gb/s of the others")
        reasons += [f"uplink {link}: {f.kind} ({f.severity}): {f.message}" for f in found if f.kind not in DOWN_KINDS]
    missing = want - len(uplinks)
    if missing > 0:
        reasons.append(f"{missing} of {want} uplinks missing (it has {len(uplinks)})")
    if reasons:
        state = "degraded"
    capacity = carried / max(want, len(uplinks)) if max(want, len(uplinks)) else 1.0
    nodes = [link for link in index.by_node.get(leaf, ()) if _to_hca(index, leaf, link)]
    if nodes and all(not link.up or any(f.kind in DOWN_KINDS for f in _on(link, problems)) for link in nodes):
        state = "down"
        reasons.insert(0, f"all {len(nodes)} of its links to the nodes are down")
    elif want and not carried:
        state = "down"
        reasons.insert(0, "no uplink left: its nodes reach no other leaf")
    return LeafHealth(state, round(capacity, 3), tuple(reasons))


def _to_hca(index: FabricIndex, leaf: str, link: Link) -> bool:
    far = link.b if link.a.node == leaf else link.a
    node = index.graph.nodes.get(far.node)
    return node is not None and node.kind is not NodeKind.switch


def _name_map(hosts: Sequence[str], names: Sequence[str] | None) -> dict[str, str]:
    """fabric host -> scheduler node name: the same name, else the same short name."""
    if names is None:
        return {host: host for host in hosts}
    exact = set(names)
    short = {name.split(".", 1)[0]: name for name in names}
    out = {}
    for host in hosts:
        if host in exact:
            out[host] = host
        elif host.split(".", 1)[0] in short:
            out[host] = short[host.split(".", 1)[0]]
    return out
