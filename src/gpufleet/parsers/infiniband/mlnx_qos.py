"""`mlnx_qos -i <netdev>` (MLNX_OFED / mlnx-tools): a ConnectX Ethernet port's QoS, the part of RoCE's lossless
setup that lives on the host.

Layout (Mellanox/mlnx-tools python/mlnx_qos `pretty_print`): `DCBX mode: OS controlled|Firmware controlled`,
`Priority trust state: pcp|dscp`, with trust dscp `dscp2prio mapping:` and `\\tprio:N dscp:DD,DD,...,` lines (a
priority's list wraps onto another `prio:N` line after 8 values), `default priority:`, `Receive buffer size
(bytes): ...`, `Cable len: N`, `PFC configuration:` with a `priority 0 1 ... 7` row, an `enabled` row of 0/1 and,
where the kernel has the buffer sysfs, a `buffer` row (each priority's receive buffer); then per traffic class
`tc: N ratelimit: ..., tsa: ets, bw: X%|strict|vendor` and `\\t priority:  P` for each priority it carries.
Scripts and guides often print only some of these lines; each is read where present. An lldpad warning line
(`****** WARNING: lldpad service is running ...`) is kept: lldpad may overwrite what mlnx_qos set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINE_CHARS = 4096
_TRUST = re.compile(r"^\s*Priority trust state:\s*(?P<trust>\S+)")
_DCBX = re.compile(r"^\s*DCBX mode:\s*(?P<mode>.+?)\s*$")
_DSCP = re.compile(r"^\s*prio:\s*(?P<prio>[0-7])\s+dscp:\s*(?P<list>[\d,\s]*)$")
_ROW = re.compile(r"^\s*(?P<name>priority|enabled|buffer):?\s+(?P<values>(?:\d+\s*)+)$")
_TC = re.compile(
    r"^\s*tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?P<rate>[^,]*),\s*tsa:\s*(?P<tsa>\w+)(?:,\s*bw:\s*(?P<bw>\d+)%)?"
)
_TC_PRIO = re.compile(r"^\s*priority:\s+(?P<prio>[0-7])\s*$")
_CABLE = re.compile(r"^\s*Cable len:\s*(?P<len>\d+)")


@dataclass
class MlnxQos:
    interface: str = ""
    trust: str = ""  # pcp, dscp; "" when not printed
    dcbx: str = ""
    pfc: list[bool] | None = None  # per priority 0-7; None when not printed
    buffers: list[int] | None = None  # receive buffer per priority
    dscp2prio: dict[int, int] = field(default_factory=dict)  # DSCP -> priority, as printed
    prio2tc: dict[int, int] = field(default_factory=dict)
    tsa: dict[int, str] = field(default_factory=dict)  # tc -> ets, strict, vendor
    bandwidth: dict[int, int] = field(default_factory=dict)  # tc -> ETS percent
    cable_len: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def pfc_priorities(self) -> list[int]:
        return [p for p, on in enumerate(self.pfc or []) if on]

    def priority_of_dscp(self, dscp: int) -> int | None:
        """The priority a packet of this DSCP gets under trust dscp: the printed mapping, else the ConnectX
        default (DSCP >> 3, the mapping mlnx_qos prints on a port nobody changed)."""
        if self.trust != "dscp":
            return None
        return self.dscp2prio.get(dscp, dscp >> 3)


def parse_mlnx_qos(text: str, interface: str = "") -> MlnxQos:
    out = MlnxQos(interface=interface)
    header: list[int] = []
    tc: int | None = None
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS].rstrip()
        if "WARNING" in line and "lldpad" in line:
            out.warnings.append(line.strip("* ").strip())
            continue
        if found := _TRUST.match(line):
            out.trust = found.group("trust").lower()
        elif found := _DCBX.match(line):
            out.dcbx = found.group("mode")
        elif found := _DSCP.match(line):
            prio = int(found.group("prio"))
            for item in found.group("list").split(","):
                if item.strip().isdigit() and int(item) < 64:
                    out.dscp2prio[int(item)] = prio
        elif (found := _TC_PRIO.match(line)) and tc is not None:  # before the rows: "priority:  1" is one
            out.prio2tc[int(found.group("prio"))] = tc
        elif found := _ROW.match(line):
            values = [int(v) for v in found.group("values").split()]
            if found.group("name") == "priority":
                header = values
            elif len(values) >= 8:
                ordered = _by_priority(header, values)
                if found.group("name") == "enabled":
                    out.pfc = [bool(v) for v in ordered]
                else:
                    out.buffers = ordered
        elif found := _TC.match(line):
            tc = int(found.group("tc"))
            out.tsa[tc] = found.group("tsa")
            if found.group("bw") is not None:
                out.bandwidth[tc] = int(found.group("bw"))
        elif found := _CABLE.match(line):
            out.cable_len = int(found.group("len"))
    return out


def _by_priority(header: list[int], values: list[int]) -> list[int]:
    if sorted(header) == list(range(8)):
        ordered = [0] * 8
        for prio, value in zip(header, values[:8], strict=True):
            ordered[prio] = value
        return ordered
    return values[:8]
