"""Fabric settings that break or slow collectives, judged from what hosts report (`HostFabricSettings`): MTU
consistency (InfiniBand ports, the IPoIB partitions' MTU, RoCE netdevs), RoCE's lossless setup (PFC, trust, ECN,
the traffic class NCCL's packets carry), OpenSM's configuration, and SHARP's aggregation manager.

Pure: settings in, `FabricFinding`s out, each with its fix and its source. The control plane's fabric service, the
`fabric discover` command and the doctor's GF050-GF054 all call these; none re-derives a verdict.

Facts behind the checks:
- An RC QP's path MTU is at most the lower of the two ends' active MTU; NCCL's IB transport exchanges the ports'
  MTU at connection and uses the smaller (NCCL src/transport/net_ib.cc, `qpAttr.path_mtu`). One port at 2048 in a
  4096 fabric halves the payload of every packet to and from it.
- OpenSM sets each link's NeighborMTU to the lower of the two ends' MTUCap; an IPoIB partition's broadcast group
  has its own MTU (partitions.conf `mtu=`, default 4 = 2048), and a port whose MTU is below it cannot join the group
  (opensm(8), PARTITION CONFIGURATION).
- RoCE's MTU is the largest IB MTU (1024, 2048, 4096) that fits in the netdev MTU with the RoCE headers; a 1500-byte
  netdev gives 1024 (`ibv_devinfo` active_mtu), so RoCE at 4096 needs jumbo frames end to end (NVIDIA MLNX_OFED
  documentation, "RDMA over Converged Ethernet (RoCE)", RoCE MTU).
- Lossless RoCE: the priority RoCE packets are classified to needs PFC on (`mlnx_qos --pfc`), classification by
  DSCP needs trust dscp (untagged packets are priority 0 under trust pcp), and DCQCN needs ECN on that priority on
  both sides (/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>). NCCL's packets carry NCCL_IB_TC (default 0)
  as the traffic class: DSCP = TC >> 2 (NVIDIA RoCE configuration docs; NCCL environment variables, NCCL_IB_TC).
- OpenSM: routing_engine unset is Min Hop, which does not avoid credit loops and balances fat trees worse than
  ftree or updn; SHARP's aggregation manager requires updn, ar_updn, ftree or ar_ftree on tree topologies (NVIDIA
  SHARP, "Setting up NVIDIA SHARP Environment"). Two SMs of equal sm_priority elect the lower GUID, so which host
  is master depends on GUIDs, not intent (IBA 14.4.1, opensm(8) -p). sweep_interval 0 disables periodic sweeps.
- RoCEv2 is UDP to destination port 4791. Soft-RoCE (rdma_rxe, `rdma link add rxe0 type rxe netdev eth0`;
  rdma-core Documentation/rxe.md) sends and receives it through the kernel's UDP stack (it opens a UDP tunnel
  socket on 4791; Linux drivers/infiniband/sw/rxe/rxe_net.c), so the host's netfilter INPUT rules apply: a drop or
  reject of UDP 4791, or a drop policy with no accept for it, breaks it. A hardware RoCE NIC (ConnectX, mlx5)
  terminates RoCE itself: "RoCE traffic is offloaded by hardware and is not visible in standard Ethernet interface
  counters" (NVIDIA DOCA, RDMA over Converged Ethernet), it bypasses the kernel's qdisc (facebookresearch/DCPerf
  #671: netem had no effect on ConnectX-7 RoCE) and so netfilter, which sits on the same kernel path: the host
  firewall neither blocks nor admits it, and only traffic between two hosts tests the path. RoCEv2 needs a
  "RoCE v2" entry in the port's GID table (sysfs gid_attrs/types); GIDs follow the netdev's IP addresses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpufleet.fabric.findings import FabricFinding
from gpufleet.fabric.graph import End, FabricGraph, NodeKind
from gpufleet.model import Severity
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, RoceQosSetting
from gpufleet.parsers.firewall import ROCE_V2_PORT

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NCCL_IB_SOURCE = "https://github.com/NVIDIA/nccl/blob/master/src/transport/net_ib.cc"
OPENSM_MAN = "opensm(8) of OpenSM 3.3.23 (PARTITION CONFIGURATION; -R, -p, -s)"
ROCE_DOCS = "https://docs.nvidia.com/networking/display/mlnxofedv24010331/rdma+over+converged+ethernet+(roce)"
QOS_DOCS = "https://docs.nvidia.com/networking/display/mlnxofedv23106161lts/quality-of-service-(qos)"
ECN_DOCS = "https://docs.nvidia.com/networking/display/mlnxofedv24010331/explicit+congestion+notification+(ecn)"
SHARP_SETUP = "https://docs.nvidia.com/networking/display/sharpv330/setting+up+nvidia+sharp+environment"
SHARP_NCCL = "https://docs.nvidia.com/networking/display/sharpltsv391/using+nvidia+sharp+with+nvidia+nccl"
RXE_DOCS = "https://github.com/linux-rdma/rdma-core/blob/master/Documentation/rxe.md"
DOCA_ROCE = "https://docs.nvidia.com/doca/sdk/RDMA+over+Converged+Ethernet/index.html"
SHARP_COLL = "https://docs.nvidia.com/networking/display/SHARPv261/NVIDIA+SHARP+Collective+Library"

FULL_IB_MTU = 4096
# routing engines that route a tree without credit loops and balance it (opensm(8) -R; SHARP's requirement)
TREE_ENGINES = ("ftree", "updn", "ar_ftree", "ar_updn", "dnup")
SHARP_ENGINES = ("updn", "ar_updn", "ftree", "ar_ftree", "dfp", "dor")
VL_ENGINES = ("lash", "dfsssp", "sssp", "torus-2qos", "nue")  # use virtual lanes to break credit loops


def is_tree(graph: FabricGraph) -> bool:
    """Switches cabled to switches: a multi-level (fat) tree rather than one switch."""
    kinds = {name: node.kind for name, node in graph.nodes.items()}
    return any(
        kinds.get(link.a.node) is NodeKind.switch and kinds.get(link.b.node) is NodeKind.switch for link in graph.links
    )


def _port_end(host: str, port: HcaPortSetting) -> End:
    return End(f"{host}/{port.device}", port.port)


def judge(hosts: Iterable[HostFabricSettings], *, fat_tree: bool | None = None) -> list[FabricFinding]:
    """Every settings finding for these hosts (one fabric). `fat_tree`: the discovered fabric has switch tiers
    (a spine above the leaves); None when unknown."""
    hosts = list(hosts)
    findings: list[FabricFinding] = []
    findings += ib_mtu(hosts)
    findings += roce_mtu(hosts)
    findings += partition_mtu(hosts)
    for host in hosts:
        for qos in host.roce:
            findings += roce_lossless(host.host, qos)
    findings += roce_consistency(hosts)
    for host in hosts:
        findings += roce_v2_path(host)
    findings += opensm_config(hosts, fat_tree=fat_tree)
    findings += subnet_managers(hosts)
    # a port read twice (on its host, and through the SM's SMPs) is one finding
    return list({f.key: f for f in reversed(findings)}.values())[::-1]


def ib_mtu(hosts: list[HostFabricSettings]) -> list[FabricFinding]:
    """InfiniBand ports running below the MTU most of the fabric's HCAs run, or below their own capability."""
    active = [
        (h.host, p)
        for h in hosts
        for p in h.ports
        if p.link_layer.lower() == "infiniband" and p.state == "Active" and p.active_mtu
    ]
    findings: list[FabricFinding] = []
    if not active:
        return findings
    common = Counter(p.active_mtu for _, p in active).most_common()
    best = max(mtu for mtu, _ in common if mtu is not None)
    at_best = _hosts(sorted({host for host, p in active if p.active_mtu == best}))
    for host, p in active:
        assert p.active_mtu is not None
        if p.active_mtu < best:
            findings.append(
                FabricFinding(
                    "ib-mtu-mismatch",
                    Severity.warning,
                    f"{host} {p.device} port {p.port} runs at MTU {p.active_mtu} while other HCAs on the fabric "
                    f"({at_best}) run at {best}: every QP to or from it uses the smaller MTU (the path MTU is the "
                    "lower of the two ends')",
                    f"find why the link negotiated {p.active_mtu}: the port's or its switch port's MTU cap "
                    f"(`smpquery portinfo` MtuCap, `ibv_devinfo` max_mtu); a firmware setting or a switch port "
                    f"capped below {best}",
                    port=_port_end(host, p),
                    source=NCCL_IB_SOURCE,
                )
            )
        elif p.max_mtu and p.active_mtu < p.max_mtu and p.active_mtu < FULL_IB_MTU:
            findings.append(
                FabricFinding(
                    "ib-mtu-below-capability",
                    Severity.info,
                    f"{host} {p.device} port {p.port} runs at MTU {p.active_mtu}, below the {p.max_mtu} it supports",
                    "check its switch port's MtuCap (`smpquery portinfo`): OpenSM sets NeighborMTU to the lower "
                    "of the two ends' MtuCap",
                    port=_port_end(host, p),
                    source=OPENSM_MAN,
                )
            )
    return findings


def roce_mtu(hosts: list[HostFabricSettings]) -> list[FabricFinding]:
    findings: list[FabricFinding] = []
    for h in hosts:
        for p in h.ports:
            if p.link_layer.lower() != "ethernet" or p.state != "Active" or not p.active_mtu:
                continue
            if p.active_mtu >= FULL_IB_MTU or (p.max_mtu is not None and p.active_mtu >= p.max_mtu):
                continue
            netdev = f"{p.netdev} MTU {p.netdev_mtu}" if p.netdev and p.netdev_mtu else "its netdev's MTU"
            findings.append(
                FabricFinding(
                    "roce-mtu",
                    Severity.warning,
                    f"{h.host} {p.device} port {p.port} (RoCE) runs at MTU {p.active_mtu} because of {netdev}: "
                    f"RoCE's MTU is the largest of 1024/2048/4096 that fits in the Ethernet MTU with its headers",
                    f"set the netdev MTU to 9000 (`ip link set {p.netdev or '<netdev>'} mtu 9000`, and in the "
                    "host's network configuration) and jumbo frames on every switch port on the path",
                    port=_port_end(h.host, p),
                    source=ROCE_DOCS,
                )
            )
    return findings


def partition_mtu(hosts: list[HostFabricSettings]) -> list[FabricFinding]:
    """IPoIB partitions whose broadcast-group MTU is above what some HCA port runs: that port cannot join."""
    findings: list[FabricFinding] = []
    ports = [
        (h.host, p)
        for h in hosts
        for p in h.ports
        if p.link_layer.lower() == "infiniband" and p.state == "Active" and p.active_mtu
    ]
    lowest = min(ports, key=lambda hp: hp[1].active_mtu or 0, default=None)
    for h in hosts:
        if h.opensm is None:
            continue
        for part in h.opensm.partitions:
            if not part.ipoib or part.mtu is None or lowest is None:
                continue
            host, p = lowest
            if p.active_mtu is not None and part.mtu > p.active_mtu:
                findings.append(
                    FabricFinding(
                        "partition-mtu",
                        Severity.warning,
                        f"partition {part.name or hex(part.pkey or 0)} ({h.opensm.partitions_file}:{part.line}) sets "
                        f"its IPoIB broadcast group's MTU to {part.mtu}, above the {p.active_mtu} that {host} "
                        f"{p.device} port {p.port} runs: that port cannot join the group and its IPoIB stays down",
                        f"lower the partition's mtu= to the smallest port MTU (mtu=4 is 2048), or raise {host} "
                        f"{p.device}'s MTU",
                        port=_port_end(host, p),
                        source=OPENSM_MAN,
                    )
                )
    return findings


def lossless_priority(qos: RoceQosSetting, traffic_class: int) -> int | None:
    """The priority RoCE packets with this traffic class get on this port (None: not known)."""
    if qos.trust == "dscp":
        dscp = traffic_class >> 2
        return qos.dscp2prio.get(dscp, dscp >> 3)
    return None  # trust pcp: the priority is the VLAN tag's, which the host's egress map sets, not the TC


def roce_lossless(host: str, qos: RoceQosSetting) -> list[FabricFinding]:
    findings: list[FabricFinding] = []
    where = End(f"{host}/{qos.device or qos.netdev}", 1)
    name = f"{host} {qos.netdev}"
    if qos.pfc is not None and not qos.pfc:
        findings.append(
            FabricFinding(
                "roce-no-pfc",
                Severity.warning,
                f"{name}: PFC is off on every priority, so RoCE runs lossy: a dropped packet costs a go-back-N "
                "retransmission and collectives stall under incast",
                f"make RoCE's priority lossless on the host and every switch port: `mlnx_qos -i {qos.netdev} "
                "--pfc 0,0,0,1,0,0,0,0` (priority 3) with the same on the switches",
                port=where,
                source=QOS_DOCS,
            )
        )
        return findings
    if qos.trust == "pcp" and qos.pfc:
        findings.append(
            FabricFinding(
                "roce-trust-pcp",
                Severity.warning,
                f"{name}: trust is pcp with PFC on priorities {_list(qos.pfc)}: RoCEv2 packets without a VLAN tag "
                "carry no PCP and are classified to priority 0, which is not lossless (unless RoCE runs on a VLAN "
                "whose egress priority is the lossless one)",
                f"`mlnx_qos -i {qos.netdev} --trust dscp` and map RoCE's DSCP to the lossless priority",
                port=where,
                source=QOS_DOCS,
            )
        )
    if qos.traffic_class is not None and qos.pfc:
        prio = lossless_priority(qos, qos.traffic_class)
        if prio is not None and prio not in qos.pfc:
            findings.append(
                FabricFinding(
                    "roce-tc-lossy",
                    Severity.warning,
                    f"{name}: the device's traffic class {qos.traffic_class} (DSCP {qos.traffic_class >> 2}) lands "
                    f"on priority {prio}, but PFC is on {_list(qos.pfc)}: RoCE traffic is lossy",
                    f"set the traffic class to a DSCP of the lossless priority (TC = DSCP << 2), e.g. "
                    f"NCCL_IB_TC={_tc_for(qos, qos.pfc[0])}",
                    port=where,
                    source=NCCL_ENV,
                )
            )
    for prio in qos.pfc or []:
        off = [side for side, on in (("np", qos.ecn_np), ("rp", qos.ecn_rp)) if on is not None and prio not in on]
        if off:
            findings.append(
                FabricFinding(
                    "roce-no-ecn",
                    Severity.warning,
                    f"{name}: ECN is off on lossless priority {prio} ({' and '.join('roce_' + s for s in off)}): "
                    "without DCQCN congestion is handled only by PFC pauses, which spread it across the fabric",
                    " ; ".join(f"echo 1 > /sys/class/net/{qos.netdev}/ecn/roce_{s}/enable/{prio}" for s in off),
                    port=where,
                    source=ECN_DOCS,
                )
            )
    return findings


def tc_for_priority(qos: RoceQosSetting, prio: int) -> int | None:
    """A traffic class (DSCP << 2) whose DSCP this port classifies to `prio` under trust dscp."""
    if qos.trust != "dscp":
        return None
    return _tc_for(qos, prio)


def _tc_for(qos: RoceQosSetting, prio: int) -> int:
    mapped = sorted(d for d, p in qos.dscp2prio.items() if p == prio)
    dscp = mapped[0] if mapped else prio << 3  # the default DSCP -> priority map is DSCP >> 3
    if prio == 3 and (not qos.dscp2prio or qos.dscp2prio.get(26, 3) == 3):
        dscp = 26  # RoCE's customary DSCP (AF31), on priority 3 in the default map
    return dscp << 2


def roce_consistency(hosts: list[HostFabricSettings]) -> list[FabricFinding]:
    """Hosts whose RoCE ports disagree on the lossless priorities or on trust."""
    seen = [(h.host, q) for h in hosts for q in h.roce if q.pfc is not None]
    findings: list[FabricFinding] = []
    if len(seen) < 2:
        return findings
    usual = Counter(tuple(q.pfc or []) for _, q in seen).most_common(1)[0][0]
    named = _hosts(sorted({host for host, q in seen if tuple(q.pfc or []) == usual}))
    for host, q in seen:
        if tuple(q.pfc or []) != usual and q.pfc:
            findings.append(
                FabricFinding(
                    "roce-pfc-mismatch",
                    Severity.warning,
                    f"{host} {q.netdev}: PFC on priorities {_list(q.pfc)}, the other RoCE ports ({named}) on "
                    f"{_list(list(usual)) or 'none'}: traffic between them is lossless on one side only",
                    "use one lossless priority on every host and switch port",
                    port=End(f"{host}/{q.device or q.netdev}", 1),
                    source=QOS_DOCS,
                )
            )
    return findings


def roce_v2_path(host: HostFabricSettings) -> list[FabricFinding]:
    """What can stop RoCEv2 on this host: a soft-RoCE device behind a firewall that drops UDP 4791, a RoCE port
    without a RoCEv2 GID or whose netdev is down. A hardware RoCE port is not judged against the firewall."""
    findings: list[FabricFinding] = []
    fw = host.roce_firewall
    for p in host.ports:
        if p.link_layer.lower() != "ethernet":
            continue
        where = _port_end(host.host, p)
        name = f"{host.host} {p.device} port {p.port}"
        if p.soft_roce and fw is not None and fw.verdict in ("drop", "reject"):
            findings.append(
                FabricFinding(
                    "soft-roce-firewall",
                    Severity.critical,
                    f"{name} is soft-RoCE (rdma_rxe) and the host firewall {fw.verdict}s UDP {ROCE_V2_PORT} "
                    f"({fw.tool}, {fw.chain}: {fw.rule}): RoCEv2 packets from other hosts never reach it",
                    f"accept RoCEv2 before that rule: `nft insert rule {_nft_table(fw.chain)} udp dport "
                    f"{ROCE_V2_PORT} accept` (or `iptables -I INPUT -p udp --dport {ROCE_V2_PORT} -j ACCEPT`), and "
                    "in the host's saved firewall configuration",
                    port=where,
                    source=RXE_DOCS,
                )
            )
        if p.netdev and p.netdev_state == "down":
            findings.append(
                FabricFinding(
                    "roce-netdev-down",
                    Severity.warning,
                    f"{name}: its netdev {p.netdev} is down: the port carries no RoCE",
                    f"`ip link set {p.netdev} up` and find why it went down (cable, switch port)",
                    port=where,
                    source=ROCE_DOCS,
                )
            )
        elif p.gid_types is not None and "RoCE v2" not in p.gid_types:
            have = ", ".join(p.gid_types) or "none"
            findings.append(
                FabricFinding(
                    "roce-no-v2-gid",
                    Severity.warning,
                    f"{name}: no RoCE v2 GID in its GID table (types: {have}): RoCEv2 (UDP {ROCE_V2_PORT}), which "
                    "NCCL and rdma_cm use by default, cannot run on it",
                    f"give {p.netdev or 'its netdev'} an IP address and bring it up (GIDs follow the netdev's "
                    "addresses); check `cma_roce_mode` and the port's GID table (`show_gids`)",
                    port=where,
                    source=ROCE_DOCS,
                )
            )
    return findings


def roce_firewall_note(host: HostFabricSettings) -> str:
    """What this host's settings say about UDP 4791, for output beside the findings (never a finding)."""
    hardware = sorted({p.device for p in host.ports if p.link_layer.lower() == "ethernet" and not p.soft_roce})
    soft = sorted({p.device for p in host.ports if p.link_layer.lower() == "ethernet" and p.soft_roce})
    parts = []
    if hardware:
        parts.append(
            f"{', '.join(hardware)}: hardware RoCE, which the host firewall does not see; UDP {ROCE_V2_PORT} "
            "between hosts needs a two-host test (`ib_send_bw -R -d <dev>` on both, or `rping -s`/`rping -c`)"
        )
    if soft and host.roce_firewall is not None:
        fw = host.roce_firewall
        parts.append(f"{', '.join(soft)}: soft-RoCE; the firewall ({fw.tool}) {fw.verdict}s UDP {ROCE_V2_PORT}")
    elif soft:
        parts.append(f"{', '.join(soft)}: soft-RoCE; the firewall was not read (needs root)")
    return "; ".join(parts)


def _nft_table(chain: str) -> str:
    """`inet filter input` from "inet filter/input" (an iptables chain: the iptables-nft table)."""
    table, _, name = chain.rpartition("/")
    return f"{table} {name}" if " " in table else "ip filter INPUT"


def opensm_config(hosts: list[HostFabricSettings], *, fat_tree: bool | None) -> list[FabricFinding]:
    findings: list[FabricFinding] = []
    managers = [h for h in hosts if h.opensm is not None]
    for h in managers:
        sm = h.opensm
        assert sm is not None
        where = End(f"{h.host}/opensm", 0)
        engines = sm.routing_engines or ["minhop"]
        line = f"{sm.file}:{sm.lines['routing_engine']}" if "routing_engine" in sm.lines else f"{sm.file} (default)"
        if fat_tree and not any(e in TREE_ENGINES for e in engines):
            findings.append(
                FabricFinding(
                    "opensm-routing-engine",
                    Severity.warning,
                    f"{h.host}: OpenSM routes with {','.join(engines)} ({line}) on a fat tree: Min Hop does not "
                    "balance the up-links of a fat tree nor avoid credit loops, and SHARP's aggregation manager "
                    "needs ftree or updn",
                    "set `routing_engine ftree` (or `updn`) in opensm.conf, or -R ftree, and restart OpenSM",
                    port=where,
                    source=OPENSM_MAN,
                )
            )
        if h.sharp_am_running and not any(e in SHARP_ENGINES for e in engines):
            findings.append(
                FabricFinding(
                    "sharp-routing-engine",
                    Severity.warning,
                    f"{h.host}: SHARP's aggregation manager runs but OpenSM routes with {','.join(engines)}: the "
                    "aggregation manager supports updn, ar_updn, ftree, ar_ftree (trees), dfp, dor",
                    "set `routing_engine ftree` (or updn) in opensm.conf and restart OpenSM",
                    port=where,
                    source=SHARP_SETUP,
                )
            )
        if any(e in VL_ENGINES for e in engines) and sm.max_op_vls is not None and sm.max_op_vls < 2:
            findings.append(
                FabricFinding(
                    "opensm-max-op-vls",
                    Severity.warning,
                    f"{h.host}: routing engine {','.join(engines)} breaks credit loops with virtual lanes, but "
                    f"max_op_vls is {sm.max_op_vls}",
                    "raise max_op_vls (the default is 5) or use a tree engine (ftree, updn)",
                    port=where,
                    source=OPENSM_MAN,
                )
            )
        if sm.sweep_interval == 0:
            findings.append(
                FabricFinding(
                    "opensm-sweep-disabled",
                    Severity.warning,
                    f"{h.host}: sweep_interval 0 disables OpenSM's periodic sweeps: a change no trap reports (a port "
                    "left in Init, a switch that lost its tables) is never seen",
                    "set sweep_interval 10 (the default)",
                    port=where,
                    source=OPENSM_MAN,
                )
            )
        elif sm.sweep_interval is not None and sm.sweep_interval > 60:
            findings.append(
                FabricFinding(
                    "opensm-sweep-slow",
                    Severity.info,
                    f"{h.host}: sweep_interval {sm.sweep_interval}: a change no trap reports waits up to "
                    f"{sm.sweep_interval} s to be seen; VL15Dropped counts that rise with sweeps are SMPs a busy "
                    "port dropped, not a cable fault",
                    "keep sweep_interval near the default 10 unless the SM's load needs otherwise",
                    port=where,
                    source=OPENSM_MAN,
                )
            )
    running = [h for h in managers if h.opensm_running is not False and h.opensm and h.opensm.sm_priority is not None]
    by_priority: dict[int, list[str]] = {}
    for h in running:
        assert h.opensm is not None and h.opensm.sm_priority is not None
        by_priority.setdefault(h.opensm.sm_priority, []).append(h.host)
    for priority, names in sorted(by_priority.items()):
        if len(names) > 1:
            findings.append(
                FabricFinding(
                    "opensm-equal-priority",
                    Severity.warning,
                    f"OpenSM on {', '.join(sorted(names))} has the same sm_priority {priority}: the master is the "
                    "lower port GUID, not a choice, and a standby that comes back may take mastership in a handover",
                    "give the intended master a higher sm_priority (0-15) than the standbys",
                    port=End(f"{sorted(names)[0]}/opensm", 0),
                    source=OPENSM_MAN,
                )
            )
    return findings


def subnet_managers(hosts: list[HostFabricSettings]) -> list[FabricFinding]:
    """Standby subnet managers with the master's priority, as the subnet administrator lists them: the lower GUID
    wins the election, so a standby of equal priority and lower GUID takes mastership when it (re)starts."""
    seen = {sm.guid: sm for h in hosts for sm in h.subnet_managers}
    masters = [sm for sm in seen.values() if sm.state == "MASTER"]
    findings: list[FabricFinding] = []
    for master in masters:
        equal = sorted(
            sm.guid for sm in seen.values() if sm.guid != master.guid and sm.priority == master.priority
            and sm.state in ("STANDBY", "DISCOVERING")
        )  # fmt: skip
        if equal:
            findings.append(
                FabricFinding(
                    "sm-equal-priority",
                    Severity.warning,
                    f"the master subnet manager {master.guid} (LID {master.lid}) and standby {', '.join(equal)} have "
                    f"the same priority {master.priority}: the lower GUID wins each election, so mastership moves "
                    "when one of them restarts (a handover: a heavy sweep of the whole fabric)",
                    "give the intended master a higher sm_priority than its standbys (opensm.conf sm_priority, or "
                    "-p) and restart the standbys",
                    port=End(f"sm-{master.guid}", 0),
                    source=OPENSM_MAN,
                )
            )
    return findings


def _list(priorities: list[int]) -> str:
    return ",".join(str(p) for p in priorities)


def _hosts(names: list[str], shown: int = 3) -> str:
    """A few hosts by name, and how many more: a finding in a fleet of thousands stays one line."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
