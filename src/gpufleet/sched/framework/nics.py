"""GPUs and RDMA NICs chosen together on a node whose GPU<->NIC<->CPU affinity is known.

A pod that asks for GPUs and RDMA NICs wants each GPU's traffic to leave through a NIC behind the same PCIe switch
(GPUDirect RDMA peer to peer), else at least one on the same NUMA node; a NIC on the other socket sends every
transfer across the SMP interconnect. How clusters name NIC resources:

- shared: the RDMA shared device plugin's `rdma/<name>` (`rdma/rdma_shared_device_a`, `rdma/hca_shared_devices_a`)
  and `nvidia.com/rdma_shared_*`: every pod on the node uses the same NICs, none is taken;
- exclusive: the host-device plugin's `nvidia.com/hostdev`, SR-IOV virtual functions (`*/sriov*`), AWS EFA
  (`vpc.amazonaws.com/efa`): each unit is one NIC (a VF sits on its PF's PCIe path) the pod holds alone.

Which NIC the device plugin hands out is its choice (the kubelet's Topology Manager aligns it); this model assumes
it hands out the one nearest the pod's GPUs and tracks which NICs are taken so the next pod is judged on what is
left.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.model.affinity import SAME_NUMA, SAME_SWITCH, HostAffinity

SHARED_NIC_RESOURCE = re.compile(r"^(rdma/.+|nvidia\.com/rdma_shared.*)$")
EXCLUSIVE_NIC_RESOURCE = re.compile(r"^(nvidia\.com/hostdev.*|[^/]+/.*sriov.*|vpc\.amazonaws\.com/efa)$")
# how well a GPU and a NIC sit together, best first
SWITCH, NUMA, CROSS = 0, 1, 2
FIT_SCORE = {SWITCH: 100.0, NUMA: 50.0, CROSS: 0.0}


def nic_request(requests: Mapping[str, int]) -> tuple[bool, int]:
    """Whether the pod asks for RDMA NICs at all, and how many NICs it takes for itself (exclusive units)."""
    asks, exclusive = False, 0
    for name, amount in requests.items():
        if amount <= 0:
            continue
        if EXCLUSIVE_NIC_RESOURCE.match(name):
            asks, exclusive = True, exclusive + amount
        elif SHARED_NIC_RESOURCE.match(name):
            asks = True
    return asks, exclusive


def nic_names(affinity: HostAffinity) -> set[str]:
    return {n.name for n in affinity.nics} | {name for g in affinity.gpus for name in g.nic_links}


def link_rank(affinity: HostAffinity, gpu: int, nic: str) -> int:
    """SWITCH when the two share a PCIe switch, NUMA when they share a NUMA node, else CROSS (or unknown)."""
    g = affinity.gpu(gpu)
    if g is None:
        return CROSS
    link = g.nic_links.get(nic)
    if link in SAME_SWITCH:
        return SWITCH
    if link in SAME_NUMA:
        return NUMA
    if link is None and g.numa_node is not None:
        n = affinity.nic(nic)
        if n is not None and n.numa_node == g.numa_node:
            return NUMA
    return CROSS


@dataclass(frozen=True, slots=True)
class NicChoice:
    """GPUs and the NICs they use: per GPU its NIC and how they sit (SWITCH, NUMA, CROSS; -1: no NIC for it)."""

    gpus: tuple[int, ...]
    nics: tuple[str, ...]  # taken (exclusive NICs), else the shared NICs the GPUs use
    pairs: tuple[tuple[int, str | None, int], ...]  # (gpu, nic, rank)
    exclusive: bool

    @property
    def level(self) -> int:
        """The worst pairing of the set: SWITCH when every GPU has a NIC behind its switch."""
        return max((rank if nic is not None else CROSS for _, nic, rank in self.pairs), default=CROSS)

    @property
    def aligned(self) -> bool:
        return self.level == SWITCH

    def note(self) -> str:
        """'aligned: GPUs 0,1 share PCIe switches with NIC7,NIC8', or why not ('GPUs 0,1 share no PCIe switch
        with a free NIC; crossing NUMA for GPUs 0,1')."""
        nics = ",".join(self.nics) or "-"
        if self.aligned:
            verb = "share PCIe switches" if len(self.gpus) > 1 else "shares a PCIe switch"
            return f"aligned: {_gpus(self.gpus)} {verb} with {nics}"
        far = [g for g, nic, rank in self.pairs if nic is None or rank > SWITCH]
        crossing = [g for g, nic, rank in self.pairs if nic is None or rank == CROSS]
        free = "free " if self.exclusive else ""
        verb = "share" if len(far) > 1 else "shares"
        why = f"{_gpus(far)} {verb} no PCIe switch with a {free}NIC"
        if crossing:
            return f"{why}; crossing NUMA for {_gpus(crossing)}"
        return f"{why}; NICs {nics} on their NUMA node"


def _gpus(indices: Sequence[int]) -> str:
    return f"GPU{'s' if len(indices) > 1 else ''} {','.join(map(str, indices))}"


def pair_nics(affinity: HostAffinity, gpus: Sequence[int], free: Iterable[str], exclusive: int) -> NicChoice:
    """The NICs `gpus` use: with `exclusive` > 0 that many distinct NICs from `free`, the nearest GPU-NIC pairs
    first; shared, every GPU its nearest NIC of the node."""
    names = sorted(free) if exclusive else sorted(nic_names(affinity))
    rank = {(g, n): link_rank(affinity, g, n) for g in gpus for n in names}
    if not exclusive:
        shared: list[tuple[int, str | None, int]] = []
        for g in gpus:
            best = min(names, key=lambda n: (rank[(g, n)], n), default=None)
            shared.append((g, best, rank[(g, best)] if best is not None else CROSS))
        used = tuple(sorted({n for _, n, _ in shared if n is not None}))
        return NicChoice(tuple(gpus), used, tuple(shared), False)
    # nearest pairs first: a GPU behind a switch with a free NIC gets that one before anyone settles for it
    left = set(names)
    by_gpu: dict[int, tuple[str | None, int]] = {}
    for r, g, n in sorted((r, g, n) for (g, n), r in rank.items()):
        if len(by_gpu) < exclusive and g not in by_gpu and n in left:
            by_gpu[g] = (n, r)
            left.discard(n)
    for g in gpus:
        by_gpu.setdefault(g, (None, CROSS))
    taken = [nic for nic, _ in by_gpu.values() if nic is not None]
    # more NICs than GPUs: the rest nearest any of the GPUs
    while len(taken) < exclusive and left:
        nic = min(left, key=lambda n: (min((rank[(g, n)] for g in gpus), default=CROSS), n))
        left.discard(nic)
        taken.append(nic)
    pairs = tuple((g, *by_gpu[g]) for g in gpus)
    if exclusive < len(gpus):
        # fewer NICs than GPUs: a GPU without one of its own uses the nearest taken one
        pairs = tuple((g, nic, r) if nic is not None else _nearest(g, taken, rank) for g, nic, r in pairs)
    return NicChoice(tuple(gpus), tuple(sorted(taken)), pairs, True)


def _nearest(gpu: int, nics: Sequence[str], rank: Mapping[tuple[int, str], int]) -> tuple[int, str | None, int]:
    if not nics:
        return gpu, None, CROSS
    nic = min(nics, key=lambda n: (rank[(gpu, n)], n))
    return gpu, nic, rank[(gpu, nic)]


def choose_aligned(
    domains: Sequence[frozenset[int]],
    free_gpus: set[int],
    count: int,
    affinity: HostAffinity,
    free_nics: set[str],
    exclusive: int,
) -> NicChoice | None:
    """`count` free GPUs whose NICs sit nearest: within one NVLink domain where one holds them (as choose_gpus),
    the domain and GPUs that pair best with the free NICs (every GPU behind a switch with a NIC, then on a NUMA
    node with one), the tightest domain and lowest indices on ties. A pod larger than any domain takes the best
    paired GPUs of the whole node."""
    if count <= 0 or len(free_gpus) < count:
        return None
    nics = free_nics if exclusive else nic_names(affinity)
    # each GPU's best NIC on its own: the order GPUs are tried in
    alone = {g: min((link_rank(affinity, g, n) for n in nics), default=CROSS) for g in free_gpus}
    fitting = [d & free_gpus for d in domains if len(d & free_gpus) >= count] or [frozenset(free_gpus)]
    best: tuple[tuple[int, ...], NicChoice] | None = None
    for part in fitting:
        picked = sorted(sorted(part), key=lambda g: (alone[g], g))[:count]
        choice = pair_nics(affinity, sorted(picked), nics, exclusive)
        ranks = [r if n is not None else CROSS for _, n, r in choice.pairs]
        key = (ranks.count(CROSS), ranks.count(NUMA), len(part), min(part))
        if best is None or key < best[0]:
            best = (key, choice)
    return best[1] if best is not None else None
