"""`ibstat` and `ibstatus` output: each local HCA port's state, physical state, rate, LIDs and link layer.

ibstat (rdma-core infiniband-diags/ibstat.c) prints, per device, `CA 'mlx5_0'` (or `Switch`, `Router`) and its
type, port count, firmware and GUIDs, then each port as `Port 1:` with `State`, `Physical state`, `Rate`
(`Rate: 2.5`, `Rate: 10 (FDR10)`), `Effective speed` (newer versions), `Base lid`, `LMC`, `SM lid`,
`Capability mask`, `Port GUID` and `Link layer` (the last two fields are missing from the oldest versions).
`ibstat <ca> <port>` prints `CA: 'mlx5_0'` and one port without indentation; `ibstat -s` only the device headers.

ibstatus (the infiniband-diags shell script) prints `Infiniband device 'mlx5_0' port 1 status:` and the sysfs
values as they are: `default gid`, `base lid` (hex), `sm lid`, `state` (`4: ACTIVE`), `phys state`
(`5: LinkUp`), `rate` (`400 Gb/sec (4X NDR)`) and `link_layer` (missing from old versions), then a blank line.

Both parsers take an excerpt: fields before the first header belong to a record whose start is missing
(`starts_mid_record`), and a record that stops short of the fields the others show, or a device with fewer
ports than it says it has, makes the output `truncated` with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINE_CHARS = 4096  # a longer line is no tool's: not parsed, only listed
_DEVICE = re.compile(r"^(?P<type>CA|Switch|Router|iWARP RNIC|\?\?\?)(?P<single>:)? '(?P<name>[^']*)'\s*$")
_DEVICE_FIELD = re.compile(
    r"^(?:(?:CA|Switch|Router|iWARP RNIC|\?\?\?) type|Number of ports|Firmware version|Hardware version|Node GUID"
    r"|System image GUID):"
)
_PORT = re.compile(r"^Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?):\s?(?P<value>.*)$")
_PORT_FIELDS = (
    "State",
    "Physical state",
    "Rate",
    "Effective speed",
    "Base lid",
    "LMC",
    "SM lid",
    "Capability mask",
    "Port GUID",
    "Link layer",
)
_MINIMAL_PORT = frozenset(("State", "Physical state", "Rate", "Base lid", "LMC", "SM lid", "Port GUID"))
_DIAGNOSTIC = re.compile(r"^(?:\S+: )?(?:ibwarn|ibpanic|iberror|ibdebug)\b|^\S+: iberror:|^Fatal error:")
_IBSTAT_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?)(?:\s*\((?P<detail>[^)]*)\))?$")
_SYSFS_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec(?: \((?P<width>\d+)X(?: (?P<speed>[A-Z0-9]+))?\))?")
_CODED = re.compile(r"^(?P<code>\d+): (?P<name>.*)$")


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _rate(text: str | None) -> tuple[float | None, str | None]:
    """`400` -> (400.0, None); `10 (FDR10)` -> (10.0, "FDR10")."""
    match = _IBSTAT_RATE.match((text or "").strip())
    if match is None:
        return None, None
    try:
        return float(match.group("gbps")), match.group("detail")
    except (OverflowError, ValueError):
        return None, None


# -- ibstat --------------------------------------------------------------------------------------------------
@dataclass
class IbstatPort:
    device: str | None  # None when the excerpt starts inside the port's record
    number: int | None
    line: int  # where the record starts in the input (1-based)
    fields: dict[str, str] = field(default_factory=dict)  # as printed: "State" -> "Active"
    lines: list[str] = field(default_factory=list)

    @property
    def state(self) -> str | None:
        return self.fields.get("State")

    @property
    def phys_state(self) -> str | None:
        return self.fields.get("Physical state")

    @property
    def rate_gbps(self) -> float | None:
        return _rate(self.fields.get("Rate"))[0]

    @property
    def rate_detail(self) -> str | None:
        """`FDR10` when ibstat printed `Rate: 10 (FDR10)`."""
        return _rate(self.fields.get("Rate"))[1]

    @property
    def base_lid(self) -> int | None:
        return _int(self.fields.get("Base lid"))

    @property
    def sm_lid(self) -> int | None:
        return _int(self.fields.get("SM lid"))

    @property
    def port_guid(self) -> str | None:
        return self.fields.get("Port GUID")

    @property
    def link_layer(self) -> str | None:
        return self.fields.get("Link layer")


@dataclass
class IbstatDevice:
    name: str | None  # None when the excerpt starts inside the device's header
    node_type: str | None  # CA, Switch, Router
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    ports: list[IbstatPort] = field(default_factory=list)
    single_port: bool = False  # `ibstat <ca> <port>`: one port, no header fields

    @property
    def number_of_ports(self) -> int | None:
        return _int(self.fields.get("Number of ports"))

    @property
    def device_type(self) -> str | None:
        """The HCA model as ibstat prints it (`MT4129`)."""
        return next((v for k, v in self.fields.items() if k.endswith(" type")), None)


@dataclass
class IbstatReport:
    devices: list[IbstatDevice] = field(default_factory=list)
    starts_mid_record: bool = False  # the first lines belong to a record whose start is not in the input
    truncated: str = ""  # why the output looks cut short ("" when it looks whole)
    short_format: bool = False  # `ibstat -s`: device headers only, no ports
    diagnostics: list[str] = field(default_factory=list)  # the tool's own warnings and errors
    unreadable: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ports(self) -> list[IbstatPort]:
        return [p for d in self.devices for p in d.ports]


class _IbstatBuilder:
    def __init__(self) -> None:
        self.report = IbstatReport()
        self.device: IbstatDevice | None = None
        self.port: IbstatPort | None = None

    def _anonymous_device(self, lineno: int) -> IbstatDevice:
        self.report.starts_mid_record = True
        device = IbstatDevice(None, None, lineno)
        self.report.devices.append(device)
        self.device = device
        return device

    def feed(self, lineno: int, raw: str) -> None:
        line = raw.strip()
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            self.report.unreadable.append((lineno, raw[:200]))
            return
        head = _DEVICE.match(line)
        if head is not None:
            self.device = IbstatDevice(head.group("name"), head.group("type"), lineno, single_port=bool(head["single"]))
            self.report.devices.append(self.device)
            self.port = None
            return
        port = _PORT.match(line)
        if port is not None:
            device = self.device or self._anonymous_device(lineno)
            self.port = IbstatPort(device.name, int(port.group("port")), lineno, lines=[raw])
            device.ports.append(self.port)
            return
        if _DIAGNOSTIC.search(line):
            self.report.diagnostics.append(line)
            return
        match = _FIELD.match(line)
        if match is None:
            self.report.unreadable.append((lineno, raw))
            return
        key, value = match.group("key"), match.group("value").strip()
        if _DEVICE_FIELD.match(line):
            owner = self.device
            if owner is None or owner.ports:  # a header field after ports: a new, headless device
                owner = self._anonymous_device(lineno)
                self.port = None
            owner.fields[key] = value
            return
        if key not in _PORT_FIELDS:
            self.report.unreadable.append((lineno, raw))
            return
        if self.port is None or key in self.port.fields:
            device = self.device or self._anonymous_device(lineno)
            if self.port is None:
                self.report.starts_mid_record = self.report.starts_mid_record or not device.ports
            self.port = IbstatPort(device.name, None, lineno)  # a port whose `Port N:` line is missing
            device.ports.append(self.port)
        if len(self.port.lines) < 32:
            self.port.lines.append(raw)
        self.port.fields[key] = value

    def finish(self) -> IbstatReport:
        report = self.report
        devices = report.devices
        if devices and all(not d.ports for d in devices):
            if all("System image GUID" in d.fields for d in devices):
                report.short_format = True
            else:
                report.truncated = "the output stops inside a device's header"
            return report
        expected = set(_MINIMAL_PORT)
        for port in report.ports:
            expected |= {k for k in port.fields if k in ("Capability mask", "Link layer")}
        last_port = report.ports[-1] if report.ports else None
        for index, device in enumerate(devices):
            if not device.ports:
                last = index == len(devices) - 1
                why = "the output stops after a device's header" if last else f"{device.name!r} lists no ports"
                report.truncated = report.truncated or why
                continue
            for port in device.ports:
                # the last record owes what rdma-core prints; versions before 2010 end a port without `Link layer`,
                # which only the records before the last can show
                wanted = expected | {"Capability mask", "Link layer"} if port is last_port else expected
                missing = _missing(port.fields, wanted, headless=port.number is None, order=_PORT_FIELDS)
                if missing:
                    where = f"port {port.number}" if port.number is not None else "a port"
                    report.truncated = report.truncated or (
                        f"{where} of {device.name or 'a device'} stops before {', '.join(missing)}"
                    )
            count = device.number_of_ports
            if count is not None and device.node_type == "CA" and not device.single_port and device.name:
                lacking = sorted(set(range(1, count + 1)) - {p.number for p in device.ports})
                if lacking:
                    report.truncated = report.truncated or (
                        f"{device.name} has {count} ports but port {', '.join(map(str, lacking))} is not listed"
                    )
        return report


def _missing(fields: dict[str, str], expected: set[str], *, headless: bool, order: tuple[str, ...]) -> list[str]:
    """The expected fields a record lacks; a record whose start is cut off only owes the fields after its first."""
    wanted = [k for k in order if k in expected]
    if headless and fields:
        first = min(order.index(k) for k in fields if k in order)
        wanted = [k for k in wanted if order.index(k) >= first]
    return [k for k in wanted if k not in fields]


def parse_ibstat(text: str, *, source: str = "ibstat") -> IbstatReport:
    """Parse `ibstat`, `ibstat <ca>`, `ibstat <ca> <port>` or `ibstat -s` output, or an excerpt of one."""
    builder = _IbstatBuilder()
    for lineno, line in enumerate(text.splitlines(), start=1):
        builder.feed(lineno, line)
    return builder.finish()


# -- ibstatus ------------------------------------------------------------------------------------------------
_STATUS_HEAD = re.compile(r"^Infiniband device '(?P<device>[^']*)' port (?P<port>\S+) status:\s*$")
_STATUS_FIELD = re.compile(r"^(?P<key>default gid|base lid|sm lid|state|phys state|rate|link_layer):\s*(?P<value>.*)$")
_STATUS_FIELDS = ("default gid", "base lid", "sm lid", "state", "phys state", "rate", "link_layer")
_STATUS_MINIMAL = frozenset(_STATUS_FIELDS[:-1])


@dataclass
class IbstatusPort:
    device: str | None
    number: int | None
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def _coded(self, key: str) -> tuple[int | None, str | None]:
        value = self.fields.get(key)
        if value is None or value == "unknown":
            return None, None
        match = _CODED.match(value)
        if match is None:
            return None, value
        return _int(match.group("code")), match.group("name").strip()

    @property
    def state(self) -> str | None:
        """As sysfs prints it: `4: ACTIVE`."""
        value = self.fields.get("state")
        return None if value in (None, "unknown") else value

    @property
    def phys_state(self) -> str | None:
        value = self.fields.get("phys state")
        return None if value in (None, "unknown") else value

    @property
    def rate_gbps(self) -> float | None:
        match = _SYSFS_RATE.match(self.fields.get("rate", ""))
        if match is None:
            return None
        try:
            return float(match.group("gbps"))
        except (OverflowError, ValueError):
            return None

    @property
    def width(self) -> int | None:
        match = _SYSFS_RATE.match(self.fields.get("rate", ""))
        return _int(match.group("width")) if match and match.group("width") else None

    @property
    def speed(self) -> str | None:
        """The generation in the rate (`NDR`); None for old kernels' SDR (`10 Gb/sec (4X)`)."""
        match = _SYSFS_RATE.match(self.fields.get("rate", ""))
        return match.group("speed") if match else None

    @property
    def base_lid(self) -> int | None:
        return _int(self.fields.get("base lid"), 0)

    @property
    def sm_lid(self) -> int | None:
        return _int(self.fields.get("sm lid"), 0)

    @property
    def link_layer(self) -> str | None:
        return self.fields.get("link_layer")


@dataclass
class IbstatusReport:
    ports: list[IbstatusPort] = field(default_factory=list)
    starts_mid_record: bool = False
    truncated: str = ""
    diagnostics: list[str] = field(default_factory=list)  # `Fatal error: ...`, the deprecation warning
    unreadable: list[tuple[int, str]] = field(default_factory=list)


def parse_ibstatus(text: str, *, source: str = "ibstatus") -> IbstatusReport:
    """Parse `ibstatus [dev[:port]]` output, or an excerpt of one."""
    report = IbstatusReport()
    port: IbstatusPort | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            report.unreadable.append((lineno, raw[:200]))
            continue
        head = _STATUS_HEAD.match(line)
        if head is not None:
            port = IbstatusPort(head.group("device"), _int(head.group("port")), lineno, lines=[raw])
            report.ports.append(port)
            continue
        match = _STATUS_FIELD.match(line)
        if match is None:
            if _DIAGNOSTIC.search(line) or "deprecated" in line:
                report.diagnostics.append(line)
            else:
                report.unreadable.append((lineno, raw))
            continue
        key = match.group("key")
        if port is None or key in port.fields:
            report.starts_mid_record = report.starts_mid_record or port is None
            port = IbstatusPort(None, None, lineno)
            report.ports.append(port)
        port.fields[key] = match.group("value").strip()
        if len(port.lines) < 16:
            port.lines.append(raw)
    expected = set(_STATUS_MINIMAL) | ({"link_layer"} if any("link_layer" in p.fields for p in report.ports) else set())
    for entry in report.ports:
        # the last record owes the link_layer today's script prints (the oldest scripts print none)
        wanted = expected | {"link_layer"} if entry is report.ports[-1] else expected
        missing = _missing(entry.fields, wanted, headless=entry.device is None, order=_STATUS_FIELDS)
        if missing:
            where = f"{entry.device} port {entry.number}" if entry.device else "a port"
            report.truncated = report.truncated or f"{where} stops before {', '.join(missing)}"
    return report
