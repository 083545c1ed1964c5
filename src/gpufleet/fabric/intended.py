"""The fabric as it should be: the cabling the cluster manifest lays out, or a saved ibnetdiscover output taken
when the fabric was right (the idea of `ibnetdiscover --diff`: compare with a known-good cache).

Names follow discovery's, so the two compare by name: switches as the builder names them (their node
descriptions), HCAs as "host/mlx5_r". Every cable carries the width and speed it should train at.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.errors import NotFoundError, ParseError, UserError
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.model import Cluster
from gpufleet.model.fabric import normalise_guid
from gpufleet.parsers.infiniband.diags import FabricTopology, parse_ibnetdiscover
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import LANE_GBPS
from gpufleet.spec.loader import load_cluster

MAX_DUMP_BYTES = 64 * 1024 * 1024
_MANIFEST = re.compile(r"^\s*(?:apiVersion|kind)\s*:", re.MULTILINE)


def intended_graph(cluster: Cluster) -> FabricGraph:
    """The cluster's fabric as built from its manifest: switches with their tiers, rails and groups, the HCAs that
    are cabled, and every cable with the width and speed it should run at."""
    graph = FabricGraph(source="manifest")
    fabric = cluster.fabric
    for sw in fabric.switches:
        graph.add_node(
            Node(
                sw.name,
                NodeKind.switch,
                normalise_guid(sw.guid),
                sw.radix,
                description=sw.name,
                tier=sw.tier,
                rail=sw.rail,
                group=sw.group,
            )
        )
    cabled = {end[0] for link in fabric.links for end in (link.a, link.b) if "/" in end[0]}
    port_guids: dict[tuple[str, int], str] = {}
    for node in cluster.nodes:
        for nic in node.nics:
            name = f"{node.name}/{nic.name}"
            if name not in cabled:
                continue
            graph.add_node(
                Node(
                    name,
                    NodeKind.hca,
                    normalise_guid(nic.guid),
                    max(len(nic.ports), 1),
                    description=f"{node.name} {nic.name}",
                    rail=nic.rail,
                    host=node.name,
                )
            )
            for port in nic.ports:
                port_guids[(name, port.number)] = normalise_guid(port.guid)
    for link in fabric.links:
        width, speed = link.width, link.speed
        if width is None:  # a fabric built without a design width: 4X at the generation its rate is
            width = 4
            speed = next((g for g, rate in LANE_GBPS.items() if abs(rate * width - link.speed_gbps) < 1e-6), None)
        graph.add_link(
            Link(
                End(*link.a),
                End(*link.b),
                width=width,
                speed=speed,
                a_guid=port_guids.get(link.a, ""),
                b_guid=port_guids.get(link.b, ""),
            )
        )
    return graph


def load_expected(path: str | Path) -> FabricGraph:
    """The expected fabric from a file: a `kind: Cluster` manifest, or an ibnetdiscover output of the fabric as it
    should be."""
    path = Path(path)
    text = _read(path)
    if _MANIFEST.search(text):
        manifest = load_cluster(path)
        graph = intended_graph(build_cluster(manifest.metadata.name, manifest.spec))
        if not graph.links:
            raise UserError(
                f"{path}: the manifest describes no fabric cabling (topology none, or no NICs)",
                fix="give the cluster a fabric (spec.fabric.topology) and NICs, or pass an ibnetdiscover output",
            )
        return graph
    return graph_from_ibnetdiscover(text, str(path))


def graph_from_ibnetdiscover(text: str, source: str) -> FabricGraph:
    """A saved ibnetdiscover output as a fabric graph; an output that is not whole is refused (a cut-off capture
    would look like missing cables)."""
    topology = parse_ibnetdiscover(text, source=source)
    _refuse_cut_short(topology, source)
    return from_ibnetdiscover(topology, source="ibnetdiscover")


def _refuse_cut_short(topology: FabricTopology, source: str) -> None:
    """ibnetdiscover lists every node it reached with every cabled port, so each cable appears from both ends. A
    node named only by its neighbours, or a last record that leaves out ports its neighbours list, means the
    output stops early."""
    if topology.ports_report:
        return
    unlisted = {link.remote: link.remote_description for link in topology.links if link.remote not in topology.nodes}
    if unlisted:
        names = ", ".join(repr(desc or node_id) for node_id, desc in sorted(unlisted.items())[:3])
        more = f" and {len(unlisted) - 3} more" if len(unlisted) > 3 else ""
        raise ParseError(
            f"{source}: the output stops early: {names}{more} are listed as neighbours but have no record of their own",
            fix="pass the whole `ibnetdiscover` output (save it with `ibnetdiscover > fabric.txt`)",
        )
    last = max(topology.nodes.values(), key=lambda node: node.line)
    own = {link.port for link in topology.links if link.node == last.id}
    owed = sorted({link.remote_port for link in topology.links if link.remote == last.id} - own)
    if owed:
        raise ParseError(
            f"{source}: the output stops early: the last record ({last.description or last.id!r}) lacks port "
            f"{owed[0]}, which its neighbour lists",
            fix="pass the whole `ibnetdiscover` output (save it with `ibnetdiscover > fabric.txt`)",
        )


def _read(path: Path) -> str:
    if not path.exists():
        raise NotFoundError(f"{path}: no such file", fix="pass a cluster manifest or a saved ibnetdiscover output")
    if not path.is_file():
        raise UserError(f"{path} is not a regular file", fix="pass a cluster manifest or a saved ibnetdiscover output")
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix="check the path and its permissions") from None
    if len(data) > MAX_DUMP_BYTES:
        raise UserError(f"{path} is larger than {MAX_DUMP_BYTES // (1024 * 1024)} MiB", fix="check the file")
    return data.decode("utf-8", errors="replace")
