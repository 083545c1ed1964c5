"""The control plane's fabric in the hands of its consumers: a hang across the captured fat tree is put on the
uplink the fabric service found down, and `nccl compare --live-fabric` takes the run's rails from the plane."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpufleet.control.service import ControlPlane
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph
from gpufleet.fabric.report import report_from_graph
from gpufleet.health.detectors.seen import JobView
from gpufleet.model import RootCause
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.state import Database
from tests import apiclient
from tests.clirun import gpufleet
from tests.conftest import CAPTURES
from tests.control.helpers import T0, Clock, batch, plane_at

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"
UPLINK = (End("leaf3", 35), End("spine1", 3))


def _graph(without: tuple[End, End] | None = None) -> FabricGraph:
    graph = from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))
    if without is not None:
        graph.links = [link for link in graph.links if link.key != without]
        graph._by_end = None
    return graph


def _plane_with_an_uplink_down(clock: Clock) -> ControlPlane:
    """Two polls of the captured subnet: the second has lost leaf3's uplink to spine1."""
    plane = plane_at(Database(":memory:"), clock)
    plane.ingest(batch("sm-host", [], fabric=[report_from_graph(_graph(), subnet="default", time=T0)]))
    clock.now = T0 + 30
    later = report_from_graph(_graph(UPLINK), subnet="default", time=clock.now)
    plane.ingest(batch("sm-host", [], fabric=[later], when=clock.now))
    return plane


def test_a_hang_across_a_leaf_whose_uplink_went_down_joins_the_link_incident() -> None:
    clock = Clock()
    plane = _plane_with_an_uplink_down(clock)
    (link,) = plane.book.open_incidents()
    assert link.cause is RootCause.ib_link_down and link.entity.name == "leaf3/35<->spine1/3"
    ranks = (("node05", 0), ("node05", 1), ("node01", 0), ("node01", 1))
    util = np.array([100.0, 100.0, 0.0, 100.0])  # node01's first rank never arrived
    for k in range(60):
        clock.now = T0 + 30 + k
        plane.correlator.tick(clock.now, [JobView("train", ranks, T0 + 30, 2.0)], lambda j: util, list)
    assert [i.id for i in plane.book.open_incidents()] == [link.id]  # no incident blaming node01's GPU
    assert link.effects == [
        "job train hung in a collective: ranks on node05 go through leaf3, whose uplink leaf3/35 <-> spine1/3 is down"
    ]
    facts = plane.fabric_facts(["node01", "node05"])
    assert facts is plane.fabric_facts(["node05", "node01"])  # kept until the next poll
    assert facts is not None and facts.rails["node01"][0].leaf == "leaf1"


def test_without_a_fabric_there_are_no_facts() -> None:
    plane = plane_at(Database(":memory:"), Clock())
    assert plane.fabric_facts(["node01"]) is None


def test_compare_takes_rails_from_the_control_planes_fabric(tmp_path: Path) -> None:
    plane = _plane_with_an_uplink_down(Clock())
    header = [
        "#  Rank  0 Group  0 Pid  11 on node05 device  0 [0x18] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid  21 on node06 device  0 [0x18] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "  1073741824     268435456     float     sum      -1    20000   53.69   53.69      0"
        "    20000   53.69   53.69      0",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 53.69 ",
    ]
    run = tmp_path / "run.txt"
    run.write_text("\n".join(header) + "\n")
    with apiclient.serving(apiclient.app(plane, secret="tok")) as url:
        env = {"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": "tok"}
        res = gpufleet("nccl", "compare", str(run), "--live-fabric", "-o", "json", env=env)
        both = gpufleet("nccl", "compare", str(run), "--live-fabric", "--fabric", str(CAPTURE), env=env)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["topology"]["nics_per_node"], data["topology"]["nic_gbps"]) == (2, 200.0)
    assert data["fabric"]["source"] == "the control plane's fabric"
    assert both.returncode != 0 and "give one of them" in both.stderr
