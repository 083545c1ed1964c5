"""`ibv_devinfo` and `ibv_devinfo -v`: each RDMA device (HCA) libibverbs sees and the state of its ports.

The layout is rdma-core's libibverbs/examples/devinfo.c (v17 to v50 print the same port fields): per device
`hca_id:\\t<name>`, then tab-indented `transport`, `fw_ver`, `node_guid`, `sys_image_guid`, `vendor_id`,
`vendor_part_id`, `hw_ver`, `board_id`, `phys_port_cnt` (with `-v`, the device's limits and capability flags follow),
then per port `port:\\t<n>` with `state` (`PORT_DOWN (1)`, `PORT_INIT (2)`, `PORT_ARMED (3)`, `PORT_ACTIVE (4)`),
`max_mtu`, `active_mtu`, `sm_lid`, `port_lid`, `port_lmc`, `link_layer` (InfiniBand, Ethernet); `-v` adds
`active_width` (`4X (2)`), `active_speed` (`50.0 Gbps (64)`: the per-lane data rate and the verbs speed code, or
`invalid speed (0)` when the port has no link), `phys_state` (`LINK_UP (5)`, `POLLING (2)`, `DISABLED (3)`, ...;
printed for the InfiniBand transport only) and the non-null GIDs. MLNX_OFED's build prints a `Device ports:` line
before the first port. `-l` lists the device names only (`2 HCAs found:`). What it writes to stderr when a device or
port cannot be queried (`Failed to query port 1 props`, `No IB devices found`, `IB device 'mlx5_3' wasn't found`)
is kept as diagnostics, since a vanished HCA shows up only there.

Speed codes (enum ibv_port_attr.active_speed, libibverbs/verbs.h): 1 SDR 2.5, 2 DDR 5, 4 QDR 10, 8 FDR10 10,
16 FDR 14, 32 EDR 25, 64 HDR 50, 128 NDR 100 (rdma-core v42), 256 XDR 200 Gb/s per lane. Width codes: 1 1X, 2 4X,
4 8X, 8 12X, 16 2X.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINE_CHARS = 4096
SPEED_CODES = {1: "SDR", 2: "DDR", 4: "QDR", 8: "FDR10", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR", 256: "XDR"}
DATA_RATES = {2.5: "SDR", 5.0: "DDR", 10.0: "QDR", 14.0: "FDR", 25.0: "EDR", 50.0: "HDR", 100.0: "NDR", 200.0: "XDR"}
STATES = {"PORT_DOWN": "Down", "PORT_INIT": "Init", "PORT_ARMED": "Armed", "PORT_ACTIVE": "Active",
          "PORT_ACTIVE_DEFER": "ActiveDefer", "PORT_NOP": "NoChange"}  # fmt: skip
PHYS_STATES = {
    "SLEEP": "Sleep",
    "POLLING": "Polling",
    "DISABLED": "Disabled",
    "PORT_CONFIGURATION TRAINNING": "PortConfigurationTraining",  # devinfo.c's spelling
    "PORT_CONFIGURATION TRAINING": "PortConfigurationTraining",
    "LINK_UP": "LinkUp",
    "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
    "PHY TEST": "PhyTest",
}
_HCA = re.compile(r"^hca_id:\s*(?P<name>\S+)\s*$")
_PORT = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][\w ]*?):\s*(?P<value>.*?)\s*$")
_CODED = re.compile(r"^(?P<name>.*?)\s*\((?P<code>-?\d+)\)$")
_LIST = re.compile(r"^(?P<n>\d+) HCAs? found:\s*$")
_DIAGNOSTIC = re.compile(
    r"^(?:Failed to (?:open device|query device props|query port \d+ props|query gid.*|close device|get IB devices "
    r"list.*)|No IB devices found|IB device '[^']*' wasn't found|Invalid port requested for device|"
    r"libibverbs: Warning: .*|ibv_devinfo: .*)\s*$"
)
_PORT_FIELDS = ("state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer")
_DEVICE_FIELDS = ("transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver",
                  "board_id", "phys_port_cnt")  # fmt: skip


def _coded(text: str | None) -> tuple[str, int | None]:
    """`PORT_ACTIVE (4)` -> ("PORT_ACTIVE", 4); `50.0 Gbps (64)` -> ("50.0 Gbps", 64)."""
    if text is None:
        return "", None
    m = _CODED.match(text.strip())
    if m is None:
        return text.strip(), None
    return m.group("name"), int(m.group("code"))


@dataclass
class DevinfoPort:
    device: str | None
    number: int
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def state(self) -> str | None:
        """The port state in infiniband-diags' words (Active, Down, Init, Armed), or as printed."""
        if "state" not in self.fields:
            return None
        name, _ = _coded(self.fields["state"])
        return STATES.get(name.upper(), name or None)

    @property
    def phys_state(self) -> str | None:
        if "phys_state" not in self.fields:
            return None
        name, _ = _coded(self.fields["phys_state"])
        return PHYS_STATES.get(name.upper(), name or None)

    @property
    def link_layer(self) -> str | None:
        return self.fields.get("link_layer")

    @property
    def width(self) -> int | None:
        name, _ = _coded(self.fields.get("active_width"))
        m = re.match(r"^(\d+)X$", name)
        return int(m.group(1)) if m else None

    @property
    def speed(self) -> str | None:
        """The link's generation (SDR ... XDR) from the verbs speed code, or from the per-lane rate printed."""
        name, code = _coded(self.fields.get("active_speed"))
        if code is not None and code in SPEED_CODES:
            return SPEED_CODES[code]
        m = re.match(r"^(\d+(?:\.\d+)?) Gbps$", name)
        return DATA_RATES.get(float(m.group(1))) if m else None

    @property
    def lane_gbps(self) -> float | None:
        name, code = _coded(self.fields.get("active_speed"))
        m = re.match(r"^(\d+(?:\.\d+)?) Gbps$", name)
        return float(m.group(1)) if m and code != 0 else None

    @property
    def rate_gbps(self) -> float | None:
        lane, width = self.lane_gbps, self.width
        return lane * width if lane is not None and width is not None else None

    @property
    def lid(self) -> int | None:
        value = self.fields.get("port_lid", "")
        return int(value) if value.isdigit() else None


@dataclass
class DevinfoDevice:
    name: str
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    ports: list[DevinfoPort] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def port_count(self) -> int | None:
        value = self.fields.get("phys_port_cnt", "")
        return int(value) if value.isdigit() else None

    @property
    def node_guid(self) -> str | None:
        guid = self.fields.get("node_guid")
        return "0x" + guid.replace(":", "").lower() if guid and re.fullmatch(r"[0-9a-fA-F:]{19}", guid) else guid


@dataclass
class Devinfo:
    devices: list[DevinfoDevice] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)  # `ibv_devinfo -l`: the device names
    listed_count: int | None = None  # `N HCAs found:`
    diagnostics: list[tuple[str | None, str]] = field(default_factory=list)  # (the device it followed, the line)
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    starts_mid_record: bool = False
    truncated: str = ""  # why the output looks cut short

    @property
    def ports(self) -> list[DevinfoPort]:
        return [p for d in self.devices for p in d.ports]


def parse_ibv_devinfo(text: str, source: str = "") -> Devinfo:
    """Read `ibv_devinfo [-v] [-d dev] [-i port]` or `ibv_devinfo -l` output; never raises on odd lines."""
    out = Devinfo()
    device: DevinfoDevice | None = None
    port: DevinfoPort | None = None
    in_list = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw[:MAX_LINE_CHARS].rstrip()
        if not line.strip():
            continue
        stripped = line.strip()
        if _DIAGNOSTIC.match(stripped):
            out.diagnostics.append((device.name if device else None, stripped))
            continue
        if m := _LIST.match(stripped):
            out.listed_count, in_list = int(m.group("n")), True
            continue
        if m := _HCA.match(stripped):
            in_list, port = False, None
            device = DevinfoDevice(m.group("name"), number, lines=[line])
            out.devices.append(device)
            continue
        if in_list and re.fullmatch(r"[\w.-]+", stripped):
            out.listed.append(stripped)
            continue
        if m := _PORT.match(line):
            if device is None:
                out.starts_mid_record = True
                device = DevinfoDevice("", number)
                out.devices.append(device)
            port = DevinfoPort(device.name or None, int(m.group("port")), number, lines=[line])
            device.ports.append(port)
            continue
        m = _FIELD.match(line)
        if m is None:
            if device is None and not stripped.startswith(("Device ports", "GID[")):
                out.unreadable.append((number, line))
            continue  # capability flag lists and the like
        key, value = m.group("key"), m.group("value")
        if device is None:
            out.starts_mid_record = True
            device = DevinfoDevice("", number)
            out.devices.append(device)
            if key in _PORT_FIELDS or key in ("active_width", "active_speed", "phys_state"):
                port = DevinfoPort(None, 0, number)
                device.ports.append(port)
        if port is not None:
            if key not in port.fields:
                port.fields[key] = value
            port.lines.append(line)
        elif key in _DEVICE_FIELDS:
            device.fields[key] = value
            device.lines.append(line)
    _check_whole(out)
    return out


def _check_whole(out: Devinfo) -> None:
    """The last record is the one a cut leaves short: its port missing fields every port prints, or a device whose
    ports never follow."""
    if not out.devices:
        return
    last = out.devices[-1]
    if last.ports:
        port = last.ports[-1]
        missing = [k for k in _PORT_FIELDS if k not in port.fields]
        if missing:
            out.truncated = f"{last.name or 'a device'} port {port.number} stops before {missing[0]}"
    elif last.port_count:
        out.truncated = f"{last.name} says it has {last.port_count} port(s), and none follow"
