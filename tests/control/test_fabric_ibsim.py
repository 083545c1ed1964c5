"""The fabric service on a real subnet: ibsim's fat tree (2 spines, 4 leaves, 8 HCAs) brought up by OpenSM, polled
by the fabric watch with the real ibnetdiscover, iblinkinfo, ibqueryerrors and sminfo, its polls pushed through the
one door into a control plane that validates them against the intended cabling and judges the counters.

The manifest expects one cable more than is cabled and one link at a higher width: both findings name the right
ends. The ibsim console then takes an uplink down and raises a port's symbol-error and link-downed counters: one
poll later the service names exactly that link and that port, the incidents are open, OpenSM's re-sweep is seen,
and remediation isolates the bad port's switch port with the real `ibportstate`, audited.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.agent.fabric import FabricWatch
from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.control.service import ControlPlane
from gpufleet.fabric.intended import load_expected
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model import RootCause
from gpufleet.model.observe import SCHEMA_VERSION, Batch, FabricReport
from gpufleet.remediate.backends.fabric import IbPortState
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.sources.infiniband.diag_tools import FabricTools
from gpufleet.state import Database
from tests.ibsim import Fabric, fabric, wait_for  # noqa: F401

pytestmark = pytest.mark.real

EXAMPLE = Path(__file__).parents[2] / "src" / "gpufleet" / "examples" / "clusters" / "ibsim-fattree.yaml"
EXTRA_CABLE = ("spine1/5", "leaf1/5")  # in the manifest, not in the fabric
WIDER = ("leaf2/1", "node03/mlx5_0/1")  # cabled 4x, the manifest says 8x
TAKEN_DOWN = ("leaf2/35", "spine1/2")  # the uplink the ibsim console unlinks
BAD_PORT = "node01/mlx5_0/1"  # the port whose counters the console raises; leaf1/1 faces it


def _manifest(tmp_path: Path) -> Path:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    links = body["spec"]["fabric"]["links"]
    links.append({"a": EXTRA_CABLE[0], "b": EXTRA_CABLE[1]})
    for link in links:
        if {link["a"], link["b"]} == set(WIDER):
            link["width"] = 8
    path = tmp_path / "expected.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _ends(found: dict[str, Any]) -> set[str]:
    return set(found.get("ends") or [found.get("port")])


def test_a_real_subnet_through_the_fabric_service(fabric: Fabric, tmp_path: Path) -> None:  # noqa: F811
    service = FabricService(load_thresholds(), load_expected(_manifest(tmp_path)))
    isolation = IbPortState(env=fabric.env, cwd=str(fabric.work), timeout_s=20)
    holder: dict[str, ControlPlane] = {}
    db = Database(tmp_path / "state.db")
    backend = ObserveOnlyBackend(lambda: sorted(holder["plane"].fleet.nodes))
    plane = holder["plane"] = ControlPlane(db, backend, remediation="on", fabric=service, port_isolation=isolation)
    pushed: list[FabricReport] = []

    def push(reports: list[FabricReport]) -> None:
        pushed.extend(reports)
        plane.ingest(Batch(v=SCHEMA_VERSION, agent="fabric-watch", incarnation="i-1", node="sm-host",
                           sent=time.time(), fabric=reports))  # fmt: skip

    tools = FabricTools(timeout_s=20, env=fabric.env, cwd=str(fabric.work))
    watch = FabricWatch([tools], push, poll_s=5.0)

    # the cabling against the manifest
    [first] = watch.poll()
    assert not first.errors, first.errors
    assert (len([n for n in first.nodes if n.kind == "switch"]), len([n for n in first.nodes if n.kind == "hca"])) == (
        6,
        8,
    )
    alarms = views.alarms(service)
    missing = [a for a in alarms if a["kind"] == "missing-link"]
    assert [_ends(a) for a in missing] == [set(EXTRA_CABLE)]
    narrow = [a for a in alarms if a["kind"] == "link-width"]
    assert [_ends(a) for a in narrow] == [set(WIDER)]
    assert not [a for a in alarms if a["kind"] in ("link-down", "symbol-errors", "link-flap")]

    # faults through the ibsim console
    fabric.sim('Unlink "leaf2"[35]', "")
    for counter in ("SymbolErrorCounter=1234", "LinkDownedCounter=3"):
        fabric.sim(f'PerformanceSet "node01 mlx5_0"[1] PortCounters.{counter}', "has been set")
    [second] = watch.poll()  # one poll interval later
    assert not second.errors, second.errors
    alarms = views.alarms(service)
    down = [a for a in alarms if a["kind"] == "link-down"]
    assert [_ends(a) for a in down] == [set(TAKEN_DOWN)]
    physical = [a for a in alarms if a["kind"] in ("symbol-errors", "link-downed", "link-flap")]
    assert physical and all(BAD_PORT in _ends(a) for a in physical)
    events = views.events(service)
    assert [set(e["ends"]) for e in events if e["kind"] == "link-down"] == [set(TAKEN_DOWN)]
    causes = {inc.cause for inc in plane.book.open_incidents()}
    assert {RootCause.ib_link_down, RootCause.ib_symbol_errors} <= causes | {RootCause.ib_link_flap}
    assert RootCause.fabric_cabling in causes and RootCause.ib_link_degraded in causes

    # OpenSM sweeps again (every 5 s here): the change is seen to be swept
    def swept() -> bool:
        watch.poll()
        return any(e["kind"] == "sm-sweep" for e in views.events(service))

    wait_for(swept, "OpenSM's re-sweep after the link change", timeout_s=30.0)

    # remediation isolates the switch port that faces the bad port, with the real tool, and audits it
    plane.tick()
    isolated = [e for e in plane.store.audit_log.entries() if e.action == "isolate-port"]
    assert [e.decision for e in isolated if e.decision == "done"], [(e.decision, e.reason) for e in isolated]
    done = next(e for e in isolated if e.decision == "done")
    assert done.target.startswith("port/node01") and "leaf1" in done.reason and "port 1" in done.reason
    [after] = watch.poll()
    states = {(p.node, p.port): p.state for p in after.idle_ports}
    assert "Disabled" in states[("leaf1", 1)]
