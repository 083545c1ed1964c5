"""Build a model Cluster from a cluster spec: nodes, GPUs with stable identities, NICs and the fabric's cabling."""

from __future__ import annotations

import hashlib
import math
import uuid

from gpufleet.catalog.gpus import get_gpu_model
from gpufleet.errors import UserError
from gpufleet.model import (
    Cluster,
    Fabric,
    Gpu,
    Link,
    Nic,
    Node,
    NodePool,
    Port,
    SoftwareFacts,
    Switch,
    Taint,
)
from gpufleet.spec.cluster_spec import LANE_GBPS, ClusterBody, FabricSpec, NodePoolSpec, SoftwareSpec, parse_end

# PCI bus numbers of the eight GPUs in a DGX/HGX H100 baseboard, as nvidia-smi lists them.
HGX_8GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
_NS = uuid.UUID("6f1c0b7e-8a55-4d8e-9a77-1f0e5c2d4b11")


def gpu_uuid(cluster: str, node: str, index: int, vendor: str = "nvidia") -> str:
    """A stable UUID in the form the vendor's tools print: NVML's GPU-<uuid>, amd-smi's bare UUID, HLML's
    serial-like UUID."""
    base = uuid.uuid5(_NS, f"{cluster}/{node}/{index}")
    if vendor == "amd":
        return str(base)
    if vendor == "intel":
        return f"01P0-HL{base.hex[:6].upper()}-{base.hex[6:8].upper()}-{base.hex[8:14].upper()}-{index:02d}"
    return f"GPU-{base}"


def board_serial(cluster: str, node: str, index: int, vendor: str = "nvidia") -> str:
    digest = hashlib.sha256(f"{cluster}/{node}/{index}".encode()).hexdigest()
    if vendor == "amd":
        return "PCB" + str(int(digest[:12], 16))[:9].zfill(9)
    if vendor == "intel":
        return "AN" + digest[:10].upper()
    return "1654" + str(int(digest[:12], 16))[:9].zfill(9)


def _guid(*parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return "0x" + digest[:16]


def pci_bus_ids(count: int) -> list[str]:
    if count == 8:
        return [f"00000000:{b.upper()}:00.0" for b in HGX_8GPU_BUSES]
    step = max(1, 0xF0 // max(count, 1))
    return [f"00000000:{0x10 + i * step:02X}:00.0" for i in range(count)]


def _nvlink_peers(model_name: str, count: int, index: int) -> list[int]:
    """The devices a device reaches over its scale-up links (NVLink, XGMI, Gaudi's scale-up ports)."""
    spec = get_gpu_model(model_name)
    if spec.nvlink_links == 0 or count < 2:
        return []
    if spec.all_to_all:
        return [i for i in range(count) if i != index]
    partner = index ^ 1  # bridged pairs (H100 NVL, PCIe cards with NVLink bridges)
    return [partner] if partner < count else []


# What an AMD or Gaudi pool runs when its manifest names no software (the cluster default is NVIDIA's driver and
# CUDA): the amdgpu driver, ROCm and RCCL of ROCm 6.4.1; the habanalabs driver, SynapseAI and HCCL of release 1.21.0.
VENDOR_SOFTWARE = {
    "amd": SoftwareSpec.model_validate({"driverVersion": "6.12.12", "cudaVersion": "6.4.1", "ncclVersion": "2.22.3"}),
    "intel": SoftwareSpec.model_validate({"driverVersion": "1.21.0", "cudaVersion": "1.21.0", "ncclVersion": "1.21.0"}),
}


def _software(pool: NodePoolSpec, default: SoftwareSpec) -> SoftwareFacts:
    vendor = get_gpu_model(pool.gpu.model).vendor if pool.gpu is not None else "nvidia"
    sw = pool.software or VENDOR_SOFTWARE.get(vendor, default)
    nvidia = vendor == "nvidia"
    return SoftwareFacts(
        driver_version=sw.driver_version,
        cuda_version=sw.cuda_version,
        kernel=sw.kernel,
        # NVIDIA's fabric manager runs beside NVIDIA's driver only
        fabric_manager_version=(sw.fabric_manager_version or sw.driver_version) if nvidia else "",
        nccl_version=sw.nccl_version,
    )


def _build_node(cluster: str, pool: NodePoolSpec, index: int, body: ClusterBody, name: str) -> Node:
    labels = {"gpufleet.io/pool": pool.name, "kubernetes.io/hostname": name, **pool.labels}
    node = Node(
        name=name,
        pool=pool.name,
        cpu_milli=pool.cpu_milli,
        memory_mib=pool.memory_mi_b,
        labels=labels,
        taints=[Taint(t.key, t.effect, t.value) for t in pool.taints],
        rack=f"{pool.name}-rack{index // pool.nodes_per_rack:02d}",
        software=_software(pool, body.software),
    )
    if pool.gpu:
        model = get_gpu_model(pool.gpu.model)
        for i, bus in enumerate(pci_bus_ids(pool.gpu.count)):
            node.gpus.append(
                Gpu(
                    index=i,
                    uuid=gpu_uuid(cluster, name, i, model.vendor),
                    pci_bus_id=bus,
                    serial=board_serial(cluster, name, i, model.vendor),
                    model=model,
                    minor=i,
                    nvlink_peers=_nvlink_peers(model.name, pool.gpu.count, i),
                )
            )
    for r in range(pool.nics.count):
        nic = Nic(node=name, name=f"mlx5_{r}", guid=_guid(cluster, name, "nic", r), rail=r, netdev=f"ib{r}")
        for number in range(1, pool.nics.ports + 1):
            nic.ports.append(
                Port(
                    owner=f"{name}/mlx5_{r}",
                    number=number,
                    guid=nic.guid if number == 1 else _guid(cluster, name, "nic", r, number),
                    lid=0,
                    speed_gbps=pool.nics.speed_gbps,
                    rail=r,
                )
            )
        node.nics.append(nic)
    return node


class _Wiring:
    """A fabric as it is built: switches, their ports handed out in order, and cables at the design's width and
    speed."""

    def __init__(self, cluster: str, spec: FabricSpec) -> None:
        self.cluster = cluster
        self.spec = spec
        self.fabric = Fabric(spec.transport)
        self.used: dict[str, int] = {}  # switch -> ports handed out from 1 up (downlinks of spines and cores)

    def switch(self, name: str, tier: str, group: int, rail: int | None = None, radix: int | None = None) -> Switch:
        sw = Switch(name, _guid(self.cluster, name), tier, radix or self.spec.radix, group, rail)
        self.fabric.switches.append(sw)
        return sw

    def port(self, sw: Switch, number: int, rail: int | None = None) -> Port:
        port = Port(sw.name, number, sw.guid, 0, self.spec.link_speed_gbps, rail=rail)
        sw.ports.append(port)
        return port

    def next_port(self, sw: Switch) -> Port:
        self.used[sw.name] = self.used.get(sw.name, 0) + 1
        return self.port(sw, self.used[sw.name])

    def cable(self, a: Port, b: Port, width: int | None = None, speed: str | None = None) -> None:
        width = width or self.spec.link_width
        speed = speed or self.spec.link_speed
        rate = LANE_GBPS[speed] * width if speed in LANE_GBPS else self.spec.link_speed_gbps
        a.peer, b.peer = (b.owner, b.number), (a.owner, a.number)
        self.fabric.links.append(Link((a.owner, a.number), (b.owner, b.number), rate, width=width, speed=speed))

    def spread(self, lower: Switch, uppers: list[Switch], first_port: int, count: int) -> None:
        """`count` uplinks of `lower`, its ports first_port+1 on, dealt round `uppers`: as many to each."""
        for t in range(count):
            self.cable(self.port(lower, first_port + 1 + t), self.next_port(uppers[t % len(uppers)]))


def _even_count(cables: int, capacity: int, per_lower: int) -> int:
    """Upper switches for `cables` uplinks of `capacity` ports each, rounded up so every lower switch can give each
    the same number of its `per_lower` uplinks."""
    count = max(1, math.ceil(cables / capacity))
    while count < per_lower and per_lower % count:
        count += 1
    return count  # more than per_lower: some lower switch cannot reach every upper one (the caller refuses that)


def build_fabric(cluster: str, nodes: list[Node], spec: FabricSpec) -> Fabric:
    """The cabling of the cluster's fabric.

    - rail-optimized-fat-tree: NIC r of every node of a scalable unit goes to that unit's leaf r; in two tiers the
      leaves of rail r across the units share a plane of spines (rails share a plane while one rail cannot fill a
      spine), as the DGX SuperPOD is built.
    - fat-tree: HCAs fill the leaves in order.
    - Three tiers (beyond k²/2 endpoints for radix k): pods of k/2 leaves with their own spines, spine j of every
      pod cabled to core plane j.
    - explicit: the manifest's own switches and cables.

    A leaf's uplinks are spread evenly over the spines it reaches, and every spine of a plane gets as many: what
    fabric validation holds the found fabric to.
    """
    if spec.topology == "none":
        return Fabric(spec.transport)
    wiring = _Wiring(cluster, spec)
    if spec.topology == "explicit":
        _explicit(wiring, nodes)
        return wiring.fabric
    hosts = [n for n in nodes if n.nics]
    if not hosts:
        return wiring.fabric
    down, up, radix = spec.nodes_per_su, spec.uplinks_per_leaf, spec.radix
    rails = max(len(n.nics) for n in hosts)
    leaves: list[Switch] = []
    if spec.topology == "rail-optimized-fat-tree":
        units = math.ceil(len(hosts) / down)
        for su in range(units):
            members = hosts[su * down : (su + 1) * down]
            for rail in range(rails):
                leaf = wiring.switch(f"leaf-su{su + 1}-r{rail}", "leaf", su, rail)
                leaves.append(leaf)
                for slot, node in enumerate(members, start=1):
                    if rail < len(node.nics):
                        wiring.cable(wiring.port(leaf, slot, rail), node.nics[rail].ports[0])
    else:
        endpoints = [nic.ports[0] for n in hosts for nic in n.nics]
        for i in range(math.ceil(len(endpoints) / down)):
            leaf = wiring.switch(f"leaf-{i + 1}", "leaf", 0)
            leaves.append(leaf)
            for slot, nic_port in enumerate(endpoints[i * down : (i + 1) * down], start=1):
                wiring.cable(wiring.port(leaf, slot), nic_port)

    fits_two = math.ceil(len(leaves) * up / radix) <= up  # every leaf reaches every spine: k²/2 endpoints at 1:1
    tiers = (2 if fits_two else 3) if spec.tiers == "auto" else spec.tiers
    if tiers == 2 and not fits_two:
        raise UserError(
            f"{len(leaves)} leaves with {up} uplinks each do not fit under one tier of {radix}-port spines",
            fix="set fabric.tiers to auto or 3, or use switches with more ports (leafRadix)",
        )
    if tiers == 2:
        if spec.topology == "rail-optimized-fat-tree":
            per_plane = _rails_per_plane(rails, len(leaves) // rails, up, radix)
            planes = [
                [leaf for leaf in leaves if (leaf.rail or 0) // per_plane == p] for p in range(rails // per_plane)
            ]
        else:
            planes = [leaves]
        spines = 0
        for p, lowers in enumerate(planes):
            count = _even_count(len(lowers) * up, radix, up)
            uppers = [wiring.switch(f"spine-{spines + s + 1}", "spine", p) for s in range(count)]
            spines += count
            for leaf in lowers:
                wiring.spread(leaf, uppers, down, up)
        return wiring.fabric
    _three_tiers(wiring, leaves, down, up, radix)
    return wiring.fabric


def _rails_per_plane(rails: int, units: int, up: int, radix: int) -> int:
    """Rails whose leaves share a plane of spines: one, unless one rail's leaves cannot fill a spine."""
    for per_plane in range(1, rails + 1):
        if rails % per_plane == 0 and per_plane * units * up >= radix:
            return per_plane
    return rails


def _three_tiers(wiring: _Wiring, leaves: list[Switch], down: int, up: int, radix: int) -> None:
    pod_size = radix // 2  # leaves of a pod, and downlinks of its spines: a spine has as many up as down
    planes: dict[int, list[Switch]] = {}
    spines = 0
    for pod, start in enumerate(range(0, len(leaves), pod_size)):
        lowers = leaves[start : start + pod_size]
        if wiring.spec.topology == "fat-tree":
            for leaf in lowers:
                leaf.group = pod
        count = _even_count(len(lowers) * up, pod_size, up)
        uppers = [wiring.switch(f"spine-{spines + s + 1}", "spine", pod) for s in range(count)]
        spines += count
        for leaf in lowers:
            wiring.spread(leaf, uppers, down, up)
        for j, spine in enumerate(uppers):
            planes.setdefault(j, []).append(spine)
    cores = 0
    for j, members in sorted(planes.items()):
        each = [wiring.used[s.name] for s in members]  # uplinks of a spine: as many as it has downlinks
        count = _even_count(sum(each), radix, max(each))
        if count > max(each):
            raise UserError(
                f"{len(leaves)} leaves of radix {radix} need more than three tiers",
                fix="use switches with more ports (leafRadix), or split the cluster into several fabrics",
            )
        uppers = [wiring.switch(f"core-{cores + c + 1}", "core", j) for c in range(count)]
        cores += count
        for spine, uplinks in zip(members, each, strict=True):
            wiring.spread(spine, uppers, pod_size, uplinks)


def _explicit(wiring: _Wiring, nodes: list[Node]) -> None:
    """The manifest's own switches and cables (checked when the manifest was read)."""
    spec = wiring.spec
    hca_ports = {(p.owner, p.number): p for n in nodes for nic in n.nics for p in nic.ports}
    tiers = _explicit_tiers(spec)
    switches = {s.name: wiring.switch(s.name, tiers[s.name], 0, radix=s.ports) for s in spec.switches}
    for link in spec.links:
        ends: list[Port] = []
        for text in (link.a, link.b):
            end = parse_end(text)
            port = None
            if end is not None and end[0] in switches:
                port = wiring.port(switches[end[0]], end[1])
            elif end is not None:
                port = hca_ports.get(end)
            if port is None:
                raise UserError(f"fabric link end {text!r} is not a port of this cluster", fix="check fabric.links")
            ends.append(port)
        wiring.cable(ends[0], ends[1], link.width, link.speed)


def _explicit_tiers(spec: FabricSpec) -> dict[str, str]:
    """Tiers of an explicit fabric's switches: as given, else a switch cabled to an HCA is a leaf, and each hop
    above the leaves a tier higher (spine, then core)."""
    given = {s.name: s.tier for s in spec.switches}
    neighbours: dict[str, set[str]] = {name: set() for name in given}
    depth: dict[str, int] = {}
    for link in spec.links:
        a, b = parse_end(link.a), parse_end(link.b)
        if a is None or b is None:
            continue
        if a[0] in given and b[0] in given:
            neighbours[a[0]].add(b[0])
            neighbours[b[0]].add(a[0])
        for one, other in ((a[0], b[0]), (b[0], a[0])):
            if one in given and "/" in other:
                depth[one] = 0
    frontier = sorted(depth)
    while frontier:
        after: list[str] = []
        for name in frontier:
            for other in sorted(neighbours[name] - depth.keys()):
                depth[other] = depth[name] + 1
                after.append(other)
        frontier = after
    names = ("leaf", "spine", "core")
    return {name: tier or names[min(depth.get(name, 1), 2)] for name, tier in given.items()}


def build_cluster(name: str, body: ClusterBody) -> Cluster:
    nodes: list[Node] = []
    pools: list[NodePool] = []
    for pool in body.node_pools:
        pool_nodes = [_build_node(name, pool, i, body, host) for i, host in enumerate(pool.node_names())]
        nodes.extend(pool_nodes)
        pools.append(
            NodePool(
                name=pool.name,
                node_names=[n.name for n in pool_nodes],
                gpu_model=pool.gpu.model if pool.gpu else None,
                gpus_per_node=pool.gpu.count if pool.gpu else 0,
                nics_per_node=pool.nics.count,
                nic_speed_gbps=pool.nics.speed_gbps,
            )
        )
    fabric = build_fabric(name, nodes, body.fabric)
    return Cluster(name=name, pools=pools, nodes=nodes, fabric=fabric)
