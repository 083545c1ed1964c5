"""A node agent reads its own host's fabric settings (sources/infiniband/settings.py's reader, on a sysfs tree built
in the test as mlx5 writes it and the tools' real captures): at its start and every few minutes on a thread of its
own, nothing on a host without an HCA; its inventory carries the latest read and goes out again when a read
changes; and through the real HTTP door the control plane keeps what the node read."""

from __future__ import annotations

import time
from pathlib import Path

from gpufleet.agent.fabric_settings import FabricSettingsWatch, settings_watch, sysfs_root
from gpufleet.agent.host import host_agent
from gpufleet.control.service import ControlPlane
from gpufleet.remediate.backends.observe import ObserveOnlyBackend
from gpufleet.state import Database
from tests import apiclient
from tests.clirun import gpufleet
from tests.sources.infiniband.test_settings import host_tree, tools


def test_a_host_without_an_hca_or_with_reading_off_is_not_read(tmp_path: Path) -> None:
    assert settings_watch("gpu-01", tmp_path / "no-ib", 600.0) is None
    host_tree(tmp_path)
    ib = tmp_path / "sys/class/infiniband"
    assert settings_watch("gpu-01", ib, 0.0) is None and settings_watch("gpu-01", ib, None) is None
    assert sysfs_root(ib) == tmp_path and sysfs_root(Path("/sys/class/infiniband")) == Path("/")


def test_the_watch_reads_the_hosts_tree_and_tells_a_changed_read(tmp_path: Path) -> None:
    host_tree(tmp_path)
    watch = settings_watch("gpu-01", tmp_path / "sys/class/infiniband", 600.0, run=tools)
    assert watch is not None and watch.latest is None
    told: list[int] = []
    watch.changed = lambda: told.append(watch.reads)
    read = watch.read_now()
    assert read.host == "gpu-01" and watch.latest == read
    assert [(p.device, p.port, p.active_mtu) for p in read.ports][:2] == [("mlx4_0", 1, 4096), ("mlx4_0", 2, 4096)]
    [qos] = read.roce
    assert (qos.netdev, qos.trust, qos.pfc, qos.ecn_rp) == ("eth2", "dscp", [0, 2, 6, 7], [3])
    assert read.opensm is not None and read.opensm.routing_engines == ["ftree"]
    watch.read_now()  # the same settings: nothing to send again
    assert told == [1] and watch.reads == 2
    (tmp_path / "sys/class/net/eth2/mtu").write_text("9000\n")
    assert watch.read_now().ports[-1].netdev_mtu == 9000 and told == [1, 3]


def test_the_thread_reads_at_its_start(tmp_path: Path) -> None:
    host_tree(tmp_path)
    watch = settings_watch("gpu-01", tmp_path / "sys/class/infiniband", 600.0, run=tools)
    assert watch is not None
    watch.start()
    try:
        for _ in range(400):  # the first read, without waiting the 10 minutes
            if watch.latest is not None:
                break
            time.sleep(0.025)
    finally:
        watch.stop()
    assert watch.latest is not None and watch.latest.host == "gpu-01" and watch.reads == 1 and not watch.alive


def test_the_host_agents_inventory_carries_the_read_and_goes_out_when_it_changes(tmp_path: Path) -> None:
    host_tree(tmp_path)
    built = host_agent(
        host="127.0.0.1", port=0, interval=1.0, data_dir=tmp_path / "agent", control_plane="http://127.0.0.1:9",
        token=lambda: None, node="gpu-01", kmsg_file=None, ib_sysfs=tmp_path / "sys/class/infiniband", bmc=None,
        dcgm=None, attribution=None,
    )  # fmt: skip
    [watch] = [s for s in built.stoppers if isinstance(s, FabricSettingsWatch)]
    edge = built.edge
    assert edge is not None
    first = edge.inventory.due(0.0, edge.read_inventory)
    assert first is not None and first.fabric_settings is None  # sent before the first read ends
    assert edge.inventory.due(1.0, edge.read_inventory) is None  # a minute between two looks
    watch.read_now()  # this machine's own tools (ibv_devinfo, mlnx_qos) or what their absence says
    sent = edge.inventory.due(2.0, edge.read_inventory)
    assert sent is not None and sent.fabric_settings is not None
    assert sent.fabric_settings.host == "gpu-01"
    ports = [(p.device, p.port, p.link_layer) for p in sent.fabric_settings.ports]
    assert ("mlx5_2", 1, "Ethernet") in ports and ("mlx4_0", 1, "InfiniBand") in ports
    assert sent.fabric_settings.opensm_running is True


def test_the_settings_reach_the_control_plane_through_the_door(tmp_path: Path) -> None:
    host_tree(tmp_path)
    plane = ControlPlane(Database(tmp_path / "cp.db"), ObserveOnlyBackend(lambda: []))
    kern = tmp_path / "kern.log"
    kern.write_text("")
    env = {"GPUFLEET_TOKEN": apiclient.TOKEN, "GPUFLEET_HOME": str(tmp_path)}
    with apiclient.serving(apiclient.app(plane)) as url:
        ran = gpufleet(
            "agent", "--control-plane", url, "--node", "gpu-01", "--port", "0", "--interval", "0.5s",
            "--run-for", "3s", "--kmsg-file", str(kern), "--ib-sysfs", str(tmp_path / "sys/class/infiniband"),
            "--data-dir", str(tmp_path / "agent"), "--no-bmc", "--dcgm", "off", "--fabric-settings-every", "10m",
            env=env,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    kept = plane.fabric.host_settings["gpu-01"]
    assert {(p.device, p.port) for p in kept.ports} == {
        ("mlx4_0", 1), ("mlx4_0", 2), ("mlx4_1", 1), ("mlx4_1", 2), ("mlx5_2", 1)
    }  # fmt: skip
    assert [(q.netdev, q.ecn_rp) for q in kept.roce] == [("eth2", [3])]
    inventory = plane.fleet.nodes["gpu-01"].inventory
    assert inventory is not None and inventory.fabric_settings == kept
    bad = gpufleet("agent", "--fabric-settings-every", "often", "--control-plane", "http://127.0.0.1:9")
    assert bad.returncode != 0 and "--fabric-settings-every 'often'" in bad.stderr
