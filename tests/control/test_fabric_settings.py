"""The fabric service judges the watching host's settings with every poll: their findings go to the incident
pipeline and /api/v1/fabric shows the settings; a poll that fixes them clears the findings."""

from __future__ import annotations

from pathlib import Path

import msgspec

from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.report import report_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, RoceQosSetting, SubnetManagerConfig
from gpufleet.model.observe import Batch, FabricReport, NodeInventory
from gpufleet.state import Database
from tests.control.helpers import T0, plane_at


def two_level() -> FabricGraph:
    graph = FabricGraph(source="live")
    for name in ("leaf-1", "spine-1"):
        graph.add_node(Node(name, NodeKind.switch, f"0x{len(graph.nodes) + 1:016x}", 36))
    graph.add_node(Node("gpu-01/mlx5_0", NodeKind.hca, "0x00000000000000aa", 1, host="gpu-01"))
    graph.add_link(Link(End("leaf-1", 1), End("gpu-01/mlx5_0", 1), 4, "HDR"))
    graph.add_link(Link(End("leaf-1", 33), End("spine-1", 1), 4, "HDR"))
    return graph


def poll(time: float, settings: HostFabricSettings) -> FabricReport:
    report = report_from_graph(two_level(), subnet="mlx5_0/1", time=time)
    report.settings = [settings]
    return report


def test_settings_findings_come_and_go_with_the_polls() -> None:
    service = FabricService(load_thresholds())
    minhop = HostFabricSettings(
        "sm-01",
        ports=[HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 4096, 4096)],
        opensm=SubnetManagerConfig("/etc/opensm/opensm.conf", sm_priority=0, sweep_interval=10),
        opensm_running=True,
        sharp_am_running=False,
    )
    out = service.take(poll(1.0, minhop))
    assert [f.entity.node for f in out if "OpenSM routes" in f.summary] == ["sm-01"]
    assert ("mlx5_0/1", "opensm-routing-engine") in [(s, f.kind) for s, f in service.findings()]
    [row] = views.summary(service)["subnets"]
    assert row["settings"][0]["opensm"]["routing_engines"] == [] and row["settings"][0]["host"] == "sm-01"
    # through the wire and back: the field survives msgspec's round trip
    again = msgspec.json.decode(msgspec.json.encode(poll(2.0, minhop)), type=FabricReport)
    assert again.settings == [minhop]
    ftree = msgspec.structs.replace(minhop, opensm=SubnetManagerConfig("/etc/opensm/opensm.conf", ["ftree"]))
    assert service.take(poll(3.0, ftree)) == []
    assert not [f for _, f in service.findings() if f.kind.startswith("opensm")]


def test_the_ports_mtu_read_through_smps_stands_until_read_again() -> None:
    service = FabricService(load_thresholds())
    watcher = HostFabricSettings("sm-01")

    def by_sm(mtu: int) -> list[HostFabricSettings]:
        return [
            HostFabricSettings(
                "gpu-01", [HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 4096, 4096)], source="sm"
            ),
            HostFabricSettings("gpu-02", [HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", mtu, 4096)], source="sm"),
        ]

    def mismatches() -> list[str]:
        return [str(f.port) for _, f in service.findings() if f.kind == "ib-mtu-mismatch"]

    report = poll(1.0, watcher)
    report.settings += by_sm(2048)
    service.take(report)
    assert mismatches() == ["gpu-02/mlx5_0/1"]
    service.take(poll(2.0, watcher))  # a poll that did not read the ports: the last read stands
    assert mismatches() == ["gpu-02/mlx5_0/1"]
    report = poll(3.0, watcher)
    report.settings += by_sm(4096)
    service.take(report)
    assert mismatches() == []


def roce_host(name: str, pfc: list[int], netdev_mtu: int = 9000) -> HostFabricSettings:
    active = 4096 if netdev_mtu >= 4200 else 1024  # RoCE's MTU: the largest IB MTU that fits the netdev's
    return HostFabricSettings(
        name,
        ports=[HcaPortSetting("mlx5_0", 1, "Ethernet", "Active", active, 4096, "eth0", netdev_mtu)],
        roce=[RoceQosSetting("eth0", "mlx5_0", "dscp", pfc, ecn_np=pfc, ecn_rp=pfc)],
    )


def test_the_nodes_own_settings_are_judged_across_hosts() -> None:
    """Without a fabric watcher (a RoCE fleet): each node's own read, from its inventory, judged with the others'
    when next asked (once for a fleet's inventories); the findings name the host, come with every turn of the
    control loop and go when the setting is fixed."""
    service = FabricService(load_thresholds())
    service.take_host_settings("gpu-01", roce_host("gpu-01", [3]))
    service.take_host_settings("gpu-02", roce_host("gpu-02", [3]))
    assert service.settings_findings(2.0) == [] and service.settings_judged == 1  # two inventories, one judgement
    service.take_host_settings("gpu-03", roce_host("gpu-03", [4]))
    [mismatch] = [f for f in service.settings_findings(3.0) if "PFC on priorities 4" in f.summary]
    assert (mismatch.entity.node, mismatch.entity.name) == ("gpu-03", "mlx5_0")
    assert "(gpu-01, gpu-02) on 3" in mismatch.summary
    assert [(s, f.kind) for s, f in service.findings()] == [("hosts", "roce-pfc-mismatch")]
    assert [f.entity.node for f in service.settings_findings(4.0, unwatched_only=True)] == ["gpu-03"]
    # the same inventory again: nothing to judge; a RoCE netdev at 1500 keeps RoCE at 1024
    judged = service.settings_judged
    service.take_host_settings("gpu-03", roce_host("gpu-03", [4]))
    service.settings_findings(5.0)
    assert service.settings_judged == judged
    service.take_host_settings("gpu-02", roce_host("gpu-02", [3], netdev_mtu=1500))
    assert sorted(f.kind for _, f in service.findings()) == ["roce-mtu", "roce-pfc-mismatch"]
    # fixed on the hosts; a node that no longer sends settings is forgotten
    service.take_host_settings("gpu-03", roce_host("gpu-03", [3]))
    service.take_host_settings("gpu-02", None)
    assert service.findings() == [] and sorted(service.host_settings) == ["gpu-01", "gpu-03"]


def test_a_nodes_own_read_joins_its_watchers_subnet() -> None:
    """An HCA the watcher discovered is its subnet's: a node's MTU below the watcher host's is that subnet's
    finding, pushed with its polls; the node's own read stands for its host over the watcher's."""
    service = FabricService(load_thresholds())
    watcher = HostFabricSettings("sm-01", ports=[HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 4096, 4096)])
    service.take(poll(1.0, watcher))
    slow = HostFabricSettings("gpu-01", ports=[HcaPortSetting("mlx5_0", 1, "InfiniBand", "Active", 2048, 4096)])
    service.take_host_settings("gpu-01", slow)
    [found] = service.settings_findings(2.0)
    assert found.entity.node == "gpu-01" and "other HCAs on the fabric (sm-01) run at 4096" in found.summary
    assert [(s, f.kind) for s, f in service.findings()] == [("mlx5_0/1", "ib-mtu-mismatch")]
    assert service.settings_findings(3.0, unwatched_only=True) == []
    assert [f.entity.node for f in service.take(poll(4.0, watcher))] == ["gpu-01"]
    service.take_host_settings("sm-01", msgspec.structs.replace(watcher, ports=slow.ports))
    # sm-01's own read (2048 too) stands over its watcher's: no mismatch, both below what they support
    assert sorted(f.kind for _, f in service.findings()) == ["ib-mtu-below-capability"] * 2


def test_the_nodes_settings_come_back_with_their_inventories_after_a_restart(tmp_path: Path) -> None:
    """Through the plane's ingest: the inventories' settings are judged and the finding is an incident on the
    node's port; a control plane started again on the same state judges the stored inventories' settings."""
    db = tmp_path / "cp.db"
    plane = plane_at(Database(db), lambda: T0)
    for k, pfc in enumerate(([3], [3], [5])):
        node = f"gpu-0{k + 1}"
        inventory = NodeInventory(hostname=node, fabric_settings=roce_host(node, pfc))
        plane.ingest(Batch(1, node, "i", node, T0, inventory=inventory))
    plane.tick()
    opened = [i for i in plane.book.open_incidents() if "PFC on priorities 5" in i.summary]
    assert [(i.entity.node, i.entity.name) for i in opened] == [("gpu-03", "mlx5_0")]
    again = plane_at(Database(db), lambda: T0 + 60.0)
    assert sorted(again.fabric.host_settings) == ["gpu-01", "gpu-02", "gpu-03"]
    assert [f.kind for _, f in again.fabric.findings()] == ["roce-pfc-mismatch"]
