"""GPUs and RDMA NICs chosen together by a node's GPU<->NIC<->CPU affinity: the real `nvidia-smi topo -m` of a DGX
H100 (tests/captures/affinity, GPU k behind one PCIe switch with one NIC; GPUs 0-3 and NIC5-8 on NUMA node 0, GPUs 4-7
and NIC1-4 on node 1, NIC0 the storage NIC without a NUMA node)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gpufleet.model.affinity import HostAffinity
from gpufleet.parsers.nvidia.topo import parse_topo_matrix
from gpufleet.parsers.nvidia.topo_affinity import affinity_from_topo
from gpufleet.sched.framework.nics import CROSS, NUMA, SWITCH, choose_aligned, nic_request, pair_nics
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import PodInfo, Snapshot, parse_pod
from gpufleet.sched.framework.types import Placement
from tests.sched.k8s_objects import knode, kpod, snap

CAPTURES = Path(__file__).resolve().parents[1] / "captures" / "affinity"
HOSTDEV = "nvidia.com/hostdev"
SHARED = "rdma/rdma_shared_device_a"


def dgx_affinity() -> HostAffinity:
    text = (CAPTURES / "topo_m_h100_nccl1453.txt").read_text()
    return affinity_from_topo(parse_topo_matrix(text, strict=False))


def rdma_node(name: str, **kw: Any) -> dict[str, Any]:
    """An 8-GPU node whose device plugins advertise 16 NIC units (SR-IOV functions of its 9 NICs, as the host-device
    plugin would name them) and a shared RDMA device."""
    node = knode(name, **kw)
    for field in ("capacity", "allocatable"):
        node["status"][field].update({HOSTDEV: "16", SHARED: "100"})
    return node


def nic_pod(name: str, gpus: int, nics: int = 0, shared: bool = False, **kw: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    if nics:
        limits[HOSTDEV] = str(nics)
    if shared:
        limits[SHARED] = "1"
    return kpod(name, resources={"limits": limits}, **kw)


def with_affinity(s: Snapshot, names: set[str] | None = None) -> Snapshot:
    for n in s.nodes:
        if names is None or n.node.name in names:
            n.affinity = dgx_affinity()
    return s


def test_nic_resources_as_clusters_name_them() -> None:
    assert nic_request({"nvidia.com/gpu": 8, HOSTDEV: 8}) == (True, 8)
    assert nic_request({"nvidia.com/gpu": 8, SHARED: 1}) == (True, 0)
    assert nic_request({"nvidia.com/rdma_shared_device_a": 1}) == (True, 0)
    assert nic_request({"openshift.io/mlnx_sriov_rdma": 2, "vpc.amazonaws.com/efa": 1}) == (True, 3)
    assert nic_request({"nvidia.com/gpu": 8, "cpu": 4000}) == (False, 0)


def test_each_gpu_takes_the_nic_behind_its_switch() -> None:
    aff = dgx_affinity()
    choice = pair_nics(aff, [0, 1], {f"NIC{i}" for i in range(9)}, 2)
    assert choice.pairs == ((0, "NIC8", SWITCH), (1, "NIC7", SWITCH))
    assert choice.aligned and choice.note() == "aligned: GPUs 0,1 share PCIe switches with NIC7,NIC8"
    # NIC7 and NIC8 taken: GPUs 0 and 1 fall back to the other NICs of their socket
    worse = pair_nics(aff, [0, 1], {"NIC5", "NIC6", "NIC1"}, 2)
    assert [r for _, _, r in worse.pairs] == [NUMA, NUMA] and worse.nics == ("NIC5", "NIC6")
    assert worse.note() == "GPUs 0,1 share no PCIe switch with a free NIC; NICs NIC5,NIC6 on their NUMA node"
    # only the far socket's NICs left: every transfer crosses the SMP interconnect
    far = pair_nics(aff, [0, 1], {"NIC1", "NIC2"}, 2)
    assert far.level == CROSS
    assert far.note() == "GPUs 0,1 share no PCIe switch with a free NIC; crossing NUMA for GPUs 0,1"


def test_gpu_choice_follows_the_free_nics() -> None:
    aff = dgx_affinity()
    whole = [frozenset(range(8))]
    nics = {f"NIC{i}" for i in range(9)}
    # every NIC free: the lowest GPUs, as without affinity
    assert choose_aligned(whole, set(range(8)), 2, aff, nics, 2).gpus == (0, 1)  # type: ignore[union-attr]
    # the NICs behind GPUs 0-2 are taken: GPUs 3 and 4 still have theirs
    taken = nics - {"NIC8", "NIC7", "NIC6"}
    picked = choose_aligned(whole, set(range(8)), 2, aff, taken, 2)
    assert picked is not None and picked.gpus == (3, 4) and picked.aligned
    # a shared RDMA device takes no NIC: any GPUs pair with their own
    assert choose_aligned(whole, set(range(8)), 2, aff, set(), 0).aligned  # type: ignore[union-attr]
    assert choose_aligned(whole, {0}, 2, aff, nics, 2) is None


def test_the_scheduler_places_aligned_and_says_when_it_could_not() -> None:
    s = with_affinity(snap(rdma_node("dgx-a")))
    sched = Scheduler.from_snapshot(s)
    first = sched.schedule_one(parse_pod(nic_pod("first", 2, nics=2)))
    assert isinstance(first, Placement) and first.gpus == (0, 1) and first.nics == ("NIC7", "NIC8")
    assert first.alignment.startswith("aligned")
    # then a pod on GPUs 4-7 without NICs, and one on GPUs 2 and 3 holding the rest of socket 0's NICs
    state = sched.state
    state.release("default/first")
    state.assign(parse_pod(nic_pod("no-nics", 4)), 0, (4, 5, 6, 7))
    state.assign(parse_pod(nic_pod("socket0", 2, nics=4)), 0, (2, 3))
    assert state.nic_free[0] == {"NIC0", "NIC1", "NIC2", "NIC3", "NIC4"}
    again = sched.schedule_one(parse_pod(nic_pod("late", 2, nics=2)))
    assert isinstance(again, Placement) and again.gpus == (0, 1)
    assert again.alignment == "GPUs 0,1 share no PCIe switch with a free NIC; crossing NUMA for GPUs 0,1"
    # a pod asking for no NIC is placed as before, with no NIC note
    sched.state.release("default/late")
    plain = sched.schedule_one(parse_pod(nic_pod("plain", 1)))
    assert isinstance(plain, Placement) and plain.gpus == (0,) and plain.nics == () and plain.alignment == ""


def test_a_node_with_free_aligned_nics_is_preferred() -> None:
    # dgx-a is fuller (binpack prefers it) but a pod on its GPUs 4-7 holds every NIC but NIC8
    s = with_affinity(snap(rdma_node("dgx-a"), rdma_node("dgx-b")))
    sched = Scheduler.from_snapshot(s)
    a = sched.state.index["dgx-a"]
    sched.state.assign(parse_pod(nic_pod("hog", 4, nics=8)), a, (4, 5, 6, 7))
    pod = parse_pod(nic_pod("train", 2, nics=2))
    placed = sched.schedule_one(pod)
    assert isinstance(placed, Placement) and placed.node == "dgx-b" and placed.alignment.startswith("aligned")
    exp = sched.explain(parse_pod(nic_pod("train-2", 2, nics=2)))
    assert exp.alignment["dgx-a"] == "GPU 1 shares no PCIe switch with a free NIC; crossing NUMA for GPU 1"
    assert exp.alignment["dgx-b"].startswith("aligned")
    # the same node without NICs asked: binpack's choice, dgx-a
    assert sched.select_node(parse_pod(nic_pod("gpus-only", 2))) is not None
    assert sched.state.names[sched.select_node(parse_pod(nic_pod("gpus-only", 2)))[0]] == "dgx-a"  # type: ignore[index]


def test_nodes_without_affinity_place_as_before() -> None:
    pods = [nic_pod(f"p{i}", g, nics=g) for i, g in enumerate([2, 1, 4, 1])]
    plain = Scheduler.from_snapshot(snap(rdma_node("dgx-a"), rdma_node("dgx-b")))
    got = [plain.schedule_one(parse_pod(p)) for p in pods]
    assert [(p.node, p.gpus, p.nics, p.alignment) for p in got if isinstance(p, Placement)] == [
        ("dgx-a", (0, 1), (), ""),
        ("dgx-a", (2,), (), ""),
        ("dgx-a", (3, 4, 5, 6), (), ""),
        ("dgx-a", (7,), (), ""),
    ]


def test_affinity_is_part_of_the_class_signature() -> None:
    s = with_affinity(snap(rdma_node("dgx-a"), rdma_node("dgx-b"), rdma_node("dgx-c")), {"dgx-a", "dgx-b"})
    state = Scheduler.from_snapshot(s).state
    sig = state.signature.tolist()
    assert sig[0] == sig[1] != sig[2]
    # the same free counts, different free GPUs: one node's NICs sit with its free GPUs, the other's do not
    state.assign(parse_pod(nic_pod("x", 2, nics=2)), 0, (0, 1))
    state.assign(parse_pod(nic_pod("y", 2)), 1, (0, 1))
    assert state.classes.node_class[0] != state.classes.node_class[1]


def _random_pods(rng: random.Random, round_: int) -> list[PodInfo]:
    pods = []
    for j in range(rng.randrange(6, 14)):
        gpus = rng.choice([1, 2, 2, 4, 8])
        kind = rng.random()
        nics = gpus if kind < 0.2 else min(4 * gpus, 8) if kind < 0.4 else 0  # some take more NICs than GPUs
        pods.append(parse_pod(nic_pod(f"r{round_}-{j}", gpus, nics=nics, shared=0.4 <= kind < 0.6)))
    return pods


def test_class_engine_matches_the_reference_with_affinity() -> None:
    rng = random.Random(7)
    docs = [rdma_node(f"dgx-{i}") for i in range(8)]
    with_nics = {f"dgx-{i}" for i in range(8) if i % 4}
    fast = Scheduler.from_snapshot(with_affinity(snap(*docs), with_nics))
    ref = Scheduler.from_snapshot(with_affinity(snap(*docs), with_nics), reference=True)
    notes: list[str] = []
    for round_ in range(5):
        state = rng.getstate()
        got = fast.plan(_random_pods(rng, round_))
        rng.setstate(state)
        want = ref.plan(_random_pods(rng, round_))
        assert [(p.pod, p.node, p.gpus, p.score, p.nics, p.alignment) for p in got.placements] == [
            (p.pod, p.node, p.gpus, p.score, p.nics, p.alignment) for p in want.placements
        ]
        assert [f.message for f in got.failures] == [f.message for f in want.failures]
        notes.extend(p.alignment for p in got.placements)
    # both kinds of outcome were decided (the comparison is not vacuous)
    assert any(n.startswith("aligned") for n in notes) and any("no PCIe switch" in n for n in notes)
    assert fast.state.nic_free == ref.state.nic_free
