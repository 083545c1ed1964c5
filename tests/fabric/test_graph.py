"""The fabric graph's end-to-link index: kept current as links are added, so learning L links is O(L)."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind


class _CountedLinks(list[Link]):
    """A graph's link list that counts the links any full pass over it visits (the index's rebuilds)."""

    visited = 0

    def __iter__(self) -> Iterator[Link]:
        for link in super().__iter__():
            self.visited += 1
            yield link


def _links(count: int) -> list[Link]:
    return [Link(End(f"leaf{i // 32}", 1 + i % 32), End(f"hca{i}", 1)) for i in range(count)]


def test_learning_links_one_by_one_stays_linear() -> None:
    """Each new cable is looked up before it is added, the way the fabric service learns a baseline: the index is
    built once and kept, not rebuilt after every add (8,000 links used to visit 32 million)."""
    graph = FabricGraph(links=_CountedLinks())
    learned = _links(8_000)
    for link in learned:
        assert graph.link_at(link.a) is None and graph.link_at(link.b) is None
        graph.add_link(link)
    assert isinstance(graph.links, _CountedLinks)
    assert graph.links.visited <= len(learned)  # the first lookup's build, on an empty graph, visits nothing
    for link in learned:
        assert graph.link_at(link.a) is link and graph.link_at(link.b) is link
        assert graph.peer(link.b) == link.a


def test_index_built_late_sees_every_link() -> None:
    """Links added before the first lookup are indexed when it comes; links added after, at once."""
    graph = FabricGraph()
    graph.add_node(Node("leaf0", NodeKind.switch))
    early, late = _links(2)
    graph.add_link(early)
    assert graph.link_at(early.b) is early
    graph.add_link(late)
    assert graph.link_at(late.a) is late
    assert graph.link_at(End("leaf0", 99)) is None


def test_learning_through_the_fabric_service_stays_linear() -> None:
    """The service reads its baseline of 8,000 cables while learning 8,000 new cables from a poll in a few whole passes
    (validation, the index), not one pass per cable learned."""
    from gpufleet.control.fabric import FabricService
    from gpufleet.fabric.report import report_from_graph
    from gpufleet.health.thresholds import load_thresholds

    polled = FabricGraph(source="live")
    for i in range(250):
        polled.add_node(Node(f"leaf{i}", NodeKind.switch, guid=f"0x{i + 1:016x}", ports=64))
    for i in range(8_000):
        polled.add_node(Node(f"hca{i}", NodeKind.hca, guid=f"0x{0x10000 + i:016x}", ports=1))
    for link in _links(8_000):
        polled.add_link(link)
    service = FabricService(load_thresholds())
    empty = FabricGraph(source="live", nodes=dict(polled.nodes))
    service.take(report_from_graph(empty, subnet="s1", time=100.0, source="live"))
    baseline = service.subnets["s1"].baseline
    counted = _CountedLinks(baseline.links)
    baseline.links = counted
    service.take(report_from_graph(polled, subnet="s1", time=101.0, source="live"))
    assert len(baseline.links) == 8_000
    assert counted.visited <= 10 * 8_000  # before the index was kept: 64 million
