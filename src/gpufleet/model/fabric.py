"""The network fabric: HCAs and their ports, switches, and the links between ports."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class PortState(StrEnum):
    active = "Active"
    down = "Down"
    init = "Init"
    polling = "Polling"


class Transport(StrEnum):
    ib = "ib"
    roce = "roce"
    efa = "efa"
    socket = "socket"


@dataclass(slots=True)
class Port:
    """One physical port of an HCA or a switch."""

    owner: str  # "node01/mlx5_0" for an HCA, the switch name for a switch
    number: int
    guid: str
    lid: int
    speed_gbps: float
    state: PortState = PortState.active
    rail: int | None = None
    peer: tuple[str, int] | None = None  # (owner, port number) at the other end

    @property
    def key(self) -> str:
        return f"{self.owner}[{self.number}]"


@dataclass(slots=True)
class Nic:
    """A host channel adapter (ConnectX) on a node: one rail of a rail-optimized fabric."""

    node: str
    name: str  # mlx5_0
    guid: str
    rail: int
    ports: list[Port] = field(default_factory=list)
    netdev: str = ""  # ib0 / ens... for socket bootstrap

    @property
    def speed_gbps(self) -> float:
        return sum(p.speed_gbps for p in self.ports if p.state is PortState.active)


@dataclass(slots=True)
class Switch:
    name: str
    guid: str
    tier: str  # "leaf", "spine" or "core"
    radix: int
    group: int  # scalable unit for leaves, plane for spines
    rail: int | None = None
    ports: list[Port] = field(default_factory=list)


@dataclass(slots=True)
class Link:
    """A cable between two ports."""

    a: tuple[str, int]
    b: tuple[str, int]
    speed_gbps: float
    state: PortState = PortState.active
    width: int | None = None  # lanes the cable should train at (4 for 4X), when the design says
    speed: str | None = None  # InfiniBand generation it should run at: HDR, NDR, XDR

    @property
    def key(self) -> str:
        return f"{self.a[0]}[{self.a[1]}]<->{self.b[0]}[{self.b[1]}]"


@dataclass(slots=True)
class Fabric:
    transport: Transport
    switches: list[Switch] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    def switch(self, name: str) -> Switch:
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

    def leaf_of(self, owner: str, port: int = 1) -> str | None:
        """The switch an HCA port is cabled to."""
        for link in self.links:
            if link.a == (owner, port):
                return link.b[0]
            if link.b == (owner, port):
                return link.a[0]
        return None


def normalise_guid(text: str | None) -> str:
    """0x and 16 lower-case hex digits, from the many ways the tools print a GUID (`0x0002c903000e0b72`,
    `S-0002c903000e0b72`, `2c903000e0b72`)."""
    if not text:
        return ""
    value = text.strip().lower()
    for prefix in ("s-", "h-", "r-"):
        if value.startswith(prefix):
            value = value[len(prefix) :]
    value = value.removeprefix("0x")
    try:
        return f"0x{int(value, 16):016x}"
    except ValueError:
        return ""
