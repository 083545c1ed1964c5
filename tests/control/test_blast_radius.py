"""A leaf's uplink goes down in a real fabric report (ibsim's fat tree): the incident names the leaf, the hosts under
it and the job running on them, not the job elsewhere."""

from __future__ import annotations

import time
from pathlib import Path

from gpufleet.control.blast_radius import incident_blast_radius
from gpufleet.control.fabric import FabricService
from gpufleet.control.service import ControlPlane
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.report import report_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model.observe import SCHEMA_VERSION, Batch, FabricReport, JobFact, RankFact
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from tests import apiclient
from tests.control.helpers import batch

ROOT = Path(__file__).parents[2]
CAPTURE = ROOT / "tests" / "captures" / "ibsim" / "ibnetdiscover.txt"
MANIFEST = ROOT / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


def _poll(at: float, drop: tuple[str, int] | None = None) -> FabricReport:
    graph = from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))
    if drop is not None:
        gone = graph.link_at(End(*drop))
        assert gone is not None
        graph.links.remove(gone)
        graph.idle_ports.update({gone.a: "Down/Polling", gone.b: "Down/Polling"})
    return report_from_graph(graph, subnet="default", time=at)


def _push(plane: ControlPlane, report: FabricReport) -> None:
    plane.ingest(Batch(v=SCHEMA_VERSION, agent="watch", incarnation="i", node="sm", sent=time.time(), fabric=[report]))


def _job(plane: ControlPlane, name: str, node: str, first_rank: int) -> None:
    ranks = [RankFact(first_rank + g, g, 1.0) for g in range(8)]
    plane.ingest(batch(node, [], jobs=[JobFact(name, ranks, world_size=16, last_step_time=time.time())]))


def test_a_leaf_uplink_down_names_the_hosts_under_the_leaf_and_their_jobs(tmp_path: Path) -> None:
    service = FabricService(load_thresholds(), load_expected(MANIFEST))
    plane = ControlPlane(Database(tmp_path / "state.db"), ObserveOnlyBackend(lambda: []), fabric=service)
    _job(plane, "train", "node03", 0)  # under leaf2
    _job(plane, "train", "node05", 8)  # under leaf3 and leaf4
    _job(plane, "eval", "node07", 0)
    _push(plane, _poll(1000.0))
    _push(plane, _poll(1030.0, drop=("leaf2", 35)))  # leaf2's uplink to spine1
    bodies = [plane.incident(row["id"]) for row in plane.incidents()]
    radii = {b["id"]: incident_blast_radius(plane.fabric, plane.fleet.jobs(), b) for b in bodies}
    (down,) = [b for b in bodies if "leaf2/35" in b["entity"]["name"] and b["cause"] == "ib-link-down"]
    radius = radii[down["id"]]
    assert radius == {
        "switch": "leaf2",
        "tier": "leaf",
        "hosts": ["node03", "node04"],
        "jobs": [{"job": "train", "nodes": ["node03"], "ranks_there": 8}],
    }
    # an incident that names no switch has none
    assert all(radii[b["id"]] is None for b in bodies if b["entity"]["kind"] != "link")
    # the API's incident detail carries it, in its typed schema
    detail = apiclient.client(plane).get(f"/api/v1/incidents/{down['id']}")
    assert detail.status_code == 200 and detail.json()["blast_radius"] == radius


def test_a_spines_hosts_are_those_under_its_leaves() -> None:
    from gpufleet.control.blast_radius import hosts_under
    from gpufleet.fabric.topology import topology_from_graph

    topology = topology_from_graph(from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text())))
    # the capture has leaf1's cable to spine1 unplugged: spine1 carries no traffic of node01 and node02
    assert hosts_under(topology, "spine1") == [f"node0{i}" for i in range(3, 9)]
    assert hosts_under(topology, "spine2") == [f"node0{i}" for i in range(1, 9)]
