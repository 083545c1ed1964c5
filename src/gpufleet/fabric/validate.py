"""Fabric validation as ibdiagnet runs it: the identities (duplicate GUIDs, LIDs and node descriptions, LIDs the
subnet manager never assigned), the links (down, below their width or speed), and, given the fabric as it should
be (the cluster manifest, or an ibnetdiscover output of the fabric when it was right), the cabling: missing
cables, miscabled ports, cables and nodes nobody planned, and leaves whose uplinks are not spread like their
peers'.

One finding per problem, naming both ends of the cable (HCA or lower tier first) and what to do about it. Every
check is a pass over the links or the nodes with dictionary lookups: a 16k-HCA fabric takes about half a second.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from gpufleet.fabric.findings import FabricFinding, worst_first
from gpufleet.fabric.graph import End, FabricGraph, Link, NodeKind
from gpufleet.health.ib_ports import speed_rank
from gpufleet.model import Severity

TIER_RANK = {"leaf": 0, "spine": 1, "core": 2}
TIER_NAMES = ("leaf", "spine", "core")
_HCA_RANK = -1
_MANAGED_NAME = re.compile(r"^MF0;(?P<name>[^:]+):")  # an NVIDIA switch's description: "MF0;leaf-07:MQM9700/U1"
_COULD_BE = re.compile(r"Could be\s+(?P<what>\d+X|FDR10|[\d.]+\s*Gbps)")
_END_IN_TEXT = re.compile(r"(?P<node>\S+)/(?P<port>\d+)\b")
_SHOWN = 5  # names a finding lists before "and N more"

_CABLE_FIX = (
    "reseat or replace the cable or transceiver (a bad lane trains a link down); check that both ends enable the "
    "width and speed and run current firmware"
)
_SM_FIX = (
    "check the SM's LID assignment: one master subnet manager (`sminfo`), and a heavy sweep (restart OpenSM or "
    "send it SIGHUP) so it reassigns the LIDs"
)


def validate(found: FabricGraph, expected: FabricGraph | None = None) -> list[FabricFinding]:
    """Every finding about the fabric `found`, worst first; against `expected` when given."""
    check = _Check(found, expected)
    check.identities()
    if expected is not None:
        check.cabling(expected)
    else:
        check.links_alone()
    check.asymmetry()
    for note in found.notes:
        check.add("discovery-note", Severity.info, f"discovery said: {note}", "see the tool's own message; rerun it")
    return worst_first(check.out)


def _listed(names: Iterable[object]) -> str:
    items = [str(n) for n in names]
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class _Check:
    def __init__(self, found: FabricGraph, expected: FabricGraph | None) -> None:
        self.found = found
        self.expected = expected
        self.out: list[FabricFinding] = []
        # switches whose cabling already has a finding: their uneven uplinks are that finding, not another
        self.explained: set[str] = set()
        self.alias: dict[str, str] = {}  # found name -> the expected one, where discovery names a node otherwise
        self._ranks: dict[str, int | None] = {}

    def add(
        self,
        kind: str,
        severity: Severity,
        message: str,
        fix: str,
        ends: tuple[End, End] | None = None,
        port: End | None = None,
    ) -> None:
        self.out.append(FabricFinding(kind, severity, message, fix, ends=ends, port=port))

    # --- what the ends are ----------------------------------------------------------------------------------------

    def rank(self, name: str) -> int | None:
        """A node's tier as a number (HCAs below the leaves): the expected fabric's word first, then discovery's."""
        if name in self._ranks:
            return self._ranks[name]
        self._ranks[name] = self._rank(name)
        return self._ranks[name]

    def _rank(self, name: str) -> int | None:
        for graph in (self.expected, self.found):
            node = graph.nodes.get(name) if graph is not None else None
            if node is not None:
                if node.kind is not NodeKind.switch:
                    return _HCA_RANK
                if node.tier in TIER_RANK:
                    return TIER_RANK[node.tier]
        return None

    def ordered(self, a: End, b: End) -> tuple[End, End]:
        """HCA end first, then the lower tier: "node01/mlx5_0/1 <-> leaf1/1", "leaf1/35 <-> spine1/1"."""
        ra, rb = self.rank(a.node), self.rank(b.node)
        ka = (ra if ra is not None else 9, a)
        kb = (rb if rb is not None else 9, b)
        return (a, b) if ka <= kb else (b, a)

    def what(self, name: str) -> str:
        node = (self.expected.nodes.get(name) if self.expected else None) or self.found.nodes.get(name)
        if node is None:
            return name
        if node.kind is NodeKind.switch:
            return f"{node.tier or 'switch'} {name}"
        return f"{'router' if node.kind is NodeKind.router else 'HCA'} {name}"

    # --- identities ---------------------------------------------------------------------------------------------

    def identities(self) -> None:
        found = self.found
        by_guid: dict[str, list[str]] = {}
        by_description: dict[str, list[str]] = {}
        lids: dict[int, list[End]] = {}
        for node in found.nodes.values():
            if node.guid:
                by_guid.setdefault(node.guid, []).append(node.name)
            if node.description:
                by_description.setdefault(node.description, []).append(node.name)
            if node.kind is NodeKind.switch and node.lid is not None:
                lids.setdefault(node.lid, []).append(End(node.name, 0))
        port_guids: dict[str, set[End]] = {}
        for link in found.links:
            for end, guid, lid in ((link.a, link.a_guid, link.a_lid), (link.b, link.b_guid, link.b_lid)):
                owner = found.nodes.get(end.node)
                if owner is None or owner.kind is NodeKind.switch:
                    continue  # a switch's ports answer at its own GUID and LID
                if guid:
                    port_guids.setdefault(guid, set()).add(end)
                if lid is not None:
                    lids.setdefault(lid, []).append(end)
        for guid, names in by_guid.items():
            if len(names) > 1:
                self.add(
                    "duplicate-guid",
                    Severity.critical,
                    f"node GUID {guid} is used by {len(names)} nodes: {_listed(sorted(names))}",
                    "have the vendor reprogram one of the GUIDs (or replace the board); until then the subnet "
                    "manager routes to only one of them",
                    port=End(names[0], 0),
                )
        for guid, ends in port_guids.items():
            if len(ends) > 1:
                shown = sorted(ends)
                self.add(
                    "duplicate-guid",
                    Severity.critical,
                    f"port GUID {guid} is used by {len(shown)} ports: {_listed(shown)}",
                    "have the vendor reprogram one of the port GUIDs (or replace the HCA)",
                    port=shown[0],
                )
        for conflict in found.conflicts:
            where = _END_IN_TEXT.search(conflict)
            port = End(where.group("node"), int(where.group("port"))) if where else None
            self.add(
                "duplicate-guid",
                Severity.critical,
                f"discovery could not reconcile the fabric: {conflict}",
                "two nodes share a GUID (or the output was edited): find them with `ibnetdiscover -g`, and have "
                "one reprogrammed; compare with a fresh, unedited capture",
                port=port,
            )
        for lid, owners in lids.items():
            if lid == 0:
                for end in owners:
                    self.add(
                        "zero-lid",
                        Severity.critical,
                        f"{self.what(end.node)} port {end} has LID 0: the subnet manager has not assigned it one",
                        _SM_FIX,
                        port=end,
                    )
            elif len(owners) > 1:
                self.add(
                    "duplicate-lid",
                    Severity.critical,
                    f"LID {lid} is assigned to {len(owners)} ports: {_listed(owners)}",
                    _SM_FIX,
                    port=owners[0],
                )
        for description, names in by_description.items():
            if len(names) > 1:
                self.add(
                    "duplicate-description",
                    Severity.warning,
                    f"{len(names)} nodes share the node description {description!r}: {_listed(sorted(names))}",
                    "fix the node description: give each switch its own hostname, and let rdma-ndd set each HCA's "
                    'to "host device"',
                    port=End(names[0], 0),
                )

    # --- links without an expected fabric -------------------------------------------------------------------------

    def links_alone(self) -> None:
        """Down links, and links below what they could run at: iblinkinfo's "Could be" hint, 1X, or below the
        fabric's usual width or speed."""
        usual = _Usual(self.found)
        for link in self.found.links:
            a, b = self.ordered(link.a, link.b)
            if not link.up:
                self.down(link, a, b)
                continue
            hints = _COULD_BE.findall(self.found.could_be.get(link.key, ""))
            if not hints:
                usual.judge(self, link, a, b)
                continue
            for kind, better in (
                ("link-width", [h for h in hints if h.endswith("X")]),
                ("link-speed", [h for h in hints if not h.endswith("X")]),
            ):
                if better:
                    what = f"runs at {_running(link)}; iblinkinfo says both ends could run {', '.join(better)}"
                    self.below(kind, a, b, what)

    def below(self, kind: str, a: End, b: End, what: str) -> None:
        self.add(kind, Severity.warning, f"link {a} <-> {b} {what}", _CABLE_FIX, ends=(a, b))

    def down(self, link: Link, a: End, b: End) -> None:
        state = self.found.idle_ports.get(link.a) or self.found.idle_ports.get(link.b) or "not Active"
        self.explained.update((a.node, b.node))
        self.add(
            "link-down",
            Severity.critical,
            f"link {a} <-> {b} is down ({state})",
            f"reseat or replace the cable or transceiver between {a} and {b}; check that both ports are enabled "
            "(ibportstate) and the far end is powered",
            ends=(a, b),
        )

    # --- against the expected fabric ------------------------------------------------------------------------------

    def cabling(self, expected: FabricGraph) -> None:
        found = self.found
        self.alias = _aliases(found, expected)
        alias = self.alias

        def named(end: End) -> End:
            return End(alias[end.node], end.port) if end.node in alias else end

        found_at: dict[End, tuple[End, Link]] = {}
        for link in found.links:
            a, b = named(link.a), named(link.b)
            found_at[a] = (b, link)
            found_at[b] = (a, link)
        idle = {named(end): state for end, state in found.idle_ports.items()} if alias else found.idle_ports
        found_names = {alias.get(name, name) for name in found.nodes}
        missing = {name for name in expected.nodes if name not in found_names}
        unexpected = sorted(name for name in found_names if name not in expected.nodes)
        planned: dict[End, End] = {}
        for link in expected.links:
            planned[link.a] = link.b
            planned[link.b] = link.a

        usual = _Usual(found)
        for link in expected.links:
            a, b = self.ordered(link.a, link.b)
            if a.node in missing or b.node in missing:
                continue  # the missing node's finding says it
            at_a, at_b = found_at.get(a), found_at.get(b)
            if at_a is not None and at_a[0] == b:
                self.present(at_a[1], link, a, b, usual)
            elif at_a is None and at_b is None:
                self.absent(a, b, idle.get(a) or idle.get(b))
            else:
                self.miscabled(a, b, at_a[0] if at_a else None, at_b[0] if at_b else None)
        for link in found.links:
            a, b = self.ordered(named(link.a), named(link.b))
            if planned.get(a) == b or a in planned or b in planned:
                continue  # expected, or a port expected elsewhere: its miscabled finding says it
            if a.node not in expected.nodes or b.node not in expected.nodes:
                continue  # the unexpected node's finding says it
            self.explained.update((a.node, b.node))
            self.add(
                "unexpected-link",
                Severity.warning,
                f"link {a} <-> {b} is not in the expected fabric",
                f"remove the cable between {a} and {b}, or add it to the expected fabric if it is meant to be there",
                ends=(a, b),
            )
        self.nodes(expected, missing, unexpected, found_at)

    def present(self, found_link: Link, link: Link, a: End, b: End, usual: _Usual) -> None:
        if not found_link.up:
            self.down(found_link, a, b)
            return
        if link.width is None and link.speed is None:
            usual.judge(self, found_link, a, b)  # nothing expected of it: as if no expected fabric
            return
        if link.width and found_link.width and found_link.width < link.width:
            self.below("link-width", a, b, f"runs at {found_link.width}X, expected {link.width}X")
        ours, wanted = speed_rank(found_link.speed), speed_rank(link.speed)
        if ours is not None and wanted is not None and ours < wanted:
            self.below("link-speed", a, b, f"runs at {found_link.speed}, expected {link.speed}")

    def absent(self, a: End, b: End, state: str | None) -> None:
        """An expected cable neither of whose ports has a link. A port that polls sees no signal: no cable, or one
        unplugged or dead, which is a missing cable to whoever walks to it. A port disabled, or up with the link
        not brought up, has its cable: that link is down."""
        self.explained.update((a.node, b.node))
        physical = (state or "").rpartition("/")[2].strip()
        if state and physical not in ("Polling", "Sleep", ""):
            self.add(
                "link-down",
                Severity.critical,
                f"link {a} <-> {b} is down: its ports show {state}",
                f"reseat or replace the cable or transceiver between {a} and {b}; check that both ports are enabled "
                "(ibportstate) and the far end is powered",
                ends=(a, b),
            )
            return
        seen = f" (the ports show {state}: no signal)" if state else ""
        self.add(
            "missing-link",
            Severity.critical,
            f"expected link {a} <-> {b} is missing: neither port has a link{seen}",
            f"connect {a} to {b}: check the cable is present and seated at both ends, replace it if the ports stay "
            "down",
            ends=(a, b),
        )

    def miscabled(self, a: End, b: End, at_a: End | None, at_b: End | None) -> None:
        self.explained.update(end.node for end in (a, b, at_a, at_b) if end is not None)
        if at_a is not None and at_b is not None:
            message = f"{a} should be cabled to {b}, but {a} is cabled to {at_a} and {b} to {at_b}"
        elif at_a is not None:
            message = f"{a} is cabled to {at_a}, expected {b}"
        else:
            message = f"{b} is cabled to {at_b}, expected {a}"
        moved = a if at_a is not None else b
        self.add(
            "miscabled",
            Severity.critical,
            message,
            f"re-cable {moved} to {b if moved == a else a} as the cabling plan says (a swap shows as two such "
            "findings: fix both)",
            ends=(a, b),
        )

    def nodes(
        self, expected: FabricGraph, missing: set[str], unexpected: list[str], found_at: dict[End, tuple[End, Link]]
    ) -> None:
        if missing:
            cables: Counter[str] = Counter()
            for link in expected.links:
                for end in link.ends():
                    if end.node in missing:
                        cables[end.node] += 1
            for name in sorted(missing):
                node = expected.nodes[name]
                what = "switch" if node.kind is NodeKind.switch else "HCA"
                self.add(
                    "missing-node",
                    Severity.critical,
                    f"{self.what(name)} is not on the fabric (expected with {_plural(cables[name], 'cable')})",
                    f"check that the {what} is powered and cabled; if it was replaced or renamed, fix its node "
                    "description to match the expected fabric",
                    port=End(name, 0),
                )
        if unexpected:
            wanted = set(unexpected)
            attached: dict[str, list[str]] = {name: [] for name in unexpected}
            for end, (far, _link) in found_at.items():
                if end.node in wanted:
                    attached[end.node].append(f"{end.port} to {far}")
            for name in unexpected:
                where = f"; cabled port {_listed(sorted(attached[name]))}" if attached[name] else ""
                self.add(
                    "unexpected-node",
                    Severity.warning,
                    f"{self.what(name)} is on the fabric but not in the expected fabric{where}",
                    "add it to the expected fabric if it belongs; otherwise remove it, or fix its node description "
                    "if it is a known node under another name",
                    port=End(name, 0),
                )

    # --- leaves and spines cabled unlike their peers --------------------------------------------------------------

    def asymmetry(self) -> None:
        """A switch whose uplinks (count, or spread over the tier above) differ from its peers', or a spine or core
        with fewer downlinks than its peers. Peers: the same tier and group (as the expected fabric has them)."""
        alias = self.alias

        def rank(name: str) -> int | None:
            return self.rank(alias.get(name, name))

        uplinks, downlinks = self.tally(self.found, alias)
        if self.expected is not None:  # cabled as planned, however lopsided the plan: ibnetdiscover --diff's view
            planned_up, planned_down = self.tally(self.expected, {})
            for name in set(uplinks) | set(downlinks) | set(planned_up) | set(planned_down):
                if uplinks.get(name) == planned_up.get(name) and downlinks[name] == planned_down[name]:
                    self.explained.add(name)
        peers: dict[tuple[int, int | None], list[str]] = {}
        for node in self.found.nodes.values():
            name = alias.get(node.name, node.name)
            level = rank(node.name)
            if node.kind is NodeKind.switch and level is not None and level >= 0:
                peers.setdefault((level, self.group(name)), []).append(name)
        top = max((level for level, _ in peers), default=0)
        for (level, _group), names in sorted(peers.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
            if len(names) < 2:
                continue
            if level < top:
                self.uneven_uplinks(level, names, uplinks)
            if level > 0:
                self.fewer_downlinks(level, names, downlinks)

    def tally(self, graph: FabricGraph, alias: dict[str, str]) -> tuple[dict[str, Counter[str]], Counter[str]]:
        """Each switch's cables to the tier above (per switch there) and its count of cables from below."""
        uplinks: dict[str, Counter[str]] = {}
        downlinks: Counter[str] = Counter()
        for link in graph.links:
            if not link.up:
                continue
            a, b = alias.get(link.a.node, link.a.node), alias.get(link.b.node, link.b.node)
            ra, rb = self.rank(a), self.rank(b)
            if ra is None or rb is None or ra == rb:
                continue
            low, high = (a, b) if ra < rb else (b, a)
            if min(ra, rb) != _HCA_RANK:
                uplinks.setdefault(low, Counter())[high] += 1
            downlinks[high] += 1
        return uplinks, downlinks

    def group(self, name: str) -> int | None:
        node = (self.expected.nodes.get(name) if self.expected is not None else None) or self.found.nodes.get(name)
        return node.group if node is not None else None

    def uneven_uplinks(self, level: int, names: list[str], uplinks: dict[str, Counter[str]]) -> None:
        shapes = {name: _shape(uplinks.get(name, Counter())) for name in names}
        tally = Counter(shapes.values())
        (usual, seen), *rest = tally.most_common()
        above = TIER_NAMES[min(level + 1, 2)]
        if rest and rest[0][1] == seen:  # no shape most peers share: hold each to the most uplinks any has
            most = max(count for count, _ in shapes.values())
            odd = [n for n in names if shapes[n][0] < most]
            wanted = f"up to {most}"
        else:
            odd = [n for n in names if shapes[n] != usual]
            wanted = _spread_text(usual, above)
        for name in sorted(odd):
            if name in self.explained:
                continue
            count, _ = shapes[name]
            spread = _spread_text(shapes[name], above, uplinks.get(name))
            self.add(
                "asymmetric-uplinks",
                Severity.warning,
                f"{TIER_NAMES[level]} {name} has {_plural(count, 'uplink')} ({spread}) while its peers "
                f"({len(names) - 1}) have {wanted}",
                f"cable {name}'s uplinks as its peers' are, the same number to each {above}: look for an uplink "
                "missing, down or on the wrong switch",
                port=End(name, 0),
            )

    def fewer_downlinks(self, level: int, names: list[str], downlinks: Counter[str]) -> None:
        counts = Counter(downlinks[name] for name in names)
        (usual, seen), *rest = counts.most_common()
        if rest and rest[0][1] == seen:
            usual = max(counts)
        below = TIER_NAMES[level - 1]
        for name in sorted(names):
            if downlinks[name] >= usual or name in self.explained:
                continue
            self.add(
                "asymmetric-uplinks",
                Severity.warning,
                f"{TIER_NAMES[level]} {name} has {_plural(downlinks[name], 'downlink')} while its peers have {usual}",
                f"cable the missing {below} uplinks to {name}: look for a {below} uplink missing, down or on another "
                f"{TIER_NAMES[level]}",
                port=End(name, 0),
            )


class _Usual:
    """What most of the found fabric's links run at, for links nothing expected a width or speed of."""

    def __init__(self, found: FabricGraph) -> None:
        self.found = found
        self._done = False
        self.width: int | None = None
        self.speed: str | None = None

    def judge(self, check: _Check, link: Link, a: End, b: End) -> None:
        if not self._done:
            up = [lk for lk in self.found.links if lk.up]
            widths = Counter(lk.width for lk in up if lk.width)
            speeds = Counter(lk.speed for lk in up if speed_rank(lk.speed) is not None)
            self.width = widths.most_common(1)[0][0] if widths else None
            self.speed = speeds.most_common(1)[0][0] if speeds else None
            self._done = True
        if link.width == 1 and (self.width or 4) > 1:
            check.below("link-width", a, b, f"trained at 1X ({_running(link)}): one lane of a multi-lane cable")
        elif self.width and link.width and link.width < self.width:
            check.below("link-width", a, b, f"runs at {link.width}X while the fabric's links run at {self.width}X")
        ours, usual = speed_rank(link.speed), speed_rank(self.speed)
        if ours is not None and usual is not None and ours < usual:
            check.below("link-speed", a, b, f"runs at {link.speed} while the fabric's links run at {self.speed}")


def _running(link: Link) -> str:
    return " ".join(p for p in (f"{link.width}X" if link.width else "", link.speed or "") if p) or "unknown speed"


def _shape(counts: Counter[str]) -> tuple[int, tuple[int, ...]]:
    """How a switch's uplinks fall over the tier above: how many, and how many to each switch (largest first)."""
    return sum(counts.values()), tuple(sorted(counts.values(), reverse=True))


def _spread_text(shape: tuple[int, tuple[int, ...]], above: str, counts: Counter[str] | None = None) -> str:
    total, spread = shape
    if not spread:
        return "none"
    if len(set(spread)) == 1:
        each = f"{spread[0]} to each of {_plural(len(spread), above)}" if len(spread) > 1 else f"all to one {above}"
        return f"{total}, {each}" if counts is None else each
    if counts is not None:
        return ", ".join(f"{n} to {name}" for name, n in counts.most_common(_SHOWN))
    return f"{total}, " + "/".join(str(n) for n in spread) + f" over {_plural(len(spread), above)}"


def _aliases(found: FabricGraph, expected: FabricGraph) -> dict[str, str]:
    """Found nodes the expected fabric knows under another name: by GUID, or a managed switch's description
    ("MF0;leaf-07:MQM9700/U1" is leaf-07)."""
    out: dict[str, str] = {}
    strangers = [node for node in found.nodes.values() if node.name not in expected.nodes]
    if not strangers:
        return out
    by_guid = {node.guid: node.name for node in expected.nodes.values() if node.guid}
    for node in strangers:
        managed = _MANAGED_NAME.match(node.description) if node.kind is NodeKind.switch else None
        name = managed.group("name") if managed is not None else by_guid.get(node.guid, "") if node.guid else ""
        if name in expected.nodes and name not in found.nodes and name not in out.values():
            out[node.name] = name
    return out
