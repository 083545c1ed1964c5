"""The fabric the model works from, and the per-graph inputs NCCL's topology search would hand its tuner.

We do not re-run search.cc. For the regular platforms gpufleet targets (GPUs behind NVSwitch or on PCIe, NICs
on the GPUs' PCIe switches) the search result follows from a short procedure that keeps search.cc's rules:

1. Link bandwidths (topo.h): NVLink per link by compute capability times the link count, PCIe by generation,
   NIC speed = Gb/s / 8. A GPU-to-NIC path runs at the slower of its PCIe link and the NIC.
2. Start at the fastest candidate speed (search.cc speed arrays, intra on one node, inter across nodes) that
   fits ``maxBw`` (the best path bandwidth) and ``minChannels * speed <= totalBw``.
3. At each speed the number of channels is what the links can carry: every channel crosses every GPU's
   NVLink (or PCIe) once, and across nodes takes ``speed`` from one NIC in each direction. An NVLS channel
   costs its head GPU twice the speed (ncclTopoSearchTryNvls).
4. Keep the best ``nChannels * speed``; stop once it reaches ``totalBw`` or the next speed is below 0.49 of
   the best.
5. ``ncclTopoDupChannels`` (not for NVLS), then pass 2 raises the speed while the same channel count fits.

More NIC ports than GPUs: NCCL (NCCL_IB_MERGE_NICS, 2.19+) fuses the ports of one adapter and aws-ofi-nccl
stripes the EFA rails of one GPU's PCIe switch into one net device, so ports are grouped per GPU before the
search (p5: 32 x 100 Gb/s -> 8 devices of 400 Gb/s; dual-port 2 x 200 Gb/s -> one 400 Gb/s device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog.gpus import GpuModelSpec, get_gpu_model
from gpufleet.errors import UserError
from gpufleet.nccl._files import load_yaml
from gpufleet.nccl.constants import DEFAULT_VERSION

Transport = Literal["ib", "roce", "efa", "socket"]
CpuVendor = Literal["intel", "amd", "arm", "power", "other"]


class Topology(BaseModel):
    """A cluster's collective-relevant shape: what NCCL's topology detection would find."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="GPU model name from the catalog (h100-sxm, a100, b200, ...)")
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1, le=72)
    nics_per_node: int = Field(0, ge=0)
    nic_gbps: float = Field(0.0, ge=0)
    transport: Transport = "ib"
    nvls: bool | None = Field(None, description="NVLink SHARP; None = what NCCL would decide")
    sharp: bool = Field(False, description="IB SHARP through the CollNet plugin (NCCL_COLLNET_ENABLE=1)")
    nvswitch: bool | None = Field(None, description="None = from the GPU catalog")
    cpu_vendor: CpuVendor = "intel"
    nccl_version: str = DEFAULT_VERSION
    algo_env: str | None = Field(None, description="NCCL_ALGO value, parseList syntax")
    proto_env: str | None = Field(None, description="NCCL_PROTO value, parseList syntax")
    graph_override: tuple[tuple[str, int, float, float, str, str, bool, bool], ...] = Field(
        (), description="search results read from an NCCL GRAPH log (see graph_log.py)"
    )
    tuning_override: tuple[tuple[str, str, str, float, float], ...] = Field(
        (), description="latency/bandwidth cells read from an NCCL TUNING log (see tuning_log.py)"
    )

    @model_validator(mode="after")
    def _check(self) -> Topology:
        spec = self.spec
        if spec.compute_major < 6:
            raise UserError(f"GPU model {self.gpu!r} has no usable compute capability for NCCL modelling")
        if self.nodes > 1 and (self.nics_per_node == 0 or self.nic_gbps <= 0):
            raise UserError(
                "a multi-node topology needs NICs",
                fix="give --nics-per-node and --nic-gbps (e.g. 8 and 400)",
            )
        return self

    @property
    def spec(self) -> GpuModelSpec:
        return get_gpu_model(self.gpu)

    @property
    def nranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def sm(self) -> int:
        major, _, minor = self.spec.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)

    @property
    def has_nvswitch(self) -> bool:
        if self.nvswitch is not None:
            return self.nvswitch
        return self.spec.nvswitch and self.spec.nvlink_links > 0

    @property
    def nvls_enabled(self) -> bool:
        """NCCL_NVLS_ENABLE=2 (auto): NVLS needs sm90+ GPUs behind an NVSwitch."""
        capable = self.sm >= 90 and self.has_nvswitch and self.gpus_per_node > 1
        return capable if self.nvls is None else (self.nvls and capable)


@dataclass(frozen=True)
class Graph:
    """What ``ncclTopoCompute`` returns for one algorithm's pattern."""

    n_channels: int
    bw_intra: float
    bw_inter: float
    type_intra: str  # NVL, PIX, PXB, PHB, SYS (path types, ordered as in topo.h)
    type_inter: str
    latency_inter: float
    same_channels: bool
    pattern_tree: bool  # plain TREE pattern (x0.85 on Tree bandwidth)


PATH_ORDER = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")


def path_le(a: str, b: str) -> bool:
    return PATH_ORDER.index(a) <= PATH_ORDER.index(b)


@dataclass(frozen=True)
class _Links:
    intra_bw: float  # per GPU, per direction, to the other GPUs of the node
    intra_type: str
    pci_bw: float
    nic_bw: float  # one NCCL net device, GB/s
    n_net_devs: int
    gpu_nic_bw: float  # one GPU's path to one net device


def _platform() -> dict:
    return dict(load_yaml("topology.yaml"))


def _links(topo: Topology) -> _Links:
    plat = _platform()
    spec = topo.spec
    per_link = plat["nvlink_bw_per_link"]
    sm_keys = sorted(int(k) for k in per_link)
    key = max([k for k in sm_keys if k <= topo.sm], default=sm_keys[0])
    nvl_total = spec.nvlink_links * float(per_link[key])
    pci_bw = plat["pci_gen_factor"][spec.pcie_gen] * spec.pcie_width / 80.0
    mesh = spec.name in plat["nvlink_mesh_models"] and topo.gpus_per_node <= 8
    if nvl_total > 0 and (topo.has_nvswitch or mesh or topo.gpus_per_node <= 2):
        intra_bw, intra_type = nvl_total, "NVL"
    else:
        # No all-to-all NVLink: rings cross PCIe and, past one switch, the CPU.
        intra_bw, intra_type = pci_bw, "PHB"
    n_devs = topo.nics_per_node
    nic_bw = topo.nic_gbps / 8.0
    if n_devs > topo.gpus_per_node and n_devs % topo.gpus_per_node == 0 and topo.transport != "socket":
        group = n_devs // topo.gpus_per_node
        n_devs, nic_bw = topo.gpus_per_node, nic_bw * group
    gpu_nic_bw = min(pci_bw, nic_bw) if topo.transport != "socket" else nic_bw
    return _Links(intra_bw, intra_type, pci_bw, nic_bw, n_devs, gpu_nic_bw)


def _speeds(kind: str, sm: int) -> list[float]:
    arrays = _platform()[kind]
    return list(arrays["sm100"] if sm >= 100 else arrays["sm90"] if sm >= 90 else arrays["default"])


def _channels_at(speed: float, links: _Links, topo: Topology, max_ch: int, nvls_heads: bool) -> int:
    """How many channels at ``speed`` the links carry (search.cc would find this many)."""
    ppn = topo.gpus_per_node
    if ppn > 1 and nvls_heads:
        # search.cc ncclTopoSearchTryNvls: the head GPU of a channel moves 2x speed to/from the NVSwitch, the
        # others 1x; heads rotate over the GPUs.
        by_intra = 0
        while by_intra < max_ch and speed * (by_intra + 1 + math.ceil((by_intra + 1) / ppn)) <= links.intra_bw + 1e-9:
            by_intra += 1
    elif ppn > 1:
        # Every channel passes through each GPU; on one node every GPU forwards on each channel.
        share = (ppn - 1) / ppn if topo.nodes > 1 else 1.0
        by_intra = math.floor(links.intra_bw / (speed * share) + 1e-9)
    else:
        by_intra = max_ch
    if topo.nodes == 1:
        return min(max_ch, by_intra)
    if speed > links.gpu_nic_bw + 1e-9:
        return 0
    by_nic = links.n_net_devs * math.floor(links.nic_bw / speed + 1e-9)
    if topo.transport != "socket":
        # A GPU's PCIe link carries the channels that enter or leave the node at that GPU.
        nic_gpus = max(1, min(ppn, links.n_net_devs))
        by_pci = nic_gpus * math.floor(links.pci_bw / speed + 1e-9)
        by_nic = min(by_nic, by_pci)
    if nvls_heads:
        by_nic = min(by_nic, ppn)
    return max(0, min(max_ch, by_intra, by_nic))


def _search(topo: Topology, links: _Links, *, max_ch: int, min_ch: int, ring: bool, nvls: bool) -> tuple[int, float]:
    inter = topo.nodes > 1
    speeds = _speeds("speed_inter" if inter else "speed_intra", topo.sm)
    plat = _platform()
    max_bw = links.gpu_nic_bw if inter else links.intra_bw
    total_bw = max(links.intra_bw, links.pci_bw)
    search_total = total_bw if ring else total_bw * topo.gpus_per_node / max(1, topo.gpus_per_node - 1)
    idx = 0
    while idx < len(speeds) - 1 and (speeds[idx] > max_bw or speeds[idx] * min_ch > search_total):
        idx += 1
    best_n, best_bw = 0, 0.0
    while True:
        n = _channels_at(speeds[idx], links, topo, max_ch, nvls)
        if n >= min_ch and n * speeds[idx] > best_n * best_bw:
            best_n, best_bw = n, speeds[idx]
        if best_n and best_n * best_bw >= total_bw:
            break
        nxt = idx + 1
        if nxt >= len(speeds) or (best_n and speeds[nxt] / best_bw <= plat["speed_drop_limit"]):
            break
        idx = nxt
    if best_n == 0:
        return 1, 0.1 if not inter else min(speeds[-1], max_bw)
    if not nvls:
        dup = plat["dup_channels"]
        hopper_block = topo.sm > 80 and best_bw < dup["hopper_min_bw_intra"] and best_n > dup["hopper_max_channels"]
        if best_bw >= dup["min_bw_intra"] and not hopper_block:
            doubled = min(best_n * 2, max_ch)
            best_bw /= math.ceil(doubled / best_n)
            best_n = doubled
    # Pass 2: a faster speed with the same channel count.
    for speed in sorted((s for s in speeds if s > best_bw), reverse=False):
        if _channels_at(speed, links, topo, max_ch, nvls) >= best_n:
            best_bw = speed
        else:
            break
    return best_n, best_bw


@cache
def derive_graphs(topo: Topology, max_channels: int) -> dict[str, Graph]:
    """Per-algorithm search results (nChannels, bwIntra/Inter, path types, latencyInter)."""
    links = _links(topo)
    plat = _platform()
    lat_inter = float(plat["latency_inter_us"][topo.transport])
    type_intra = links.intra_type
    if topo.nodes > 1:
        type_inter = "PXB" if topo.transport != "socket" else "SYS"
        if links.n_net_devs < topo.gpus_per_node and topo.transport != "socket":
            type_inter = "PXN"  # GPUs without a local NIC reach one through a peer (PXN)
    else:
        type_inter = "LOC"
    ring_n, ring_bw = _search(topo, links, max_ch=max_channels, min_ch=1, ring=True, nvls=False)
    graphs: dict[str, Graph] = {}
    ring = Graph(ring_n, ring_bw, ring_bw, type_intra, type_inter, lat_inter, True, False)
    graphs["Ring"] = ring
    tree_n, tree_bw = _search(topo, links, max_ch=ring_n, min_ch=1, ring=False, nvls=False)
    bw_intra_tree = tree_bw
    if topo.nodes == 2 and topo.gpus_per_node > 1:
        # Pass 2 for trees on two nodes raises bwIntra (up to twice bwInter) when NVLink allows it.
        speeds = _speeds("speed_inter", topo.sm)
        for s in sorted(speeds):
            if (
                tree_bw < s <= 2 * tree_bw
                and tree_n * s * (topo.gpus_per_node - 1) / topo.gpus_per_node <= links.intra_bw
            ):
                bw_intra_tree = s
    tree = Graph(
        tree_n,
        bw_intra_tree,
        tree_bw,
        type_intra,
        type_inter,
        lat_inter,
        True,
        # One GPU per node makes every tree a plain TREE (search.cc); Hopper multi-node falls back to it too.
        topo.gpus_per_node == 1 or (topo.sm >= 90 and topo.nodes > 1),
    )
    graphs["Tree"] = tree
    graphs["PAT"] = tree
    collnet_n = min(plat["collnet_max_direct_arity"] + 1, topo.gpus_per_node)
    cn_n, cn_bw = _search(topo, links, max_ch=collnet_n, min_ch=1, ring=False, nvls=False)
    graphs["CollNetDirect"] = Graph(cn_n, cn_bw, cn_bw, type_intra, type_inter, lat_inter, True, False)
    graphs["CollNetChain"] = Graph(tree_n, tree_bw, tree_bw, type_intra, type_inter, lat_inter, True, False)
    if topo.nvls_enabled:
        heads = min(plat["nvls_max_arity"], topo.gpus_per_node)
        min_ch = heads if topo.nodes == 1 else 1
        nv_n, nv_bw = _search(topo, links, max_ch=heads, min_ch=min_ch, ring=False, nvls=True)
        bw_inter = nv_bw
        if topo.nodes == 1:
            # Pass 2 for NVLS raises bwInter (below 2x bwIntra) when nothing limits it on one node.
            bigger = [s for s in _speeds("speed_intra", topo.sm) if nv_bw < s < 2 * nv_bw]
            bw_inter = max(bigger, default=nv_bw)
        graphs["NVLS"] = Graph(nv_n, nv_bw, bw_inter, "NVL", type_inter, lat_inter, False, False)
        graphs["NVLSTree"] = graphs["NVLS"]
    else:
        graphs["NVLS"] = graphs["NVLSTree"] = Graph(0, 0.0, 0.0, "NVL", type_inter, lat_inter, False, False)
    for algo, n_ch, bw_intra, bw_inter, t_intra, t_inter, same, plain_tree in topo.graph_override:
        measured = Graph(n_ch, bw_intra, bw_inter, t_intra, t_inter, lat_inter, same, plain_tree)
        graphs[algo] = measured
        if algo == "Tree":
            graphs["PAT"] = measured
        if algo == "NVLS":
            graphs["NVLSTree"] = measured
    return graphs
