from pathlib import Path

from gpufleet.fabric.settings_captures import (
    opensm_from_text,
    partitions_file_of,
    ports_from_devinfo,
    roce_from_mlnx_qos,
)

CAPTURES = Path(__file__).parents[1] / "captures" / "infiniband"


def test_ports_of_ibv_devinfo_verbose() -> None:
    ports = ports_from_devinfo((CAPTURES / "ibv_devinfo_vv_cx6_port_disabled.txt").read_text())
    assert [(p.device, p.port, p.state, p.link_layer, p.active_mtu, p.max_mtu) for p in ports][:2] == [
        ("mlx5_0", 1, "Active", "InfiniBand", 4096, 4096),
        ("mlx5_1", 1, "Down", "InfiniBand", 4096, 4096),
    ]


def test_roce_qos_of_mlnx_qos() -> None:
    qos = roce_from_mlnx_qos((CAPTURES / "mlnx_qos_ofed42_dscp_trust.txt").read_text(), "eth2", "mlx5_2")
    assert (qos.netdev, qos.device, qos.trust, qos.pfc) == ("eth2", "mlx5_2", "dscp", [0, 2, 6, 7])
    assert qos.dscp2prio[26] == 3 and qos.ecn_np is None  # ECN is not in mlnx_qos's output
    unread = roce_from_mlnx_qos("Priority trust state: pcp\n", "eth3")
    assert unread.trust == "pcp" and unread.pfc is None


def test_opensm_defaults_and_its_partition_file() -> None:
    dump = (CAPTURES / "opensm_3.3.23_create_config.conf").read_text()
    assert partitions_file_of(dump) == "/etc/opensm/partitions.conf"
    assert partitions_file_of("sm_priority 1\n") == "/etc/opensm/partitions.conf"  # OpenSM's default
    config = opensm_from_text(
        "sm_priority 12\nrouting_engine ftree\n", "opensm.conf", "P1=0x10,ipoib : ALL ;", "p.conf"
    )
    assert (config.sm_priority, config.sweep_interval, config.max_op_vls, config.qos) == (12, 10, 5, False)
    assert config.routing_engines == ["ftree"] and config.lines == {"routing_engine": 2, "sm_priority": 1}
    assert [(p.name, p.pkey, p.ipoib, p.mtu) for p in config.partitions] == [("P1", 0x10, True, 2048)]
    assert config.partitions_file == "p.conf"
    assert opensm_from_text(dump, "dump").partitions == []  # no partition text given
