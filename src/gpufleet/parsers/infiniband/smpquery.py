"""`smpquery portinfo <lid> <port>` (infiniband-diags): one port's PortInfo as the subnet manager's SMPs read it,
one `Field:....value` line each (infiniband-diags' mad_dump_portinfo). Read here: LinkState, NeighborMTU (the MTU
the SM set for the link: the lower of both ends' MtuCap) and MtuCap (what the port supports), in bytes.

Tested on the output of infiniband-diags against ibsim (tests/captures/infiniband/smpquery_portinfo_ibsim_ca.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*):\.+(?P<value>.*?)\s*$")
_HEAD = re.compile(r"^#\s*Port info:\s*Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\d+)")


@dataclass(frozen=True, slots=True)
class PortInfo:
    lid: int | None
    port: int | None
    link_state: str  # Active, Down, Init, Armed
    neighbor_mtu: int | None
    mtu_cap: int | None


def _bytes(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def parse_portinfo(text: str) -> PortInfo | None:
    fields: dict[str, str] = {}
    lid = port = None
    for line in text.splitlines():
        if head := _HEAD.match(line.strip()):
            lid, port = int(head.group("lid")), int(head.group("port"))
        elif found := _FIELD.match(line.strip()):
            fields.setdefault(found.group("key"), found.group("value"))
    if "LinkState" not in fields and "NeighborMTU" not in fields:
        return None
    return PortInfo(
        lid,
        port,
        fields.get("LinkState", ""),
        _bytes(fields.get("NeighborMTU")),
        _bytes(fields.get("MtuCap")),
    )
