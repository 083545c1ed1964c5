"""This host's fabric settings (`HostFabricSettings`): each HCA port's link layer, state and MTU (`ibv_devinfo`,
sysfs), a RoCE port's netdev and its MTU, the netdev's lossless QoS (`mlnx_qos -i`, the ECN sysfs, the device's
default traffic class), OpenSM's configuration files where the host has them, and whether opensm and SHARP's
aggregation manager (sharp_am) run here. What cannot be read (a tool missing, a file unreadable) is an entry in
`errors`; the rest is still read.

Paths (Linux; mlx5): /sys/class/infiniband/<dev>/ports/<n>/{link_layer,state,gid_attrs/ndevs/0},
/sys/class/net/<if>/mtu, /sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio> (MLNX_OFED ECN documentation),
/sys/class/infiniband/<dev>/tc/1/traffic_class ("Global tclass=N" when set), /etc/opensm/opensm.conf.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from gpufleet.fabric.settings_captures import (
    opensm_from_text,
    partitions_file_of,
    ports_from_devinfo,
    roce_from_mlnx_qos,
)
from gpufleet.model.fabric_settings import (
    HcaPortSetting,
    HostFabricSettings,
    RoceFirewall,
    RoceQosSetting,
    SubnetManagerConfig,
)
from gpufleet.parsers.firewall import udp_port_iptables, udp_port_nft

TOOL_TIMEOUT_S = 10.0
OPENSM_CONF = Path("/etc/opensm/opensm.conf")

Run = Callable[[list[str]], str | None]  # argv -> stdout, None when the tool is missing or failed


def run_tool(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return done.stdout if done.returncode == 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def read_host_settings(
    root: Path = Path("/"),
    run: Run = run_tool,
    opensm_conf: Path | None = None,
    host: str | None = None,
) -> HostFabricSettings:
    out = HostFabricSettings(host=host or socket.gethostname())
    mtus: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    devinfo = run(["ibv_devinfo"])
    if devinfo is None:
        out.errors.append("ibv_devinfo did not run: no HCA MTU (install rdma-core's ibverbs-utils)")
    else:
        for port in ports_from_devinfo(devinfo):
            mtus[(port.device, port.port)] = (port.active_mtu, port.max_mtu)
    ib = root / "sys/class/infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        for port_dir in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            if not port_dir.name.isdigit():
                continue
            number = int(port_dir.name)
            state = (_read(port_dir / "state") or "").partition(":")[2].strip().title()  # "4: ACTIVE"
            setting = HcaPortSetting(
                device=dev.name,
                port=number,
                link_layer=_read(port_dir / "link_layer") or "",
                state=state,
                active_mtu=mtus.get((dev.name, number), (None, None))[0],
                max_mtu=mtus.get((dev.name, number), (None, None))[1],
            )
            if setting.link_layer.lower() == "ethernet":
                netdev = _read(port_dir / "gid_attrs/ndevs/0") or ""
                setting.netdev = netdev
                setting.soft_roce = is_soft_roce(dev)
                setting.gid_types = _gid_types(port_dir / "gid_attrs/types")
                if netdev:
                    setting.netdev_mtu = _int(_read(root / "sys/class/net" / netdev / "mtu"))
                    setting.netdev_state = _read(root / "sys/class/net" / netdev / "operstate") or ""
                    out.roce.append(_roce_qos(root, dev.name, netdev, run, out.errors))
            out.ports.append(setting)
    if any(p.soft_roce for p in out.ports):
        out.roce_firewall = read_roce_firewall(run, out.errors)
    conf = opensm_conf or root / OPENSM_CONF.relative_to("/")
    if conf.is_file():
        out.opensm = read_opensm_config(conf, root)
    processes = _process_names(root)
    if processes is not None:
        out.opensm_running = "opensm" in processes
        out.sharp_am_running = "sharp_am" in processes
    return out


def is_soft_roce(dev: Path) -> bool:
    """rdma_rxe's devices: only rxe gives an RDMA device a `parent` attribute (the netdev it runs on; Linux
    drivers/infiniband/sw/rxe/rxe_verbs.c, parent_show), and `rdma link add rxe0 type rxe netdev <if>` names them
    rxe* by custom. Soft iWARP (siw, node_type "4: RNIC") is not RoCE."""
    if (_read(dev / "node_type") or "").endswith("RNIC"):
        return False
    return dev.name.startswith("rxe") or (dev / "parent").is_file()


def _gid_types(folder: Path) -> list[str] | None:
    """The GID table's types, each once. An unused entry reads as an error (EINVAL), so it is skipped."""
    if not folder.is_dir():
        return None
    seen: list[str] = []
    for entry in sorted(folder.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        kind = _read(entry)
        if kind and kind not in seen:
            seen.append(kind)
    return seen


def read_roce_firewall(run: Run, errors: list[str]) -> RoceFirewall | None:
    """What the host's packet filter does with UDP 4791: `nft list ruleset` (which also shows iptables-nft's
    rules), then `iptables-save` (legacy iptables' rules are not in nft's ruleset). Both need root
    (CAP_NET_ADMIN): without it they fail, and that is an error here, not a verdict."""
    ran: list[str] = []
    for argv, judge in ((["nft", "list", "ruleset"], udp_port_nft), (["iptables-save"], udp_port_iptables)):
        text = run(argv)
        if text is None:
            continue
        ran.append(argv[0])
        verdict = judge(text)
        if verdict is not None and (verdict.verdict != "accept" or argv[0] == "iptables-save"):
            return RoceFirewall(
                tool=verdict.tool, verdict=verdict.verdict, rule=verdict.rule[:1024], chain=verdict.chain
            )
    if ran:
        return RoceFirewall(tool=ran[0], verdict="accept", rule="no input-hook filter rule drops UDP 4791")
    errors.append(
        "nft list ruleset and iptables-save did not run (missing, or not root): whether the firewall drops "
        "soft-RoCE's UDP 4791 is not known"
    )
    return None


def read_opensm_config(conf: Path, root: Path = Path("/")) -> SubnetManagerConfig:
    """opensm.conf and the partition file it names, where that file is there."""
    text = conf.read_text(errors="replace")
    named = partitions_file_of(text)
    partitions = root / named.lstrip("/") if named.startswith("/") else conf.parent / named
    if named and partitions.is_file():
        return opensm_from_text(text, str(conf), partitions.read_text(errors="replace"), named)
    return opensm_from_text(text, str(conf))


def _roce_qos(root: Path, device: str, netdev: str, run: Run, errors: list[str]) -> RoceQosSetting:
    text = run(["mlnx_qos", "-i", netdev])
    if text is None:
        errors.append(f"mlnx_qos -i {netdev} did not run: PFC and trust not read (install mlnx-tools)")
        qos = RoceQosSetting(netdev=netdev, device=device)
    else:
        qos = roce_from_mlnx_qos(text, netdev, device)
    ecn = root / "sys/class/net" / netdev / "ecn"
    for side in ("np", "rp"):
        folder = ecn / f"roce_{side}" / "enable"
        if folder.is_dir():
            enabled = [p for p in range(8) if _read(folder / str(p)) == "1"]
            setattr(qos, f"ecn_{side}", enabled)
    tclass = _read(root / "sys/class/infiniband" / device / "tc/1/traffic_class") or ""
    if "=" in tclass:
        qos.traffic_class = _int(tclass.rpartition("=")[2])
    return qos


def _process_names(root: Path) -> set[str] | None:
    proc = root / "proc"
    if not proc.is_dir():
        return None
    names: set[str] = set()
    for entry in proc.iterdir():
        if entry.name.isdigit() and (comm := _read(entry / "comm")):
            names.add(comm)
    return names
