"""This host's fabric settings read from a sysfs tree built in the test (the paths and contents mlx5 writes) and
the tools' real captures: HCA ports with their MTU, a RoCE port's netdev and lossless QoS, OpenSM's files, and the
processes that run."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.fabric.settings import judge
from gpufleet.sources.infiniband.settings import read_host_settings

CAPTURES = Path(__file__).parents[2] / "captures" / "infiniband"


def put(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")


def host_tree(root: Path) -> None:
    for dev in ("mlx4_0", "mlx4_1"):
        for port, state in ((1, "4: ACTIVE"), (2, "1: DOWN")):
            put(root, f"sys/class/infiniband/{dev}/ports/{port}/link_layer", "InfiniBand")
            put(root, f"sys/class/infiniband/{dev}/ports/{port}/state", state)
    # a RoCE port: its netdev at 1500, ECN on priority 3 only as reaction point, the default traffic class set
    put(root, "sys/class/infiniband/mlx5_2/ports/1/link_layer", "Ethernet")
    put(root, "sys/class/infiniband/mlx5_2/ports/1/state", "4: ACTIVE")
    put(root, "sys/class/infiniband/mlx5_2/ports/1/gid_attrs/ndevs/0", "eth2")
    put(root, "sys/class/infiniband/mlx5_2/tc/1/traffic_class", "Global tclass=160")
    put(root, "sys/class/net/eth2/mtu", "1500")
    for prio in range(8):
        put(root, f"sys/class/net/eth2/ecn/roce_rp/enable/{prio}", "1" if prio == 3 else "0")
        put(root, f"sys/class/net/eth2/ecn/roce_np/enable/{prio}", "1")
    put(root, "etc/opensm/opensm.conf", "routing_engine ftree\nsm_priority 3\n")
    put(root, "etc/opensm/partitions.conf", "Default=0x7fff,ipoib,mtu=5 : ALL=full ;")
    put(root, "proc/1/comm", "systemd")
    put(root, "proc/812/comm", "opensm")


def tools(argv: list[str]) -> str | None:
    if argv == ["ibv_devinfo"]:
        return (CAPTURES / "ibv_devinfo_mlx4_port2_down.txt").read_text()
    if argv == ["mlnx_qos", "-i", "eth2"]:
        return (CAPTURES / "mlnx_qos_ofed42_dscp_trust.txt").read_text()
    return None


def test_a_host_read_whole(tmp_path: Path) -> None:
    host_tree(tmp_path)
    settings = read_host_settings(tmp_path, tools, host="sm-01")
    ports = {(p.device, p.port): p for p in settings.ports}
    assert ports[("mlx4_0", 1)].state == "Active" and ports[("mlx4_0", 1)].active_mtu == 4096
    assert ports[("mlx4_1", 2)].state == "Down"
    roce = ports[("mlx5_2", 1)]
    assert (roce.link_layer, roce.netdev, roce.netdev_mtu) == ("Ethernet", "eth2", 1500)
    [qos] = settings.roce
    assert (qos.netdev, qos.device, qos.trust, qos.pfc) == ("eth2", "mlx5_2", "dscp", [0, 2, 6, 7])
    assert qos.ecn_rp == [3] and qos.ecn_np == list(range(8)) and qos.traffic_class == 160
    assert settings.opensm is not None and settings.opensm.routing_engines == ["ftree"]
    assert settings.opensm.sm_priority == 3 and settings.opensm.lines == {"routing_engine": 1, "sm_priority": 2}
    assert settings.opensm.partitions_file == "/etc/opensm/partitions.conf"
    assert [(p.name, p.mtu) for p in settings.opensm.partitions] == [("Default", 4096)]
    assert settings.opensm_running is True and settings.sharp_am_running is False
    assert settings.errors == []
    # judged: DSCP 40 (tclass 160) is priority 5, without PFC; ECN off as reaction point on PFC priorities
    kinds = sorted({f.kind for f in judge([settings])})
    assert kinds == ["roce-no-ecn", "roce-tc-lossy"]


def test_what_cannot_be_read_is_said(tmp_path: Path) -> None:
    put(tmp_path, "sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet")
    put(tmp_path, "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "ens1")
    settings = read_host_settings(tmp_path, lambda argv: None, host="gpu-01")
    assert [p.device for p in settings.ports] == ["mlx5_0"] and settings.ports[0].active_mtu is None
    assert len(settings.errors) == 2 and "ibv_devinfo" in settings.errors[0] and "mlnx_qos" in settings.errors[1]
    assert settings.opensm is None and settings.opensm_running is None


def test_soft_roce_gid_types_and_the_firewall(tmp_path: Path) -> None:
    put(tmp_path, "sys/class/infiniband/rxe0/ports/1/link_layer", "Ethernet")
    put(tmp_path, "sys/class/infiniband/rxe0/ports/1/state", "4: ACTIVE")
    put(tmp_path, "sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "eth1")
    put(tmp_path, "sys/class/infiniband/rxe0/ports/1/gid_attrs/types/0", "IB/RoCE v1")
    put(tmp_path, "sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1", "RoCE v2")
    put(tmp_path, "sys/class/net/eth1/mtu", "1500")
    put(tmp_path, "sys/class/net/eth1/operstate", "up")

    def with_firewall(argv: list[str]) -> str | None:
        if argv == ["iptables-save"]:
            return (CAPTURES.parent / "firewall" / "iptables_save_algo_input_drop.txt").read_text()
        return None  # nft missing: iptables-save decides

    settings = read_host_settings(tmp_path, with_firewall, host="gpu-07")
    [port] = settings.ports
    assert port.soft_roce and port.gid_types == ["IB/RoCE v1", "RoCE v2"] and port.netdev_state == "up"
    assert settings.roce_firewall is not None and settings.roce_firewall.verdict == "drop"
    kinds = {f.kind: f for f in judge([settings])}
    assert kinds["soft-roce-firewall"].severity == "critical" and "4791" in kinds["soft-roce-firewall"].fix
    # not root: neither tool runs, which is an error and no verdict
    settings = read_host_settings(tmp_path, lambda argv: None, host="gpu-07")
    assert settings.roce_firewall is None and any("iptables-save" in e for e in settings.errors)
    assert "soft-roce-firewall" not in {f.kind for f in judge([settings])}


def test_soft_roce_by_its_parent_attribute_and_hardware_roce(tmp_path: Path) -> None:
    for dev in ("roce_eth1", "mlx5_0"):
        put(tmp_path, f"sys/class/infiniband/{dev}/node_type", "1: CA")
        put(tmp_path, f"sys/class/infiniband/{dev}/ports/1/link_layer", "Ethernet")
        put(tmp_path, f"sys/class/infiniband/{dev}/ports/1/gid_attrs/types/0", "RoCE v2")
    put(tmp_path, "sys/class/infiniband/roce_eth1/parent", "eth1")  # rxe's own attribute, whatever the name
    asked: list[list[str]] = []

    def tools(argv: list[str]) -> str | None:
        asked.append(argv)
        return None

    settings = read_host_settings(tmp_path, tools, host="gpu-09")
    assert {p.device: p.soft_roce for p in settings.ports} == {"roce_eth1": True, "mlx5_0": False}
    assert ["nft", "list", "ruleset"] in asked
    # hardware RoCE alone: the firewall is not read at all
    (tmp_path / "sys/class/infiniband/roce_eth1/parent").unlink()
    put(tmp_path, "sys/class/infiniband/roce_eth1/node_type", "4: RNIC")  # a soft iWARP device is not RoCE
    asked.clear()
    settings = read_host_settings(tmp_path, tools, host="gpu-09")
    assert not any(p.soft_roce for p in settings.ports) and ["nft", "list", "ruleset"] not in asked


def fake_tool(bin_dir: Path, name: str, capture: Path | None) -> None:
    """An executable on PATH that prints a real capture (or fails, as the tools do without root)."""
    body = f"exec /bin/cat {capture}" if capture else "echo 'Operation not permitted' >&2; exit 1"
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_firewall_tools_found_on_path(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpufleet.sources.infiniband.settings import run_tool

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    firewall = CAPTURES.parent / "firewall"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    put(tmp_path, "root/sys/class/infiniband/rxe0/ports/1/link_layer", "Ethernet")
    fake_tool(bin_dir, "nft", firewall / "nft_ruleset_pastebin_counter_drop.txt")
    fake_tool(bin_dir, "iptables-save", None)
    settings = read_host_settings(tmp_path / "root", run_tool, host="gpu-08")
    assert settings.roce_firewall is not None
    assert (settings.roce_firewall.tool, settings.roce_firewall.verdict) == ("nft", "drop")
    # nft's ruleset is empty (legacy iptables holds the rules): iptables-save decides
    (tmp_path / "empty.txt").write_text("")
    fake_tool(bin_dir, "nft", tmp_path / "empty.txt")
    fake_tool(bin_dir, "iptables-save", firewall / "iptables_save_algo_input_drop.txt")
    settings = read_host_settings(tmp_path / "root", run_tool, host="gpu-08")
    assert settings.roce_firewall is not None
    assert (settings.roce_firewall.tool, settings.roce_firewall.verdict) == ("iptables-save", "drop")
    # both fail (not root): no verdict, an error
    fake_tool(bin_dir, "nft", None)
    fake_tool(bin_dir, "iptables-save", None)
    settings = read_host_settings(tmp_path / "root", run_tool, host="gpu-08")
    assert settings.roce_firewall is None and any("not root" in e for e in settings.errors)
