"""The fabric settings one capture shows, judged by fabric.settings (the judgement `gpufleet fabric settings`, the
fabric service and the doctor use): the capture becomes one host's `HostFabricSettings` through
fabric.settings_captures (as a saved capture does for `gpufleet fabric settings`), and its findings are triage's.

What a capture cannot show alone is said in a note, not guessed: OpenSM's routing engine is judged against the
fabric's shape (a fat tree), two SMs' priorities need both, an MTU mismatch needs the other ports, an IPoIB
partition's MTU needs the ports' MTUs, and mlnx_qos prints neither ECN nor the traffic class NCCL's packets carry."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.errors import ParseError
from gpufleet.fabric.findings import FabricFinding, worst_first
from gpufleet.fabric.settings import judge
from gpufleet.fabric.settings_captures import opensm_from_text, roce_from_mlnx_qos
from gpufleet.model.fabric_settings import HcaPortSetting, HostFabricSettings, SubnetManagerSeen
from gpufleet.parsers.infiniband.saquery import parse_smir
from gpufleet.parsers.infiniband.smpquery import PortInfo, parse_portinfo
from gpufleet.triage.paste import noted_commands
from gpufleet.triage.readers.common import bounded_text
from gpufleet.triage.report import TriageFinding, TriageReport

HOST = "this host"  # a paste does not name its host
_NETDEV = re.compile(r"\bmlnx_qos\b.*?\s(?:-i|--interface)[\s=](?P<netdev>\S+)")


def _report(fmt: str, source: str, settings: HostFabricSettings, *, fat_tree: bool | None = None) -> TriageReport:
    report = TriageReport(fmt, source)
    for f in worst_first(judge([settings], fat_tree=fat_tree)):
        report.findings.append(_finding(f))
    return report


def _finding(f: FabricFinding) -> TriageFinding:
    entity = str(f.port) if f.port is not None else " - ".join(map(str, f.ends)) if f.ends else ""
    return TriageFinding("fabric-settings", f.severity, f.message, entity, f.kind, f.fix,
                         [f"source: {f.source}"] if f.source else [])  # fmt: skip


def read_opensm_conf(lines: Iterable[str], source: str) -> TriageReport:
    holder = TriageReport("opensm-conf", source)
    config = opensm_from_text(bounded_text(lines, holder), source)
    report = _report("opensm-conf", source, HostFabricSettings(host=HOST, opensm=config))
    report.notes[:0] = holder.notes
    report.complete = holder.complete
    engines = ",".join(config.routing_engines) or "minhop (the default)"
    report.notes.append(
        f"routing engine {engines}: whether it suits the fabric depends on its shape (Min Hop on a fat tree is a "
        f"finding), which one file does not show: `gpufleet fabric settings --opensm-conf {source} --fat-tree`"
    )
    report.notes.append(
        f"sm_priority {config.sm_priority}: compared with the other subnet managers' in `saquery SMIR`, not here"
    )
    return report


def read_mlnx_qos(lines: Iterable[str], source: str) -> TriageReport:
    holder = TriageReport("mlnx-qos", source)
    text = bounded_text(lines, holder)
    netdevs = [m.group("netdev") for c in noted_commands(lines) if (m := _NETDEV.search(c))]
    netdev = netdevs[-1] if netdevs else "the port"
    qos = roce_from_mlnx_qos(text, netdev)
    if not qos.trust and qos.pfc is None:
        raise ParseError("no trust state or PFC lines", fix="paste the output of `mlnx_qos -i <netdev>`")
    report = _report("mlnx-qos", source, HostFabricSettings(host=HOST, roce=[qos]))
    report.notes[:0] = holder.notes
    report.complete = holder.complete
    report.notes.append(
        f"trust {qos.trust or 'not shown'}, PFC on priorities "
        f"{','.join(map(str, qos.pfc)) if qos.pfc else ('none' if qos.pfc == [] else 'not shown')}"
    )
    report.notes.append(
        "mlnx_qos shows neither ECN (/sys/class/net/<if>/ecn) nor the traffic class NCCL's packets carry: "
        "`gpufleet fabric settings` on the host judges those too"
    )
    for line in text.splitlines():
        if "WARNING" in line and "lldpad" in line:
            report.notes.append(f"mlnx_qos warned: {line.strip('* ').strip()} (lldpad may overwrite these settings)")
    return report


def subnet_managers_seen(text: str) -> list[SubnetManagerSeen]:
    return [SubnetManagerSeen(r.guid, r.priority, r.state, r.lid, r.activity) for r in parse_smir(text)]


def read_saquery_smir(lines: Iterable[str], source: str) -> TriageReport:
    holder = TriageReport("saquery-smir", source)
    seen = subnet_managers_seen(bounded_text(lines, holder))
    report = _report("saquery-smir", source, HostFabricSettings(host=HOST, subnet_managers=seen))
    report.notes[:0] = holder.notes
    report.complete = holder.complete
    if not seen:
        report.judged = False
        report.notes.append("no SMInfoRecord with its LID, GUID, priority and state")
        return report
    for sm in seen:
        report.notes.append(f"subnet manager {sm.guid} (LID {sm.lid}): {sm.state}, priority {sm.priority}")
    if not any(sm.state == "MASTER" for sm in seen):
        report.notes.append("no master listed: the subnet administrator's own SM should be; is the output whole?")
    return report


def port_setting(info: PortInfo) -> HcaPortSetting:
    """A port's PortInfo as the settings judgement takes it: NeighborMTU as its active MTU, MtuCap as its max."""
    name = f"lid-{info.lid}" if info.lid is not None else "port"
    return HcaPortSetting(name, info.port or 0, "InfiniBand", info.link_state, info.neighbor_mtu, info.mtu_cap)


def read_smpquery_portinfo(lines: Iterable[str], source: str) -> TriageReport:
    holder = TriageReport("smpquery-portinfo", source)
    info = parse_portinfo(bounded_text(lines, holder))
    if info is None:
        raise ParseError("no LinkState or NeighborMTU line", fix="paste the output of `smpquery portinfo LID PORT`")
    port = port_setting(info)
    report = _report("smpquery-portinfo", source, HostFabricSettings(host=HOST, ports=[port], source="sm"))
    report.notes[:0] = holder.notes
    report.complete = holder.complete
    report.notes.append(
        f"LID {info.lid} port {info.port}: {info.link_state or 'state not shown'}, NeighborMTU {info.neighbor_mtu}, "
        f"MtuCap {info.mtu_cap}; whether its MTU is below the other HCAs' needs their ports too (the fabric "
        "agent reads every HCA port)"
    )
    return report
