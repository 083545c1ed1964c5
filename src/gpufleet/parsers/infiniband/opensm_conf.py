"""OpenSM's configuration: `opensm.conf` (as `opensm --create-config FILE` writes it, or an operator's file of
overrides) and the partition file `partitions.conf`.

opensm.conf (OpenSM 3.3.x, osm_subnet.c `osm_subn_parse_conf_file`): one `key value` per line, `#` starts a
comment, a key OpenSM does not know is logged and ignored, booleans are TRUE/FALSE, `(null)` is an unset string
(routing_engine (null) is Min Hop). A key missing from the file keeps its compiled-in default: `DEFAULTS` holds the
ones judged here, as OpenSM 3.3.23's `--create-config` writes them (tests read the real dump and check them).

partitions.conf (opensm(8), PARTITION CONFIGURATION): `Name[=PKey][,flag[=value]]... : members ;`, an entry may
span lines and ends at `;`; `#` starts a comment. The flags after the name are `ipoib`, `indx0`,
`defmember=full|limited|both` and the IPoIB broadcast group's `mtu`, `rate`, `sl`, `scope`, `Q_Key`, `TClass`,
`FlowLabel` (mtu and rate in IBTA codes: mtu=4 is 2048, the default; mtu=5 is 4096). Member lists name port GUIDs
or ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS, SELF, each with `=full|limited|both`; `mgid=...` lines add multicast
groups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINE_CHARS = 4096
# IBTA MTU codes (IBA 14.2.5.6 MTUCap/NeighborMTU; partitions.conf mtu=, ibv_devinfo's `4096 (5)`)
MTU_CODES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
# OpenSM 3.3.23 `--create-config` (tests/captures/infiniband/opensm_3.3.23_create_config.conf)
DEFAULTS = {
    "routing_engine": "(null)",
    "sm_priority": "0",
    "sweep_interval": "10",
    "max_op_vls": "5",
    "qos": "FALSE",
    "lmc": "0",
    "partition_config_file": "/etc/opensm/partitions.conf",
    "subnet_timeout": "18",
    "transaction_timeout": "200",
    "max_wire_smps": "4",
}
PARTITION_MTU_DEFAULT = 4  # opensm(8): "mtu=<val> ... (default is 4 (2048))"
_KEY = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?:\s+(?P<value>.*?))?\s*$")


@dataclass(frozen=True, slots=True)
class Setting:
    value: str
    line: int  # 0: not in the file, OpenSM's default


@dataclass
class OpenSMConfig:
    settings: dict[str, Setting] = field(default_factory=dict)
    source: str = ""

    def get(self, key: str) -> Setting:
        """The file's value, else OpenSM's default (line 0); "" for a key neither knows."""
        found = self.settings.get(key)
        if found is not None:
            return found
        return Setting(DEFAULTS.get(key, ""), 0)

    def given(self, key: str) -> bool:
        return key in self.settings

    @property
    def routing_engines(self) -> list[str]:
        """The engines OpenSM tries in order; [] is Min Hop (the default)."""
        value = self.get("routing_engine").value.strip()
        if value in ("", "(null)"):
            return []
        return [part.strip().lower() for part in value.split(",") if part.strip()]

    def number(self, key: str) -> int | None:
        text = self.get(key).value.strip()
        try:
            return int(text, 0)
        except ValueError:
            return None

    def flag(self, key: str) -> bool | None:
        text = self.get(key).value.strip().upper()
        return {"TRUE": True, "FALSE": False}.get(text)


def parse_opensm_conf(text: str, source: str = "") -> OpenSMConfig:
    """Every `key value` line; the last of a repeated key wins, as in OpenSM's parser."""
    config = OpenSMConfig(source=source)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw[:MAX_LINE_CHARS].split("#", 1)[0].strip()
        if not line:
            continue
        found = _KEY.match(line)
        if found is None:
            continue
        config.settings[found.group("key")] = Setting((found.group("value") or "").strip(), number)
    return config


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    pkey: int | None  # None: OpenSM generates one
    flags: dict[str, str]  # ipoib -> "", mtu -> "5", defmember -> "full", ...
    members: tuple[str, ...]  # "ALL=full", "0x0002c90300001234", ...
    line: int

    @property
    def ipoib(self) -> bool:
        return "ipoib" in self.flags

    @property
    def mtu_code(self) -> int:
        """The IPoIB broadcast group's MTU code (4, 2048, unless given)."""
        text = self.flags.get("mtu", "")
        try:
            return int(text, 0)
        except ValueError:
            return PARTITION_MTU_DEFAULT

    @property
    def mtu_bytes(self) -> int | None:
        return MTU_CODES.get(self.mtu_code)


def parse_partitions_conf(text: str, source: str = "") -> list[Partition]:
    """The partitions in file order. An entry without its `:` is skipped (OpenSM logs and skips it too)."""
    del source
    partitions: list[Partition] = []
    entry: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw[:MAX_LINE_CHARS].split("#", 1)[0]
        while line:
            head, semicolon, rest = line.partition(";")
            if head.strip() and not entry:
                start = number
            if head.strip():
                entry.append(head)
            if not semicolon:
                break
            partition = _partition("\n".join(entry), start)
            if partition is not None:
                partitions.append(partition)
            entry, line = [], rest
    return partitions


def _partition(text: str, line: int) -> Partition | None:
    definition, colon, properties = text.partition(":")
    if not colon:
        return None
    parts = [p.strip() for p in " ".join(definition.split()).split(",")]
    name, _, pkey_text = parts[0].partition("=")
    pkey: int | None
    try:
        pkey = int(pkey_text.strip(), 0) & 0x7FFF if pkey_text.strip() else None
    except ValueError:
        pkey = None
    flags: dict[str, str] = {}
    for part in parts[1:]:
        if part:
            key, _, value = part.partition("=")
            flags[key.strip()] = value.strip()
    members = tuple(
        m.strip()
        for row in properties.splitlines()
        if not row.strip().startswith("mgid=")  # a multicast group of the partition, not a member
        for m in re.split(r"[,\s]+", row)
        if m.strip()
    )
    return Partition(name.strip(), pkey, flags, members, line)
