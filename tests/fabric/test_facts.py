"""The facts hang attribution reads, from the real capture of ibsim's fat tree and findings on its cables."""

from __future__ import annotations

from gpufleet.fabric.discover import from_ibnetdiscover
from gpufleet.fabric.facts import hang_facts
from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph
from gpufleet.health.correlation import suspect
from gpufleet.model import Entity, EntityKind, RootCause, Severity
from gpufleet.model.fabric_facts import HostRail
from gpufleet.model.observe import Finding
from gpufleet.parsers.infiniband.diags import parse_ibnetdiscover
from tests.conftest import CAPTURES

CAPTURE = CAPTURES / "ibsim" / "ibnetdiscover.txt"


def _graph() -> FabricGraph:
    return from_ibnetdiscover(parse_ibnetdiscover(CAPTURE.read_text()))


def _pushed(found: FabricFinding, cause: RootCause) -> Finding:
    """Roughly what the fabric service pushes for a finding (the test needs only its identity)."""
    entity = (
        Entity(EntityKind.link, name=f"{found.ends[0]}<->{found.ends[1]}")
        if found.ends
        else Entity(EntityKind.link, name=str(found.port))
    )
    return Finding(0.0, cause, entity, Severity(found.severity), found.message, found.message, "fabric")


def test_rails_cables_and_uplinks_of_a_jobs_hosts() -> None:
    flap = FabricFinding("link-flap", Severity.critical, "flapping", "reseat", (End("leaf3", 35), End("spine1", 3)))
    errors = FabricFinding(
        "symbol-errors", Severity.warning, "errors", "clean", (End("node05/mlx5_0", 1), End("leaf3", 1))
    )
    downed_port = FabricFinding("link-down", Severity.critical, "down", "check", port=End("leaf4", 36))
    congested = FabricFinding("xmit-discards", Severity.warning, "discards", "", port=End("leaf1", 36))
    info = FabricFinding("link-flap", Severity.info, "once", "", (End("leaf1", 36), End("spine2", 1)))
    problems = [
        (flap, _pushed(flap, RootCause.ib_link_flap)),
        (errors, _pushed(errors, RootCause.ib_symbol_errors)),
        (downed_port, _pushed(downed_port, RootCause.ib_link_down)),
        (congested, _pushed(congested, RootCause.ib_congestion)),
        (info, _pushed(info, RootCause.ib_link_flap)),
    ]
    facts = hang_facts(_graph(), problems, ["node05.cluster.local", "node01", "nowhere"])
    assert facts.rails["node05.cluster.local"] == (
        HostRail("node05/mlx5_0/1", 0, "leaf3"),
        HostRail("node05/mlx5_0/2", 1, "leaf4"),
    )
    assert "nowhere" not in facts.rails
    ((cable,),) = facts.cables.values()
    assert cable.link == "node05/mlx5_0/1 <-> leaf3/1" and cable.state == "counts symbol errors"
    assert [p.link for p in facts.uplinks["leaf3"]] == ["leaf3/35 <-> spine1/3"]
    assert [(p.link, p.state) for p in facts.uplinks["leaf4"]] == [("leaf4/36 <-> spine2/4", "is down")]
    assert "leaf1" not in facts.uplinks  # congestion does not stop a collective; an info finding is no problem
    found = suspect(["node05.cluster.local", "node01"], facts)
    assert found is not None and found[0].link == "leaf3/35 <-> spine1/3"
    assert found[1] == "ranks on node05.cluster.local go through leaf3, whose uplink leaf3/35 <-> spine1/3 is flapping"
