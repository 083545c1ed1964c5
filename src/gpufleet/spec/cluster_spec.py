"""The `kind: Cluster` manifest: node pools and a fabric."""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal, cast

from pydantic import BeforeValidator, Field, field_validator, model_validator

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.errors import NotFoundError
from gpufleet.health.ib_ports import SPEEDS
from gpufleet.model.fabric import Transport
from gpufleet.model.node import TaintEffect
from gpufleet.spec.base import API_VERSION, Manifest, Metadata


class GpuSpec(Manifest):
    model: str
    count: int = Field(ge=1, le=72)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        try:
            return get_gpu_model(value).name
        except NotFoundError as exc:
            raise ValueError(f"{exc.message}; {exc.fix}") from None


class NicSpec(Manifest):
    count: int = Field(default=0, ge=0, le=32)
    speed_gbps: float = Field(default=400.0, gt=0)
    ports: int = Field(default=1, ge=1, le=4)  # ports per HCA; a rail-optimized fabric cables port 1


class TaintSpec(Manifest):
    key: str
    value: str = ""
    effect: TaintEffect


class SoftwareSpec(Manifest):
    driver_version: str = "550.90.07"
    cuda_version: str = "12.4"
    kernel: str = "5.15.0-119-generic"
    fabric_manager_version: str | None = None  # defaults to the driver version
    nccl_version: str = "2.21.5"


HOSTNAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$"


class NodePoolSpec(Manifest):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    count: int = Field(ge=1, le=20000)
    gpu: GpuSpec | None = None
    nics: NicSpec = NicSpec()
    cpu_milli: int = Field(default=224_000, gt=0)
    memory_mi_b: int = Field(default=2_000_000, gt=0, alias="memoryMiB")
    labels: dict[str, str] = {}
    taints: list[TaintSpec] = []
    nodes_per_rack: int = Field(default=4, ge=1)
    # hosts per multi-node NVLink domain (18 compute trays of a GB200 NVL72 rack), grouped in hostname order like
    # racks; None where the pool's NVLink stays inside each node (HGX/DGX baseboards)
    nvlink_domain_nodes: int | None = Field(default=None, ge=1, le=576)
    software: SoftwareSpec | None = None
    # the hosts' real names, in order (default: pool-000, pool-001, ...)
    hostnames: list[Annotated[str, Field(pattern=HOSTNAME)]] | None = None

    @model_validator(mode="after")
    def _one_name_per_node(self) -> NodePoolSpec:
        if self.hostnames is not None and len(self.hostnames) != self.count:
            raise ValueError(
                f"pool {self.name!r} lists {len(self.hostnames)} hostnames for count {self.count}: give one per node"
            )
        return self

    def node_names(self) -> list[str]:
        if self.hostnames is not None:
            return list(self.hostnames)
        return [f"{self.name}-{i:03d}" for i in range(self.count)]

    def nvlink_domains(self) -> dict[str, str]:
        """host -> its NVLink domain (`<pool>-nvl00`, ...), for a pool whose domains span nodes."""
        if self.nvlink_domain_nodes is None:
            return {}
        size = self.nvlink_domain_nodes
        return {host: f"{self.name}-nvl{i // size:02d}" for i, host in enumerate(self.node_names())}


# Per-lane data rate of each InfiniBand generation (Gb/s), to tell a generation from linkSpeedGbps and back.
LANE_GBPS: dict[str, float] = {gen: data for gen, (_signalling, data) in SPEEDS.items()}
Generation = Literal["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"]
Width = Literal[1, 2, 4, 8, 12]
XDR_RADIX = 128  # Quantum-X800 leaves and spines, as the fabric designs count them (the Q3400 has 144 ports)
DEFAULT_RADIX = 64  # Quantum-2 QM9700: 64 NDR ports
_RATIO = re.compile(r"^\s*(?P<down>\d+(?:\.\d+)?)\s*:\s*(?P<up>\d+(?:\.\d+)?)\s*$")
_HCA_DEVICE = re.compile(r"^mlx5_(?P<rail>\d+)$")


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


class SwitchSpec(Manifest):
    """One switch of an explicit fabric: its name (the node description it shows), port count and tier."""

    name: str = Field(pattern=r"^[^/\s\"]+$", max_length=64)
    ports: int = Field(ge=1, le=255)
    tier: Literal["leaf", "spine", "core"] | None = None  # None: a switch cabled to HCAs is a leaf, and so on up


class LinkSpec(Manifest):
    """One cable of an explicit fabric: `switch/port` or `host/device/port` at each end."""

    a: str
    b: str
    width: Width | None = None  # lanes; the fabric's linkWidth when not given
    speed: Annotated[Generation | None, BeforeValidator(_upper)] = None


def parse_end(text: str) -> tuple[str, int] | None:
    """(owner, port) from "leaf1/35" or "node01/mlx5_0/1", as the fabric model names port owners; None when the
    text is neither."""
    parts = text.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts) or not parts[-1].isdigit():
        return None
    return "/".join(parts[:-1]), int(parts[-1])


def oversubscription_ratio(text: str) -> float:
    match = _RATIO.match(text)
    if match is None:
        raise ValueError(f"oversubscription {text!r} is not a ratio like '1:1', '2:1' or '3:1'")
    down, up = float(match.group("down")), float(match.group("up"))
    if up <= 0 or down < up:
        raise ValueError(
            f"oversubscription {text!r}: a leaf's downlinks:uplinks must be at least 1:1 (more uplinks than "
            "downlinks buys nothing)"
        )
    return down / up


class FabricSpec(Manifest):
    topology: Literal["rail-optimized-fat-tree", "fat-tree", "explicit", "none"] = "rail-optimized-fat-tree"
    transport: Transport = Transport.ib
    leaf_radix: int | None = Field(default=None, ge=4, le=255)  # None: 64 (NDR), 128 for XDR
    link_speed_gbps: float = Field(default=400.0, gt=0)
    link_width: Width = 4
    link_speed: Annotated[Generation | None, BeforeValidator(_upper)] = None  # None: from linkSpeedGbps / width
    oversubscription: str = "1:1"  # a leaf's downlinks : uplinks
    tiers: Literal["auto", 2, 3] = "auto"  # auto: 2 while every leaf can reach every spine, else 3
    nodes_per_scalable_unit: int | None = Field(default=None, ge=1)
    sharp: bool = False
    switches: list[SwitchSpec] = []  # topology: explicit
    links: list[LinkSpec] = []

    @field_validator("oversubscription")
    @classmethod
    def _ratio(cls, value: str) -> str:
        oversubscription_ratio(value)
        return value.strip()

    @model_validator(mode="after")
    def _consistent(self) -> FabricSpec:
        self._speed_and_rate()
        if self.topology == "explicit":
            self._check_explicit()
        elif self.switches or self.links:
            raise ValueError("`switches` and `links` describe a fabric cabled by hand: set topology: explicit")
        elif self.topology != "none" and self.nodes_per_scalable_unit is not None:
            down, up = self.nodes_per_scalable_unit, self.uplinks_per_leaf
            if down + up > self.radix:
                raise ValueError(
                    f"nodesPerScalableUnit {down} at oversubscription {self.oversubscription} needs {down} "
                    f"downlinks and {up} uplinks per leaf, more than its {self.radix} ports; lower "
                    "nodesPerScalableUnit, raise leafRadix, or oversubscribe the leaves (e.g. oversubscription: 2:1)"
                )
        return self

    def _speed_and_rate(self) -> None:
        """Fill in whichever of linkSpeed and linkSpeedGbps was left out from the other; both given must agree."""
        if self.link_speed is not None:
            rate = LANE_GBPS[self.link_speed] * self.link_width
            if "link_speed_gbps" not in self.model_fields_set:
                self.link_speed_gbps = rate
            elif abs(rate - self.link_speed_gbps) > 1e-6:
                raise ValueError(
                    f"linkSpeed {self.link_speed} over linkWidth {self.link_width} is {rate:g} Gb/s, but "
                    f"linkSpeedGbps is {self.link_speed_gbps:g}; give one of them, or make them agree"
                )
            return
        per_lane = self.link_speed_gbps / self.link_width
        found = [gen for gen, rate in LANE_GBPS.items() if gen != "FDR10" and abs(rate - per_lane) < 1e-6]
        if found:
            self.link_speed = cast(Generation, found[0])
        elif self.transport is Transport.ib:
            lanes = ", ".join(f"{gen} {rate:g}" for gen, rate in LANE_GBPS.items() if gen != "FDR10")
            raise ValueError(
                f"linkSpeedGbps {self.link_speed_gbps:g} over linkWidth {self.link_width} is {per_lane:g} Gb/s a "
                f"lane, which no InfiniBand generation runs at ({lanes}); set linkSpeed (e.g. NDR) or a rate "
                "that is one"
            )

    def _check_explicit(self) -> None:
        if not self.switches or not self.links:
            raise ValueError("topology: explicit needs `switches` and `links` (the cables, end to end)")
        problems: list[str] = []
        radix: dict[str, int] = {}
        for i, switch in enumerate(self.switches):
            if switch.name in radix:
                problems.append(f"switches[{i}]: {switch.name!r} is listed twice")
            radix[switch.name] = switch.ports
        cabled: dict[str, str] = {}  # end -> where it was cabled first
        for i, link in enumerate(self.links):
            ends = []
            for side in ("a", "b"):
                text = getattr(link, side)
                where = f"links[{i}].{side}"
                end = parse_end(text)
                if end is None:
                    problems.append(f"{where} {text!r} is not switch/port or host/device/port (e.g. leaf1/35)")
                    continue
                owner, port = end
                if "/" not in owner:
                    if owner not in radix:
                        known = ", ".join(list(radix)[:8])
                        problems.append(f"{where} {text!r}: no switch {owner!r} in `switches` (known: {known})")
                    elif not 1 <= port <= radix[owner]:
                        problems.append(f"{where} {text!r}: {owner} has ports 1-{radix[owner]}")
                key = f"{owner}/{port}"
                if key in cabled:
                    problems.append(f"{where} {text!r}: port {key} is cabled twice (also at {cabled[key]})")
                cabled.setdefault(key, where)
                ends.append(owner)
            if len(ends) == 2 and ends[0] == ends[1]:
                problems.append(f"links[{i}] cables {ends[0]} to itself")
        if problems:
            raise ValueError(_listed(problems))

    @property
    def radix(self) -> int:
        if self.leaf_radix is not None:
            return self.leaf_radix
        return XDR_RADIX if self.link_speed == "XDR" else DEFAULT_RADIX

    @property
    def ratio(self) -> float:
        return oversubscription_ratio(self.oversubscription)

    @property
    def nodes_per_su(self) -> int:
        """Downlinks of a leaf: nodes of a scalable unit (one per leaf of each rail), or HCAs per leaf of a plain
        fat tree. By default as many as leave room for the uplinks the oversubscription asks for."""
        if self.nodes_per_scalable_unit is not None:
            return self.nodes_per_scalable_unit
        down = self.radix - 1
        while down > 1 and down + math.ceil(down / self.ratio) > self.radix:
            down -= 1
        return down

    @property
    def uplinks_per_leaf(self) -> int:
        return math.ceil(self.nodes_per_su / self.ratio)

    def lane_rate(self) -> float | None:
        return LANE_GBPS.get(self.link_speed or "")


def _listed(problems: list[str], limit: int = 5) -> str:
    more = f"; and {len(problems) - limit} more" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


class ClusterBody(Manifest):
    node_pools: list[NodePoolSpec] = Field(min_length=1)
    fabric: FabricSpec = FabricSpec()
    software: SoftwareSpec = SoftwareSpec()
    ambient_c: float = Field(default=25.0, ge=-10, le=60)
    cost_per_gpu_hour: dict[str, float] = {}

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterBody:
        names = [p.name for p in self.node_pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique; repeated: {', '.join(dupes)}")
        hosts: dict[str, str] = {}
        for pool in self.node_pools:
            for name in pool.node_names():
                if name in hosts:
                    raise ValueError(f"node {name!r} is in both pool {hosts[name]!r} and pool {pool.name!r}")
                hosts[name] = pool.name
        if self.fabric.topology == "explicit":
            self._check_hca_ends({p.name: p for p in self.node_pools}, hosts)
        return self

    def nvlink_domains(self) -> dict[str, str]:
        """host -> NVLink domain, over the pools that span nodes with one."""
        return {host: domain for pool in self.node_pools for host, domain in pool.nvlink_domains().items()}

    def _check_hca_ends(self, pools: dict[str, NodePoolSpec], hosts: dict[str, str]) -> None:
        """The HCA ends of an explicit fabric name a host of a pool, one of its HCAs and one of that HCA's ports."""
        problems: list[str] = []
        for i, link in enumerate(self.fabric.links):
            for side in ("a", "b"):
                text = getattr(link, side)
                end = parse_end(text)
                if end is None or "/" not in end[0]:
                    continue  # not an HCA end; FabricSpec checked it
                (host, device), port = end[0].split("/", 1), end[1]
                where = f"fabric.links[{i}].{side} {text!r}"
                if host not in hosts:
                    problems.append(f"{where}: no host {host!r} in any node pool (name hosts with `hostnames`)")
                    continue
                nics = pools[hosts[host]].nics
                rail = _HCA_DEVICE.match(device)
                if rail is None or int(rail.group("rail")) >= nics.count:
                    have = {0: "no HCAs (nics.count is 0)", 1: "only mlx5_0"}.get(
                        nics.count, f"mlx5_0 to mlx5_{nics.count - 1}"
                    )
                    problems.append(f"{where}: {host} has {have}")
                elif not 1 <= port <= nics.ports:
                    problems.append(f"{where}: {device} has {nics.ports} port(s) (set nics.ports for more)")
        if problems:
            raise ValueError(_listed(problems))


class ClusterManifest(Manifest):
    api_version: Literal["gpufleet.io/v1"] = Field(alias="apiVersion")
    kind: Literal["Cluster"]
    metadata: Metadata
    spec: ClusterBody


def default_api_version() -> str:
    return API_VERSION
