"""Build a model Cluster from a cluster spec: nodes, GPUs with stable identities, NICs and a rail-optimized fabric."""

from __future__ import annotations

import hashlib
import math
import uuid

from gpufleet.catalog.gpus import get_gpu_model
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
from gpufleet.spec.cluster_spec import ClusterBody, FabricSpec, NodePoolSpec, SoftwareSpec

# PCI bus numbers of the eight GPUs in a DGX/HGX H100 baseboard, as nvidia-smi lists them.
HGX_8GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
_NS = uuid.UUID("6f1c0b7e-8a55-4d8e-9a77-1f0e5c2d4b11")


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(_NS, f"{cluster}/{node}/{index}"))


def board_serial(cluster: str, node: str, index: int) -> str:
    digest = hashlib.sha256(f"{cluster}/{node}/{index}".encode()).hexdigest()
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
    spec = get_gpu_model(model_name)
    if spec.nvlink_links == 0 or count < 2:
        return []
    if spec.nvswitch:
        return [i for i in range(count) if i != index]
    partner = index ^ 1  # bridged pairs (H100 NVL, PCIe cards with NVLink bridges)
    return [partner] if partner < count else []


def _software(pool: NodePoolSpec, default: SoftwareSpec) -> SoftwareFacts:
    sw = pool.software or default
    return SoftwareFacts(
        driver_version=sw.driver_version,
        cuda_version=sw.cuda_version,
        kernel=sw.kernel,
        fabric_manager_version=sw.fabric_manager_version or sw.driver_version,
        nccl_version=sw.nccl_version,
    )


def _build_node(cluster: str, pool: NodePoolSpec, index: int, body: ClusterBody) -> Node:
    name = f"{pool.name}-{index:03d}"
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
                    uuid=gpu_uuid(cluster, name, i),
                    pci_bus_id=bus,
                    serial=board_serial(cluster, name, i),
                    model=model,
                    minor=i,
                    nvlink_peers=_nvlink_peers(model.name, pool.gpu.count, i),
                )
            )
    for r in range(pool.nics.count):
        nic = Nic(node=name, name=f"mlx5_{r}", guid=_guid(cluster, name, "nic", r), rail=r, netdev=f"ib{r}")
        nic.ports.append(
            Port(
                owner=f"{name}/mlx5_{r}",
                number=1,
                guid=nic.guid,
                lid=0,
                speed_gbps=pool.nics.speed_gbps,
                rail=r,
            )
        )
        node.nics.append(nic)
    return node


def build_fabric(cluster: str, nodes: list[Node], spec: FabricSpec) -> Fabric:
    """A two-tier fat tree. Rail-optimized: NIC r of every node in a scalable unit goes to that unit's leaf r."""
    fabric = Fabric(spec.transport)
    hosts = [n for n in nodes if n.nics]
    if spec.topology == "none" or not hosts:
        return fabric
    rails = max(len(n.nics) for n in hosts)
    down = spec.leaf_radix // 2
    per_su = min(spec.nodes_per_su, down) if spec.topology == "rail-optimized-fat-tree" else down
    leaves: list[Switch] = []
    lid = 1

    def new_switch(name: str, tier: str, group: int, rail: int | None) -> Switch:
        nonlocal lid
        sw = Switch(name=name, guid=_guid(cluster, name), tier=tier, radix=spec.leaf_radix, group=group, rail=rail)
        lid += 1
        fabric.switches.append(sw)
        return sw

    def connect(a: tuple[str, int], b: tuple[str, int], b_port: Port | None) -> None:
        fabric.links.append(Link(a=a, b=b, speed_gbps=spec.link_speed_gbps))
        if b_port is not None:
            b_port.peer = a

    if spec.topology == "rail-optimized-fat-tree":
        units = math.ceil(len(hosts) / per_su)
        for su in range(units):
            members = hosts[su * per_su : (su + 1) * per_su]
            for rail in range(rails):
                leaf = new_switch(f"leaf-su{su + 1}-r{rail}", "leaf", su, rail)
                leaves.append(leaf)
                for slot, node in enumerate(members, start=1):
                    if rail >= len(node.nics):
                        continue
                    nic_port = node.nics[rail].ports[0]
                    leaf.ports.append(Port(leaf.name, slot, leaf.guid, 0, spec.link_speed_gbps, rail=rail))
                    connect((leaf.name, slot), (nic_port.owner, 1), nic_port)
    else:
        endpoints = [(n, nic) for n in hosts for nic in n.nics]
        for i in range(math.ceil(len(endpoints) / down)):
            leaf = new_switch(f"leaf-{i + 1}", "leaf", i, None)
            leaves.append(leaf)
            for slot, (_node, nic) in enumerate(endpoints[i * down : (i + 1) * down], start=1):
                nic_port = nic.ports[0]
                leaf.ports.append(Port(leaf.name, slot, leaf.guid, 0, spec.link_speed_gbps))
                connect((leaf.name, slot), (nic_port.owner, 1), nic_port)

    uplinks = len(leaves) * (spec.leaf_radix - down)
    n_spines = max(1, math.ceil(uplinks / spec.leaf_radix))
    spines = [new_switch(f"spine-{s + 1}", "spine", 0, None) for s in range(n_spines)]
    spine_next = [1] * n_spines
    for li, leaf in enumerate(leaves):
        for u in range(spec.leaf_radix - down):
            s = (li + u) % n_spines
            spine = spines[s]
            port_no = down + 1 + u
            leaf.ports.append(Port(leaf.name, port_no, leaf.guid, 0, spec.link_speed_gbps))
            spine.ports.append(Port(spine.name, spine_next[s], spine.guid, 0, spec.link_speed_gbps))
            connect((leaf.name, port_no), (spine.name, spine_next[s]), None)
            spine_next[s] += 1
    return fabric


def build_cluster(name: str, body: ClusterBody) -> Cluster:
    nodes: list[Node] = []
    pools: list[NodePool] = []
    for pool in body.node_pools:
        pool_nodes = [_build_node(name, pool, i, body) for i in range(pool.count)]
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
