"""The fabric settings a twin node's agent reads of its own host (`NodeInventory.fabric_settings`): a DGX H100's
compute rails set up as NVIDIA documents them.

- InfiniBand (transport ib): each ConnectX-7 port runs at MTU 4096, its capability (`ibv_devinfo` active_mtu and
  max_mtu 4096).
- RoCE (transport roce): each port's netdev has jumbo frames (MTU 9000), so RoCE runs at 4096; lossless on
  priority 3: trust dscp, PFC on 3, ECN on 3 on both sides, and the device's traffic class 106 (DSCP 26, which the
  default map puts on priority 3) (NVIDIA MLNX_OFED "RDMA over Converged Ethernet", "Quality of Service", ECN).

`Twin.roce_pfc` holds a node whose PFC an operator set apart from the fleet's (the PFC mismatch across hosts)."""

from __future__ import annotations

from gpufleet.model.fabric import Transport
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, RoceQosSetting
from gpufleet.sim.twin import Twin

IB_MTU = 4096
JUMBO_NETDEV_MTU = 9000
LOSSLESS_PRIORITY = 3
ROCE_TRAFFIC_CLASS = 106  # DSCP 26 << 2, with ECN-capable bits: NCCL_IB_TC's customary value for RoCE


def host_settings(twin: Twin, name: str) -> HostFabricSettings | None:
    """What `read_host_settings` reads on the twin's node; None for a node without an RDMA NIC (socket, EFA)."""
    node = twin.cluster.node(name)
    transport = twin.cluster.fabric.transport
    if transport not in (Transport.ib, Transport.roce) or not node.nics:
        return None
    out = HostFabricSettings(host=name)
    for nic in node.nics:
        port = nic.ports[0] if nic.ports else None
        setting = HcaPortSetting(
            device=nic.name,
            port=port.number if port else 1,
            state=str(port.state) if port else "Down",
            active_mtu=IB_MTU,
            max_mtu=IB_MTU,
        )
        if transport is Transport.roce:
            setting.link_layer = "Ethernet"
            setting.netdev = nic.netdev or f"eth{nic.rail}"
            setting.netdev_mtu = JUMBO_NETDEV_MTU
            pfc = twin.roce_pfc.get(name, [LOSSLESS_PRIORITY])
            out.roce.append(
                RoceQosSetting(
                    netdev=setting.netdev,
                    device=nic.name,
                    trust="dscp",
                    pfc=list(pfc),
                    ecn_np=list(pfc),
                    ecn_rp=list(pfc),
                    traffic_class=ROCE_TRAFFIC_CLASS,
                )
            )
        else:
            setting.link_layer = "InfiniBand"
        out.ports.append(setting)
    return out
