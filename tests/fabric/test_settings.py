from gpufleet.fabric.settings import judge, lossless_priority, roce_firewall_note, tc_for_priority
from gpufleet.model import Severity
from gpufleet.model.fabric_settings import (
    HcaPortSetting,
    HostFabricSettings,
    PartitionSetting,
    RoceFirewall,
    RoceQosSetting,
    SubnetManagerConfig,
)


def ib(device: str, mtu: int, max_mtu: int = 4096) -> HcaPortSetting:
    return HcaPortSetting(device, 1, "InfiniBand", "Active", mtu, max_mtu)


def kinds(found: list) -> list[str]:
    return sorted(f.kind for f in found)


def test_an_hca_below_the_fabrics_mtu() -> None:
    hosts = [
        HostFabricSettings("gpu-01", ports=[ib("mlx5_0", 4096), ib("mlx5_1", 4096)]),
        HostFabricSettings("gpu-02", ports=[ib("mlx5_0", 2048), ib("mlx5_1", 4096)]),
    ]
    found = judge(hosts)
    assert kinds(found) == ["ib-mtu-mismatch"]
    assert str(found[0].port) == "gpu-02/mlx5_0/1" and "2048" in found[0].message and found[0].source


def test_one_mtu_everywhere_is_quiet_and_a_capped_port_is_noted() -> None:
    assert judge([HostFabricSettings("a", ports=[ib("mlx5_0", 4096)])]) == []
    found = judge([HostFabricSettings("a", ports=[ib("mlx5_0", 2048)])])
    assert kinds(found) == ["ib-mtu-below-capability"] and found[0].severity is Severity.info


def test_roce_at_1024_because_of_a_1500_byte_netdev() -> None:
    port = HcaPortSetting("mlx5_2", 1, "Ethernet", "Active", 1024, 4096, "ens1f0np0", 1500)
    found = judge([HostFabricSettings("gpu-01", ports=[port])])
    assert kinds(found) == ["roce-mtu"]
    assert "ens1f0np0 MTU 1500" in found[0].message and "mtu 9000" in found[0].fix


def test_roce_at_4096_with_jumbo_frames_is_quiet() -> None:
    port = HcaPortSetting("mlx5_2", 1, "Ethernet", "Active", 4096, 4096, "ens1f0np0", 9000)
    assert judge([HostFabricSettings("gpu-01", ports=[port])]) == []


def test_an_ipoib_partition_above_a_ports_mtu() -> None:
    sm = SubnetManagerConfig(
        "/etc/opensm/opensm.conf",
        routing_engines=["ftree"],
        partitions_file="/etc/opensm/partitions.conf",
        partitions=[PartitionSetting("Default", 0x7FFF, True, 4096, 3), PartitionSetting("Storage", 1, True, 2048)],
    )
    down = HcaPortSetting("mlx5_1", 1, "InfiniBand", "Down", 256, 4096)  # a port without link says nothing
    hosts = [HostFabricSettings("sm-01", ports=[ib("mlx5_0", 2048, 2048), down], opensm=sm)]
    found = judge(hosts)
    assert kinds(found) == ["partition-mtu"]
    assert "Default" in found[0].message and "partitions.conf:3" in found[0].message


def lossless(**kw: object) -> RoceQosSetting:
    base: dict = dict(netdev="ens1f0np0", device="mlx5_2", trust="dscp", pfc=[3], ecn_np=[3], ecn_rp=[3])
    base.update(kw)
    return RoceQosSetting(**base)


def test_a_complete_lossless_setup_is_quiet() -> None:
    assert judge([HostFabricSettings("gpu-01", roce=[lossless(traffic_class=104)])]) == []


def test_lossless_mistakes() -> None:
    assert kinds(judge([HostFabricSettings("a", roce=[lossless(pfc=[])])])) == ["roce-no-pfc"]
    assert kinds(judge([HostFabricSettings("a", roce=[lossless(trust="pcp")])])) == ["roce-trust-pcp"]
    found = judge([HostFabricSettings("a", roce=[lossless(ecn_rp=[])])])
    assert kinds(found) == ["roce-no-ecn"] and "/ecn/roce_rp/enable/3" in found[0].fix
    found = judge([HostFabricSettings("a", roce=[lossless(traffic_class=0)])])  # NCCL_IB_TC's default
    assert kinds(found) == ["roce-tc-lossy"] and "NCCL_IB_TC=104" in found[0].fix


def test_hosts_that_disagree_on_the_lossless_priority() -> None:
    hosts = [HostFabricSettings(h, roce=[lossless()]) for h in ("a", "b")]
    hosts.append(HostFabricSettings("c", roce=[lossless(pfc=[5], ecn_np=[5], ecn_rp=[5])]))
    found = judge(hosts)
    assert kinds(found) == ["roce-pfc-mismatch"] and str(found[0].port) == "c/mlx5_2/1"


def test_traffic_class_to_priority() -> None:
    qos = lossless()
    assert lossless_priority(qos, 104) == 3  # DSCP 26 -> 3 in the default map
    assert lossless_priority(qos, 0) == 0
    assert lossless_priority(lossless(dscp2prio={26: 5}), 104) == 5
    assert lossless_priority(lossless(trust="pcp"), 104) is None  # the VLAN's priority, not the TC's
    assert tc_for_priority(qos, 3) == 104 and tc_for_priority(qos, 5) == 160
    assert tc_for_priority(lossless(trust="pcp"), 3) is None


def sm(**kw: object) -> SubnetManagerConfig:
    return SubnetManagerConfig("/etc/opensm/opensm.conf", **kw)  # type: ignore[arg-type]


def test_opensm_configuration() -> None:
    minhop = [HostFabricSettings("sm-01", opensm=sm(sm_priority=0, sweep_interval=10), opensm_running=True)]
    assert kinds(judge(minhop, fat_tree=True)) == ["opensm-routing-engine"]
    assert judge(minhop, fat_tree=False) == []
    assert kinds(judge([HostFabricSettings("s", opensm=sm(routing_engines=["ftree"], sweep_interval=0))])) == [
        "opensm-sweep-disabled"
    ]
    found = judge([HostFabricSettings("s", opensm=sm(routing_engines=["lash"], max_op_vls=1))])
    assert kinds(found) == ["opensm-max-op-vls"]
    sharp = [HostFabricSettings("s", opensm=sm(routing_engines=["minhop"]), sharp_am_running=True)]
    assert kinds(judge(sharp)) == ["sharp-routing-engine"]


def test_two_subnet_managers_of_equal_priority() -> None:
    hosts = [
        HostFabricSettings(h, opensm=sm(routing_engines=["updn"], sm_priority=7), opensm_running=True)
        for h in ("sm-01", "sm-02")
    ]
    found = judge(hosts)
    assert kinds(found) == ["opensm-equal-priority"] and "sm-01, sm-02" in found[0].message
    hosts[1].opensm.sm_priority = 14  # type: ignore[union-attr]
    assert judge(hosts) == []


def test_a_standby_of_the_masters_priority() -> None:
    from gpufleet.model.fabric_settings import SubnetManagerSeen

    master = SubnetManagerSeen("0x0000000000100001", 0, "MASTER", 2)
    standby = SubnetManagerSeen("0x0000000000200000", 0, "STANDBY", 1)
    found = judge([HostFabricSettings("sm-01", subnet_managers=[master, standby])])
    assert kinds(found) == ["sm-equal-priority"] and "0x0000000000200000" in found[0].message
    standby.priority = 0
    master.priority = 14
    assert judge([HostFabricSettings("sm-01", subnet_managers=[master, standby])]) == []


def roce(device: str, *, soft: bool = False, gids: list[str] | None = None, state: str = "up") -> HcaPortSetting:
    return HcaPortSetting(
        device, 1, "Ethernet", "Active", 1024, 4096, "eth1", 9000, state, soft, gids or ["IB/RoCE v1", "RoCE v2"]
    )


DROPPED = RoceFirewall("nft", "drop", "counter packets 1482 bytes 342159 drop", "inet filter/input")


def test_soft_roce_behind_a_firewall_that_drops_4791_is_critical() -> None:
    host = HostFabricSettings("gpu-07", ports=[roce("rxe0", soft=True)], roce_firewall=DROPPED)
    [found] = [f for f in judge([host]) if f.kind == "soft-roce-firewall"]
    assert found.severity == Severity.critical and str(found.port) == "gpu-07/rxe0/1"
    assert "nft insert rule inet filter input udp dport 4791 accept" in found.fix
    assert "counter packets 1482" in found.message
    accepted = RoceFirewall("iptables-save", "accept", "-A INPUT -p udp --dport 4791 -j ACCEPT", "filter/INPUT")
    host = HostFabricSettings("gpu-07", ports=[roce("rxe0", soft=True)], roce_firewall=accepted)
    assert "soft-roce-firewall" not in kinds(judge([host]))
    assert "accepts UDP 4791" in roce_firewall_note(host)


def test_hardware_roce_is_never_judged_against_the_host_firewall() -> None:
    host = HostFabricSettings("gpu-01", ports=[roce("mlx5_0")], roce_firewall=DROPPED)
    assert "soft-roce-firewall" not in kinds(judge([host]))
    note = roce_firewall_note(host)
    assert "mlx5_0: hardware RoCE" in note and "ib_send_bw -R" in note


def test_a_roce_port_without_a_v2_gid_or_with_its_netdev_down() -> None:
    v1_only = HostFabricSettings("gpu-02", ports=[roce("mlx5_0", gids=["IB/RoCE v1"])])
    [found] = [f for f in judge([v1_only]) if f.kind == "roce-no-v2-gid"]
    assert found.severity == Severity.warning and "IB/RoCE v1" in found.message
    down = HostFabricSettings("gpu-02", ports=[roce("mlx5_0", state="down")])
    assert "roce-netdev-down" in kinds(judge([down])) and "roce-no-v2-gid" not in kinds(judge([down]))
    # GID types not read (an older agent): no finding; an InfiniBand port's GIDs are not RoCE's
    unread = HcaPortSetting("mlx5_0", 1, "Ethernet", "Active", 4096, 4096, "eth1", 9000)
    assert not {"roce-no-v2-gid", "roce-netdev-down"} & set(kinds(judge([HostFabricSettings("h", ports=[unread])])))
