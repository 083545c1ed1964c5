"""The fabric service keeps what it learned across a restart of the control plane: a cable it saw up and that is
down is still a link down (not a missing cable), the counters go on from their last values, and isolated ports
stay listed."""

from __future__ import annotations

import time
from pathlib import Path

from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.control.service import ControlPlane
from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.intended import load_expected
from gpufleet.fabric.report import report_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model.observe import SCHEMA_VERSION, Batch, FabricReport
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from gpufleet.remediate.backends.base import IsolatesFabricPorts
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database

ROOT = Path(__file__).parents[2]
CAPTURE = ROOT / "tests" / "captures" / "ibsim" / "ibnetdiscover.txt"
MANIFEST = ROOT / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"


class Switches(IsolatesFabricPorts):
    """Switch ports as a switch keeps them: the ones disabled."""

    def __init__(self) -> None:
        self.disabled: set[tuple[str, int]] = set()

    def set_switch_port(self, switch: str, port: int, lid: int | None, *, enable: bool) -> str:
        (self.disabled.discard if enable else self.disabled.add)((switch, port))
        return f"{switch}/{port} {'enabled' if enable else 'disabled'}"


def _plane(db: Database, switches: Switches) -> ControlPlane:
    service = FabricService(load_thresholds(), load_expected(MANIFEST))
    return ControlPlane(db, ObserveOnlyBackend(lambda: []), fabric=service, port_isolation=switches)


def _push(plane: ControlPlane, report: FabricReport) -> None:
    plane.ingest(Batch(v=SCHEMA_VERSION, agent="watch", incarnation="i", node="sm", sent=time.time(), fabric=[report]))


def _poll(at: float, *, drop: tuple[str, int] | None = None, symbol: int = 0) -> FabricReport:
    graph = from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))
    if drop is not None:
        gone = graph.link_at(End(*drop))
        assert gone is not None
        graph.links.remove(gone)
        graph.idle_ports.update({gone.a: "Down/Polling", gone.b: "Down/Polling"})
    counters = {End("node01/mlx5_0", 1): {"SymbolErrorCounter": symbol, "PortRcvErrors": 0}}
    return report_from_graph(graph, subnet="default", time=at, counters=counters)


def test_what_the_fabric_service_learned_survives_a_restart(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    switches = Switches()
    plane = _plane(db, switches)
    _push(plane, _poll(1000.0, symbol=5))
    _push(plane, _poll(1030.0, drop=("leaf2", 35), symbol=5))
    kinds = {(a["kind"], frozenset(a.get("ends") or ())) for a in views.alarms(plane.fabric)}
    assert ("link-down", frozenset({"leaf2/35", "spine1/2"})) in kinds
    assert "leaf1/2 disabled" in plane.port_action("tester", "isolate", "node02/mlx5_0/1")  # the switch side
    assert switches.disabled == {("leaf1", 2)}
    plane.close()
    db.close()

    again = _plane(Database(tmp_path / "state.db"), switches)
    assert set(again.fabric.isolated) == {End("leaf1", 2)}
    assert again.fabric.subnets["default"].report.time == 1030.0
    _push(again, _poll(1060.0, drop=("leaf2", 35), symbol=5))
    alarms = views.alarms(again.fabric)
    down = [a for a in alarms if set(a.get("ends") or ()) == {"leaf2/35", "spine1/2"}]
    assert [a["kind"] for a in down] == ["link-down"]  # not a missing cable: it was seen up before the restart
    assert not [a for a in alarms if a["kind"] == "symbol-errors"]  # counters went on from 5, not from zero


def test_each_subnet_is_checked_against_its_own_part_of_the_manifest(tmp_path: Path) -> None:
    compute = from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))
    storage = FabricGraph(source="manifest")
    storage.add_node(Node("stor-leaf", NodeKind.switch, ports=36, tier="leaf"))
    storage.add_node(Node("nas01/mlx5_1", NodeKind.hca, host="nas01"))
    storage.add_link(Link(End("stor-leaf", 1), End("nas01/mlx5_1", 1), 4, "HDR"))
    expected = load_expected(MANIFEST)  # the compute fabric, and a storage fabric on its own subnet
    for node in storage.nodes.values():
        expected.add_node(node)
    expected.add_link(storage.links[0])
    service = FabricService(load_thresholds(), expected)
    plane = ControlPlane(Database(tmp_path / "state.db"), ObserveOnlyBackend(lambda: []), fabric=service)
    _push(plane, report_from_graph(compute, subnet="mlx5_0/1", time=1000.0))
    _push(plane, report_from_graph(storage, subnet="mlx5_1/1", time=1000.0))
    assert set(plane.fabric.subnets) == {"mlx5_0/1", "mlx5_1/1"}
    alarms = views.alarms(plane.fabric)
    # neither subnet is blamed for the other's nodes; the compute one still misses the cable its capture lacks
    assert [(a["subnet"], a["kind"]) for a in alarms if a["kind"].startswith("missing")] == [
        ("mlx5_0/1", "missing-link")
    ]


def test_an_unchanged_poll_keeps_its_validation_and_a_restored_one_is_judged_again() -> None:
    """A poll that finds the fabric as the last one did is not validated again (its findings stand); the first poll
    after a restore is validated, though it found the same fabric as the poll kept."""
    service = FabricService(load_thresholds(), load_expected(MANIFEST))
    dropped = ("node01/mlx5_0", 1)
    first = {f.cause.value for f in service.take(_poll(100.0, drop=dropped))}
    again = service.take(_poll(130.0, drop=dropped))
    assert first and {f.cause.value for f in again} == first
    state = service.subnets["default"]
    kept = service.snapshot("default")
    assert kept is not None
    restored = FabricService(load_thresholds(), load_expected(MANIFEST))
    restored.restore([("default", kept[1], kept[2])], [])
    assert not restored.subnets["default"].validation
    after = restored.take(_poll(160.0, drop=dropped))
    assert {f.cause.value for f in after} == first
    assert [f.kind for f in restored.subnets["default"].validation] == [f.kind for f in state.validation]
