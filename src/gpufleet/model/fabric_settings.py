"""A host's fabric settings, as its agent reads them (`FabricReport.settings`, `gpufleet fabric discover --live`):
the HCA ports' MTU, the RoCE netdevs' MTU and lossless QoS, the subnet manager's configuration where the host runs
OpenSM, and whether SHARP's aggregation manager runs there. Plain data on the wire; `fabric/settings.py` judges it."""

from __future__ import annotations

from typing import Annotated

import msgspec

Short = Annotated[str, msgspec.Meta(max_length=256)]
Priorities = Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=7)]], msgspec.Meta(max_length=8)]


class HcaPortSetting(msgspec.Struct):
    """One HCA port: `ibv_devinfo`'s active and max MTU (bytes), its link layer, and for RoCE its netdev's MTU."""

    device: Short
    port: Annotated[int, msgspec.Meta(ge=0, le=255)]
    link_layer: Short = ""  # InfiniBand, Ethernet
    state: Short = ""  # Active, Down, ...
    active_mtu: int | None = None
    max_mtu: int | None = None
    netdev: Short = ""  # RoCE: the Ethernet interface of the port
    netdev_mtu: int | None = None
    netdev_state: Short = ""  # RoCE: /sys/class/net/<if>/operstate (up, down, ...); "" not read
    soft_roce: bool = False  # a soft-RoCE (rdma_rxe) device: RoCE runs in the host's network stack
    # RoCE: the GID table's types (/sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>: "IB/RoCE v1",
    # "RoCE v2"), each once; None when not read
    gid_types: Annotated[list[Short], msgspec.Meta(max_length=8)] | None = None


class RoceFirewall(msgspec.Struct):
    """What the host's packet filter does with an incoming UDP packet to 4791 (RoCEv2): `nft list ruleset` or
    `iptables-save`, judged by gpufleet.parsers.firewall. Read only where a soft-RoCE device runs."""

    tool: Short  # nft, iptables-save
    verdict: Short  # accept, drop, reject
    rule: Annotated[str, msgspec.Meta(max_length=1024)] = ""  # the deciding rule, or the chain's policy
    chain: Short = ""


class RoceQosSetting(msgspec.Struct):
    """A RoCE netdev's lossless setup: `mlnx_qos -i` (trust, PFC, DSCP->priority) and the ECN sysfs
    (/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>), and the RDMA device's default traffic class
    (/sys/class/infiniband/<dev>/tc/1/traffic_class) where set."""

    netdev: Short
    device: Short = ""
    trust: Short = ""  # pcp, dscp; "" unknown
    pfc: Priorities | None = None  # priorities with PFC on; None: not read
    dscp2prio: dict[int, int] = {}  # as printed; missing DSCPs take the default DSCP >> 3
    ecn_np: Priorities | None = None  # priorities with ECN on as notification point (the receiver)
    ecn_rp: Priorities | None = None  # ... as reaction point (the sender)
    traffic_class: int | None = None  # the device's default tclass, when an operator set one


class PartitionSetting(msgspec.Struct):
    name: Short
    pkey: int | None = None
    ipoib: bool = False
    mtu: int | None = None  # the IPoIB broadcast group's MTU in bytes (partitions.conf mtu=, default 2048)
    line: int = 0


class SubnetManagerConfig(msgspec.Struct):
    """OpenSM's configuration file as read on the host that runs it (every judged key, its default when absent)."""

    file: Short
    routing_engines: Annotated[list[Short], msgspec.Meta(max_length=16)] = []  # []: minhop, the default
    sm_priority: int | None = None
    sweep_interval: int | None = None
    max_op_vls: int | None = None
    qos: bool | None = None
    lines: dict[str, int] = {}  # key -> its line in the file (absent: OpenSM's default)
    partitions_file: Short = ""
    partitions: Annotated[list[PartitionSetting], msgspec.Meta(max_length=4096)] = []


class SubnetManagerSeen(msgspec.Struct):
    """A subnet manager as the subnet administrator lists it (`saquery SMIR`): the master and its standbys."""

    guid: Short
    priority: Annotated[int, msgspec.Meta(ge=0, le=15)]
    state: Short  # MASTER, STANDBY, DISCOVERING, NOTACTIVE
    lid: int = 0
    activity: int = 0


class HostFabricSettings(msgspec.Struct):
    host: Short
    ports: Annotated[list[HcaPortSetting], msgspec.Meta(max_length=256)] = []
    roce: Annotated[list[RoceQosSetting], msgspec.Meta(max_length=256)] = []
    opensm: SubnetManagerConfig | None = None
    opensm_running: bool | None = None
    sharp_am_running: bool | None = None  # None: not looked at
    # every subnet manager of the subnet this host reaches (`saquery SMIR`); [] when not asked
    subnet_managers: Annotated[list[SubnetManagerSeen], msgspec.Meta(max_length=64)] = []
    errors: Annotated[list[Short], msgspec.Meta(max_length=64)] = []
    roce_firewall: RoceFirewall | None = None  # None: no soft-RoCE device, or no firewall tool ran
    # host: read on the host itself; sm: its HCA ports as the subnet manager's SMPs read them (`smpquery portinfo`:
    # NeighborMTU as active_mtu, MtuCap as max_mtu), by the agent that watches the fabric, for every host
    source: Short = "host"
