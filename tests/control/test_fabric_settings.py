"""The fabric service judges the watching host's settings with every poll: their findings go to the incident
pipeline and /api/v1/fabric shows the settings; a poll that fixes them clears the findings."""

from __future__ import annotations

import msgspec

from gpufleet.control import fabric as views
from gpufleet.control.fabric import FabricService
from gpufleet.fabric.graph import End, FabricGraph, Link, Node, NodeKind
from gpufleet.fabric.report import report_from_graph
from gpufleet.health.thresholds import load_thresholds
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, SubnetManagerConfig
from gpufleet.model.observe import FabricReport


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
