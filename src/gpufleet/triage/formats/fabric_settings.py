"""The fabric's settings that break or slow collectives: OpenSM's `opensm.conf` and `partitions.conf`, a RoCE port's
`mlnx_qos -i IF`, the subnet managers the SA lists (`saquery SMIR`) and a port's PortInfo (`smpquery portinfo`),
judged by fabric.settings (triage.readers.fabric_settings). partitions.conf is read, not judged: its IPoIB MTUs are
judged against the ports' MTUs, which it does not hold (`gpufleet fabric settings` has both)."""

from __future__ import annotations

from gpufleet.errors import ParseError
from gpufleet.parsers.infiniband.mlnx_qos import MlnxQos, parse_mlnx_qos
from gpufleet.parsers.infiniband.opensm_conf import (
    DEFAULTS,
    OpenSMConfig,
    Partition,
    parse_opensm_conf,
    parse_partitions_conf,
)
from gpufleet.parsers.infiniband.saquery import SMInfoRecord, parse_smir
from gpufleet.parsers.infiniband.smpquery import PortInfo, parse_portinfo
from gpufleet.triage.formats.registry import Format, Table, View, cell
from gpufleet.triage.readers.fabric_settings import (
    read_mlnx_qos,
    read_opensm_conf,
    read_saquery_smir,
    read_smpquery_portinfo,
)


def _opensm_view(config: OpenSMConfig, source: str) -> View:
    keys = sorted(config.settings.keys() | DEFAULTS.keys())
    rows = [[k, config.get(k).value or "-", config.get(k).line or "default"] for k in keys]
    engines = ",".join(config.routing_engines) or "minhop (the default)"
    return View((Table(("KEY", "VALUE", "LINE"), rows, source),), (f"routing: {engines}",))


OPENSM_CONF = Format(
    name="opensm-conf",
    summary="OpenSM's `opensm.conf`: routing engine, sm_priority, sweep interval, VLs (its defaults where silent)",
    signs=(
        (r"^routing_engine\s+\S", 6),
        (r"^sm_priority\s+\d+\s*$", 4),
        (r"^sweep_interval\s+\d+\s*$", 4),
        (r"^max_op_vls\s+\d+\s*$", 4),
        (r"^partition_config_file\s+/", 6),
        (r"^# (?:DEVICE ATTRIBUTES|SWEEP|ROUTING|PARTITIONING|SM PRIORITY|QoS) OPTIONS\s*$", 4),
        (r"^(?:m_key|sm_key|sa_key|subnet_prefix) 0x[0-9a-fA-F]{16}\s*$", 3),
    ),
    parse=parse_opensm_conf,
    judge=read_opensm_conf,
    render=_opensm_view,
)


def _partitions(text: str, source: str) -> list[Partition]:
    found = parse_partitions_conf(text, source)
    if not found:
        raise ParseError("no `Name[=PKey][,flags] : members ;` entry", fix="give OpenSM's partitions.conf")
    return found


def _partitions_view(partitions: list[Partition], source: str) -> View:
    rows = [
        [p.name, "-" if p.pkey is None else f"0x{p.pkey:04x}", "yes" if p.ipoib else "no",
         cell(p.mtu_bytes) if p.ipoib else "-", ", ".join(f"{k}={v}" if v else k for k, v in p.flags.items()) or "-",
         " ".join(p.members) or "-", p.line]
        for p in partitions
    ]  # fmt: skip
    columns = ("NAME", "PKEY", "IPOIB", "IPOIB MTU", "FLAGS", "MEMBERS", "LINE")
    return View((Table(columns, rows, source),), ("an IPoIB MTU above a port's MTU keeps that port out of the group:"
                                                  " `gpufleet fabric settings` judges it with the ports",))  # fmt: skip


PARTITIONS_CONF = Format(
    name="partitions-conf",
    summary="OpenSM's `partitions.conf`: each partition's P_Key, IPoIB flag and broadcast-group MTU, and members",
    signs=(
        (r"^\s*\w+\s*=\s*0x[0-9a-fA-F]{1,4}\s*(?:,[^:]*)?:", 6),
        (r"\bALL(?:_CAS|_SWITCHES|_ROUTERS)?\s*=\s*(?:full|limited|both)\b", 4),
        (r"^\s*mgid=ff[0-9a-fA-F]{2}:", 4),
        (r",\s*ipoib\s*(?:,|:)", 3),
        (r"\bdefmember\s*=\s*(?:full|limited|both)\b", 3),
    ),
    parse=_partitions,
    render=_partitions_view,
)


def _mlnx_qos(text: str, source: str) -> MlnxQos:
    del source
    parsed = parse_mlnx_qos(text)
    if not parsed.trust and parsed.pfc is None:
        raise ParseError("no trust state or PFC lines", fix="give the output of `mlnx_qos -i <netdev>`")
    return parsed


def _mlnx_qos_view(parsed: MlnxQos, source: str) -> View:
    prio = range(8)
    rows = [
        [p, "on" if parsed.pfc and parsed.pfc[p] else ("off" if parsed.pfc else "-"),
         cell(parsed.prio2tc.get(p)), ",".join(str(d) for d, q in sorted(parsed.dscp2prio.items()) if q == p) or "-",
         cell(parsed.buffers[p] if parsed.buffers else None)]
        for p in prio
    ]  # fmt: skip
    lines = [f"trust {parsed.trust or '-'}, DCBX {parsed.dcbx or '-'}", *parsed.warnings]
    return View((Table(("PRIORITY", "PFC", "TC", "DSCP", "BUFFER"), rows, source),), tuple(lines))


MLNX_QOS = Format(
    name="mlnx-qos",
    summary="`mlnx_qos -i IF`: a RoCE port's trust (pcp/dscp), PFC per priority, DSCP map and traffic classes",
    signs=(
        (r"^\s*Priority trust state:\s*(?:pcp|dscp)\b", 8),
        (r"^\s*PFC configuration:\s*$", 6),
        (r"^\s*priority\s+0\s+1\s+2\s+3\s+4\s+5\s+6\s+7\s*$", 4),
        (r"^\s*enabled\s+(?:[01]\s+){7}[01]\s*$", 4),
        (r"^\s*DCBX mode:\s*(?:OS|Firmware) controlled", 6),
        (r"^\s*dscp2prio mapping:", 6),
        (r"^\s*tc:\s*\d+\s+ratelimit:\s*\S", 4),
    ),
    parse=_mlnx_qos,
    judge=read_mlnx_qos,
    render=_mlnx_qos_view,
)


def _smir(text: str, source: str) -> list[SMInfoRecord]:
    del source
    found = parse_smir(text)
    if not found:
        raise ParseError("no SMInfoRecord with its LID, GUID, priority and state", fix="give `saquery SMIR`'s output")
    return found


def _smir_view(records: list[SMInfoRecord], source: str) -> View:
    rows = [[r.guid, r.lid, r.state, r.priority, r.activity] for r in records]
    return View((Table(("GUID", "LID", "STATE", "PRIORITY", "ACTCOUNT"), rows, source),))


SAQUERY_SMIR = Format(
    name="saquery-smir",
    summary="`saquery SMIR`: the subnet managers the subnet administrator knows, their state and priority",
    signs=(
        (r"^\s*SMInfoRecord dump:\s*$", 10),
        (r"^\s*SMInfo dump:\s*$", 4),
        (r"^\s*SMState\.{2,}\d+\s*$", 4),
        (r"^\s*ActCount\.{2,}\d+\s*$", 3),
    ),
    parse=_smir,
    judge=read_saquery_smir,
    render=_smir_view,
)


def _portinfo(text: str, source: str) -> PortInfo:
    del source
    found = parse_portinfo(text)
    if found is None:
        raise ParseError("no LinkState or NeighborMTU line", fix="give the output of `smpquery portinfo LID PORT`")
    return found


def _portinfo_view(info: PortInfo, source: str) -> View:
    row = [cell(info.lid), cell(info.port), info.link_state or "-", cell(info.neighbor_mtu), cell(info.mtu_cap)]
    return View((Table(("LID", "PORT", "LINK STATE", "NEIGHBOR MTU", "MTU CAP"), [row], source),))


SMPQUERY_PORTINFO = Format(
    name="smpquery-portinfo",
    summary="`smpquery portinfo LID PORT`: a port's PortInfo through the SM's SMPs: link state, NeighborMTU, MtuCap",
    signs=(
        (r"^# Port info: Lid \d+ port \d+", 10),
        (r"^NeighborMTU:\.+\d+\s*$", 4),
        (r"^MtuCap:\.+\d+\s*$", 4),
        (r"^LinkState:\.+\w+\s*$", 3),
        (r"^(?:GidPrefix|SMLid|CapMask|MkeyLeasePeriod|LocalPort):\.+", 2),
    ),
    parse=_portinfo,
    judge=read_smpquery_portinfo,
    render=_portinfo_view,
)
