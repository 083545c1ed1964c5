"""A fabric poll on the wire (`FabricReport`) and back: the agent that watches a subnet builds one from what the
tools showed, the control plane's fabric service reads the graph and the counters out of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.model.observe import FabricLinkFact, FabricNodeFact, FabricReport, IdlePortFact, PortCounterFact

Readings = dict[End, dict[str, int]]


def report_from_graph(
    graph: FabricGraph,
    *,
    subnet: str,
    time: float,
    source: str = "live",
    counters: Mapping[End, Mapping[str, int]] | None = None,
    counters_complete: bool = False,
    errors: Iterable[str] = (),
    poll_s: float = 0.0,
    took_s: float = 0.0,
) -> FabricReport:
    names = sorted({name for values in (counters or {}).values() for name in values})
    column = {name: i for i, name in enumerate(names)}
    rows: list[PortCounterFact] = []
    for end, values in (counters or {}).items():
        row: list[int | None] = [None] * len(names)
        for name, value in values.items():
            row[column[name]] = int(value)
        rows.append(PortCounterFact(end.node, end.port, row))
    return FabricReport(
        subnet=subnet,
        time=time,
        source=source,
        nodes=[
            FabricNodeFact(n.name, n.kind.value, n.guid, n.lid, n.ports, n.description, n.tier)
            for n in graph.nodes.values()
        ],
        links=[
            FabricLinkFact(
                link.a.node,
                link.a.port,
                link.b.node,
                link.b.port,
                link.width,
                link.speed,
                link.up,
                link.a_lid,
                link.b_lid,
                graph.could_be.get(link.key, ""),
            )
            for link in graph.links
        ],
        idle_ports=[IdlePortFact(end.node, end.port, state) for end, state in graph.idle_ports.items()],
        counter_names=names,
        counters=rows,
        counters_complete=counters_complete,
        conflicts=graph.conflicts[:1000],
        errors=list(errors)[:100],
        poll_s=poll_s,
        took_s=took_s,
    )


def graph_from_report(report: FabricReport) -> FabricGraph:
    graph = FabricGraph(source=report.source, conflicts=list(report.conflicts))
    for fact in report.nodes:
        graph.add_node(
            Node(
                fact.name,
                NodeKind(fact.kind),
                fact.guid,
                fact.ports,
                fact.lid,
                fact.description,
                tier=fact.tier,
                host=fact.name.split("/", 1)[0] if fact.kind != "switch" and "/" in fact.name else "",
            )
        )
    for link_fact in report.links:
        link = graph.add_link(
            Link(
                End(link_fact.a, link_fact.a_port),
                End(link_fact.b, link_fact.b_port),
                link_fact.width,
                link_fact.speed,
                link_fact.up,
                link_fact.a_lid,
                link_fact.b_lid,
            )
        )
        if link_fact.note:
            graph.could_be[link.key] = link_fact.note
    for idle in report.idle_ports:
        graph.idle_ports[End(idle.node, idle.port)] = idle.state
    return graph


def readings_from_report(report: FabricReport) -> Readings:
    names = report.counter_names
    return {
        End(row.node, row.port): {
            name: value for name, value in zip(names, row.values, strict=True) if value is not None
        }
        for row in report.counters
    }
