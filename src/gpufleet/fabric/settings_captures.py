"""A host's fabric settings from the tools' output and the config files' text: what the agent reads live
(`sources/infiniband/settings.py`) and what `gpufleet fabric settings` reads from saved captures both come
through here, so a capture and a live read give the same settings."""

from __future__ import annotations

from gpufleet.model.fabric_settings import HcaPortSetting, PartitionSetting, RoceQosSetting, SubnetManagerConfig
from gpufleet.parsers.infiniband.ibv_devinfo import parse_ibv_devinfo
from gpufleet.parsers.infiniband.mlnx_qos import parse_mlnx_qos
from gpufleet.parsers.infiniband.opensm_conf import parse_opensm_conf, parse_partitions_conf

JUDGED_KEYS = ("routing_engine", "sm_priority", "sweep_interval", "max_op_vls", "qos")


def _int(text: str | None) -> int | None:
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def ports_from_devinfo(text: str) -> list[HcaPortSetting]:
    """Every port `ibv_devinfo` lists: its link layer, state and active and max MTU ("4096 (5)")."""
    out = []
    for port in parse_ibv_devinfo(text).ports:
        if port.device is None:
            continue
        out.append(
            HcaPortSetting(
                device=port.device,
                port=port.number,
                link_layer=port.link_layer or "",
                state=port.state or "",
                active_mtu=_int(port.fields.get("active_mtu")),
                max_mtu=_int(port.fields.get("max_mtu")),
            )
        )
    return out


def roce_from_mlnx_qos(text: str, netdev: str, device: str = "") -> RoceQosSetting:
    parsed = parse_mlnx_qos(text, netdev)
    return RoceQosSetting(
        netdev=netdev,
        device=device,
        trust=parsed.trust,
        pfc=parsed.pfc_priorities if parsed.pfc is not None else None,
        dscp2prio=parsed.dscp2prio,
    )


def opensm_from_text(
    text: str, file: str, partitions: str | None = None, partitions_file: str = ""
) -> SubnetManagerConfig:
    """OpenSM's judged settings (its defaults where the file is silent) and, when given, the partition file it
    names (`partition_config_file`)."""
    config = parse_opensm_conf(text, file)
    out = SubnetManagerConfig(
        file=file,
        routing_engines=config.routing_engines,
        sm_priority=config.number("sm_priority"),
        sweep_interval=config.number("sweep_interval"),
        max_op_vls=config.number("max_op_vls"),
        qos=config.flag("qos"),
        lines={key: config.settings[key].line for key in JUDGED_KEYS if config.given(key)},
    )
    if partitions is not None:
        out.partitions_file = partitions_file or config.get("partition_config_file").value
        out.partitions = [
            PartitionSetting(p.name, p.pkey, p.ipoib, p.mtu_bytes if p.ipoib else None, p.line)
            for p in parse_partitions_conf(partitions)
        ]
    return out


def partitions_file_of(text: str) -> str:
    """The partition file an opensm.conf names (its default when it names none)."""
    return parse_opensm_conf(text).get("partition_config_file").value
