"""InfiniBand port counters and state as `/sys/class/infiniband/<hca>/ports/<n>/` holds them, from a flattened
snapshot of one HCA directory written as `relative/path = value` lines (`parse_sysfs_snapshot`; how captures and
support bundles record it). Reading the live tree is `gpufleet.sources.infiniband.sysfs`, through the same
`set_port_value`. Counter
files are named as the kernel names them (`symbol_error`, `port_rcv_errors`, ...); each is also given under
the catalog's PMA name (`SymbolErrorCounter`, ...), the name perfquery and ibqueryerrors print, so all IB
sources speak one vocabulary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.catalog import load_ib_counters
from gpufleet.errors import ParseError

_SNAPSHOT_LINE = re.compile(r"^(?P<path>[\w./-]+)\s*=\s?(?P<value>.*)$")
_PORT_PATH = re.compile(r"^ports/(?P<port>\d+)/(?P<rest>.+)$")
_STATE = re.compile(r"^(?P<code>\d+):\s*(?P<name>\S.*)$")
_RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec(?: \((?P<detail>[^)]*)\))?")


def sysfs_to_pma() -> dict[str, str]:
    """sysfs counter file name -> the catalog's PMA counter name."""
    return {c.sysfs: c.name for c in load_ib_counters().values()}


@dataclass
class PortSnapshot:
    hca: str
    port: int
    counters: dict[str, int] = field(default_factory=dict)  # PMA names where the catalog knows the file
    unmapped_counters: dict[str, int] = field(default_factory=dict)  # other counters/* files, by file name
    hw_counters: dict[str, int] = field(default_factory=dict)  # hw_counters/* (mlx5 driver counters)
    state: str | None = None  # ACTIVE, DOWN, INIT, ARMED
    phys_state: str | None = None  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None = None
    rate_detail: str | None = None  # e.g. "4X NDR"
    link_layer: str | None = None

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


@dataclass
class PortReadError:
    """A port whose directory could not be read; the other ports are still reported."""

    hca: str
    port: str
    path: str
    message: str


@dataclass
class HcaSnapshot:
    hca: str
    attributes: dict[str, str] = field(default_factory=dict)  # board_id, fw_ver, hca_type, node_guid, ...
    ports: list[PortSnapshot] = field(default_factory=list)
    errors: list[PortReadError] = field(default_factory=list)


def _counter_value(text: str, where: str) -> int:
    value = text.strip()
    if not value.isdigit():
        raise ParseError(
            f"{where}: counter value {value[:40]!r} is not a non-negative integer",
            fix="the counter file is corrupted or was cut short; read it again",
        )
    return int(value)


def set_port_value(port: PortSnapshot, rest: str, value: str, where: str, names: dict[str, str]) -> None:
    directory, _, name = rest.rpartition("/")
    if directory == "counters":
        number = _counter_value(value, where)
        if name in names:
            port.counters[names[name]] = number
        else:
            port.unmapped_counters[name] = number
    elif directory == "hw_counters":
        port.hw_counters[name] = _counter_value(value, where)
    elif rest in ("state", "phys_state"):
        match = _STATE.match(value.strip())
        if match is None:
            raise ParseError(f"{where}: expected `N: NAME`, got {value.strip()!r}")
        setattr(port, rest, match.group("name").strip())
    elif rest == "rate":
        match = _RATE.match(value.strip())
        if match is None:
            raise ParseError(f"{where}: expected `N Gb/sec (...)`, got {value.strip()!r}")
        port.rate_gbps = float(match.group("gbps"))
        port.rate_detail = match.group("detail")
    elif rest == "link_layer":
        port.link_layer = value.strip()


def parse_sysfs_snapshot(text: str, *, hca: str, source: str = "sysfs snapshot") -> HcaSnapshot:
    """Parse `relative/path = value` lines of one HCA directory (ports/1/counters/symbol_error = 0, ...)."""
    names = sysfs_to_pma()
    snapshot = HcaSnapshot(hca=hca)
    ports: dict[int, PortSnapshot] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _SNAPSHOT_LINE.match(line.strip())
        if match is None:
            raise ParseError(f"{source}:{lineno}: not a `path = value` line: {line.strip()[:60]!r}")
        path, value = match.group("path"), match.group("value")
        port_path = _PORT_PATH.match(path)
        if port_path is None:
            snapshot.attributes[path] = value.strip()
            continue
        number = int(port_path.group("port"))
        port = ports.setdefault(number, PortSnapshot(hca=hca, port=number))
        set_port_value(port, port_path.group("rest"), value, f"{source}:{lineno}: {path}", names)
    snapshot.ports = [ports[n] for n in sorted(ports)]
    return snapshot
