"""The twin's nodes report the fabric settings of a DGX H100 set up as NVIDIA documents it (InfiniBand at MTU 4096;
RoCE with jumbo frames and priority 3 lossless), which the control plane finds nothing wrong with; a node whose PFC
an operator set to another priority is a finding naming that node, an incident, through the door."""

from __future__ import annotations

from gpufleet.fabric.settings import judge
from gpufleet.model import EntityKind, RootCause
from gpufleet.sim.fabric_settings import host_settings
from gpufleet.sim.fleet import node_inventory
from gpufleet.sim.twin import Twin
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests import apiclient
from tests.twins import run_door, small_twin


def roce_twin(nodes: int = 3) -> Twin:
    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "n", "count": nodes, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 8}}
            ],
            "fabric": {"leafRadix": 16, "transport": "roce"},
        }
    )
    return Twin(build_cluster("t", body), seed=1)


def test_an_infiniband_twin_reports_every_rail_at_4096_and_nothing_is_wrong() -> None:
    twin = small_twin(nodes=3, job_nodes=0)
    read = node_inventory(twin, "n-001").fabric_settings
    assert read is not None and read.host == "n-001" and read.roce == []
    assert {(p.link_layer, p.state, p.active_mtu, p.max_mtu) for p in read.ports} == {
        ("InfiniBand", "Active", 4096, 4096)
    }
    assert len(read.ports) == 8
    assert judge([host_settings(twin, n.name) for n in twin.cluster.nodes]) == []  # type: ignore[misc]


def test_a_roce_twin_is_lossless_on_priority_3() -> None:
    twin = roce_twin()
    read = host_settings(twin, "n-000")
    assert read is not None and len(read.roce) == 8
    assert {(p.link_layer, p.netdev_mtu, p.active_mtu) for p in read.ports} == {("Ethernet", 9000, 4096)}
    assert {(q.trust, tuple(q.pfc or []), q.traffic_class) for q in read.roce} == {("dscp", (3,), 106)}
    assert judge([host_settings(twin, n.name) for n in twin.cluster.nodes]) == []  # type: ignore[misc]


def test_one_node_with_another_pfc_priority_is_an_incident_on_that_node() -> None:
    twin = roce_twin()
    twin.roce_pfc["n-002"] = [4]
    plane, _fleet = run_door(twin, 60.0)
    found = [(f.kind, str(f.port)) for _, f in plane.fabric.findings()]  # type: ignore[attr-defined]
    mismatched = sorted(port for kind, port in found if kind == "roce-pfc-mismatch")
    assert mismatched == [
        f"n-002/{nic.name}/1" for nic in sorted(twin.cluster.node("n-002").nics, key=lambda n: n.name)
    ]
    assert {port.split("/")[0] for _, port in found} == {"n-002"}  # the others agree with each other
    opened = [i for i in plane.book.open_incidents() if i.cause is RootCause.fabric_config]  # type: ignore[attr-defined]
    assert opened and {(i.entity.kind, i.entity.node) for i in opened} == {(EntityKind.port, "n-002")}
    # per port, one incident: the traffic class now lossy there, and the mismatch with the other hosts' PFC
    assert all(any("one lossless priority" in e.text for e in i.evidence) for i in opened)
    # and the fabric's alarms over HTTP name the host and say the fix
    alarms = apiclient.client(plane).get("/api/v1/fabric/alarms", headers=apiclient.AUTH).json()
    pfc = [a for a in alarms if a["kind"] == "roce-pfc-mismatch"]
    assert len(pfc) == 8 and {a["port"].split("/")[0] for a in pfc} == {"n-002"}
    assert all("n-000, n-001" in a["message"] and "one lossless priority" in a["fix"] for a in pfc)
