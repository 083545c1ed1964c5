"""FGD-Pack: the packing prices of a pod mix, the placements they change against FGD, and a replay of a trace slice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpufleet.sched.replay.openb import NodeList, load_trace
from gpufleet.sched.replay.policies import make_policy
from gpufleet.sched.replay.policies.fgd import after_placement
from gpufleet.sched.replay.policies.fgd_pack import FGDPack, fill_values, share_prices, sharing_sizes
from gpufleet.sched.replay.policies.fgd_pack_kernels import placements
from gpufleet.sched.replay.runner import replay
from gpufleet.sched.replay.state import PodRequest, ReplayCluster
from tests.sched.replay_helpers import make_cluster, pods_of, set_free

RNG = np.random.default_rng(0)


def share(milli: int) -> PodRequest:
    return PodRequest(2000, 1024, 1, milli)


# a mix like openb's: whole-GPU pods, 810m pods that only a 160m pod fits beside, 470m pods that pair, and 650m pods
# whose partner is a 320m
WHOLE = PodRequest(2000, 1024, 1, 1000)
MIX = pods_of([share(470)] * 4 + [share(650)] * 2 + [share(320)] * 2 + [share(810)] * 4 + [share(160)] + [WHOLE] * 6)


def prepared(name: str, cluster: ReplayCluster) -> object:
    policy = make_policy(name)
    policy.prepare(cluster, MIX)
    return policy


def two_single_gpu_nodes(free_a: int, free_b: int) -> ReplayCluster:
    c = make_cluster([("a", 16000, 65536, 1, "T4"), ("b", 16000, 65536, 1, "T4")])
    set_free(c, 0, 16000, [free_a])
    set_free(c, 1, 16000, [free_b])
    return c


def test_sharing_sizes_count_only_pods_that_share_a_gpu() -> None:
    assert sharing_sizes(MIX) == Counter({470: 4, 810: 4, 650: 2, 320: 2, 160: 1})


def test_prices_are_the_packing_dual_and_fill_values_the_best_fill_at_those_prices() -> None:
    # 810m fits alone (price 1), two 470m fill a GPU (1/2 each): the only optimal dual
    prices = share_prices(Counter({810: 10, 470: 10}))
    assert prices == pytest.approx({810: 1.0, 470: 0.5})
    fill = fill_values(prices)
    assert fill[1000] == pytest.approx(1.0) and fill[940] == pytest.approx(1.0) and fill[810] == pytest.approx(1.0)
    assert fill[530] == pytest.approx(0.5) and fill[469] == 0.0
    # no filling of one GPU is worth more than a GPU
    mix = share_prices(sharing_sizes(MIX))
    assert fill_values(mix)[1000] == pytest.approx(1.0)
    assert share_prices(Counter()) == {}


def test_loss_is_zero_where_a_pod_sits_in_an_optimal_packing() -> None:
    c = two_single_gpu_nodes(1000, 1000)
    policy = prepared("fgd-pack", c)
    assert isinstance(policy, FGDPack)
    free = np.array([1000, 530, 350, 190])
    # 320m on a fresh GPU leaves 680 for a 650m (0); beside a 470m it leaves 210 that only a 160m fills; on the 350
    # a 650m left it completes that GPU (0)
    loss_320 = policy.loss(free[:3], 320)
    assert loss_320[0] == 0 and loss_320[2] == 0 and loss_320[1] > 0
    # 160m beside an 810m (190 free) loses nothing
    assert policy.loss(free[3:], 160)[0] == 0


def test_a_320m_pod_goes_on_a_fresh_gpu_not_beside_a_470m() -> None:
    # a: one GPU with 530 free (a 470m pod runs there); b: a GPU with nothing on it (node in use)
    c = two_single_gpu_nodes(530, 1000)
    pod = share(320)
    feasible = c.feasible(pod)
    # FGD (typical pods: 6 whole-GPU, 4 810m, 4 470m, 2 650m, 2 320m, 1 160m of 19): on a, the 530 free is a fragment
    # to the whole-GPU, 810m and 650m pods (12/19 * 530 = 335) and the 210 left to all but the 160m (18/19 * 210 =
    # 199): fragmentation falls by 136; on b the 680 left is a fragment to the whole-GPU and 810m pods (10/19 * 680 =
    # 358): it rises by 358. FGD takes a and strands 210m that only a 160m pod can use
    assert prepared("fgd", c).choose(c, pod, feasible, RNG).node == 0  # type: ignore[attr-defined]
    assert prepared("fgd-plus", c).choose(c, pod, feasible, RNG).node == 0  # type: ignore[attr-defined]
    # FGD-Pack: on b the 320m pod keeps the packing 320 + 650 open (loss 0); on a it loses what the 530 was worth to
    # a 470m pod, so it takes b
    assert prepared("fgd-pack", c).choose(c, pod, feasible, RNG).node == 1  # type: ignore[attr-defined]


def test_the_gap_beside_a_small_pod_is_kept_for_an_810m() -> None:
    # a: 840 free (a 160m pod runs there): only an 810m makes that GPU full; b: a fresh GPU. FGD sees the 840 as a
    # fragment to whole-GPU pods only (6/19 * 840 = 265) and the 190 left as one to all but the 160m (180): falls by
    # 85, while 350 left on b is a fragment to 16 of 19 (295): FGD takes a, and the next 810m needs a fresh GPU
    c = two_single_gpu_nodes(840, 1000)
    pod = share(650)
    feasible = c.feasible(pod)
    assert prepared("fgd", c).choose(c, pod, feasible, RNG).node == 0  # type: ignore[attr-defined]
    assert prepared("fgd-pack", c).choose(c, pod, feasible, RNG).node == 1  # type: ignore[attr-defined]


def test_a_sharing_pod_takes_the_gpu_it_fills_best_on_the_chosen_node() -> None:
    c = make_cluster([("a", 16000, 65536, 4, "T4")])
    set_free(c, 0, 16000, [1000, 530, 350, 1000])
    placement = prepared("fgd-pack", c).choose(c, share(320), c.feasible(share(320)), RNG)  # type: ignore[attr-defined]
    # on the 1000 and the 350 the pod loses nothing (beside the 530 it does); FGD's score then prefers the 350
    assert placement.node == 0 and placement.gpus == (2,)


def typed(milli: int, cpu: int) -> PodRequest:
    return PodRequest(cpu, 1024, 1, milli)


# the same shares with openb-like CPU: 470m and 650m pods ask for 12 cores, 810m for 3, 320m and 160m for 4
CPU_MIX = pods_of(
    [typed(470, 12000)] * 4 + [typed(650, 12000)] * 2 + [typed(320, 4000)] * 2 + [typed(810, 3000)] * 4
    + [typed(160, 4000)] + [PodRequest(12000, 1024, 1, 1000)] * 6
)  # fmt: skip


def test_a_gpu_counts_only_what_the_nodes_free_cpu_can_run_beside_it() -> None:
    c = make_cluster([("a", 96000, 65536, 2, "G2")])
    policy = make_policy("fgd-pack")
    assert isinstance(policy, FGDPack)
    policy.prepare(c, CPU_MIX)
    gpus = np.array([[530, 530]] * 4)
    mem = np.full(4, 65536)
    value = policy.node_value(np.array([24000, 14000, 11000, 2000]), mem, gpus)
    # 24 cores: a 470m pod beside each (1/2 + 1/2); 14: one 470m, and the 2 cores left count for 2/12 of the
    # other; 11: no 470m fits, a 320m (4 cores, 1/4) on each; 2 cores: nothing fits
    assert value == pytest.approx([1.0, 0.5 + 0.5 * 2 / 12, 0.5, 0.0])


def test_a_small_pod_does_not_take_the_cpu_a_fragment_needs() -> None:
    # a and b: a 190 fragment beside an 810m pod, and 14 cores free; a's other GPU has 530 free (a 470m needs 12
    # cores there), b's other GPU is fresh
    c = make_cluster([("a", 96000, 65536, 2, "G2"), ("b", 96000, 65536, 2, "G2")])
    set_free(c, 0, 14000, [190, 530])
    set_free(c, 1, 14000, [190, 1000])
    pod = typed(160, 4000)
    feasible = c.feasible(pod)
    # FGD takes a: on b, 10 cores left make the fresh GPU a fragment to the whole-GPU pods (12 cores)
    fgd = make_policy("fgd")
    fgd.prepare(c, CPU_MIX)
    assert fgd.choose(c, pod, feasible, RNG).node == 0
    # FGD-Pack takes b: on a the 10 cores left can no longer run the 470m pod the 530 was worth (value 1/2 -> the
    # 1/4 of a 320m), while b's fresh GPU keeps the price of an 810m pod (3 cores)
    pack = make_policy("fgd-pack")
    pack.prepare(c, CPU_MIX)
    assert pack.choose(c, pod, feasible, RNG).node == 1


def test_a_whole_gpu_pod_does_not_take_the_last_cpu_a_fragment_needs() -> None:
    # a: a 530 fragment and a fresh GPU, 6 cores free; b: a full GPU and a fresh one, 14 cores free
    c = make_cluster([("a", 96000, 65536, 2, "G2"), ("b", 96000, 65536, 2, "G2")])
    set_free(c, 0, 6000, [530, 1000])
    set_free(c, 1, 14000, [0, 1000])
    pod = PodRequest(4000, 1024, 1, 1000)
    feasible = c.feasible(pod)
    plus = make_policy("fgd-plus")
    plus.prepare(c, CPU_MIX)
    assert plus.choose(c, pod, feasible, RNG).node == 0
    # a is worth an 810m on the fresh GPU (3 cores) and 3/4 of a 320m's 1/4 on the 530 (the 3 cores left of 6):
    # 1.1875; with the pod's 4 cores gone it is worth nothing, 0.1875 more than the GPU the pod takes. b loses just
    # that GPU (an 810m's worth)
    pack = make_policy("fgd-pack")
    assert isinstance(pack, FGDPack)
    pack.prepare(c, CPU_MIX)
    assert pack.node_value(c.cpu_free, c.mem_free, c.gpu_free) == pytest.approx([1.1875, 1.0])
    assert pack.choose(c, pod, feasible, RNG).node == 1


def test_a_cpu_only_pod_goes_where_the_cpu_is_spare() -> None:
    # a: 40 cores and 2 idle GPUs (which the workload's GPU pods will want ~12 cores each for); b: 40 cores, no free
    # GPU; FGD scores both alike (no typical pod loses its place), FGD+ breaks the tie by node order
    c = make_cluster([("a", 96000, 65536, 2, "G2"), ("b", 96000, 65536, 2, "G2")])
    set_free(c, 0, 40000, [1000, 1000])
    set_free(c, 1, 40000, [0, 0])
    pod = PodRequest(8000, 1024, 0, 0)
    feasible = c.feasible(pod)
    plus = make_policy("fgd-plus")
    plus.prepare(c, CPU_MIX)
    assert plus.choose(c, pod, feasible, RNG).node == 0
    pack = make_policy("fgd-pack")
    pack.prepare(c, CPU_MIX)
    assert pack.choose(c, pod, feasible, RNG).node == 1


def every_eighth_node(nodes: NodeList) -> NodeList:
    idx = np.arange(0, len(nodes), 8)
    return NodeList(
        names=tuple(nodes.names[i] for i in idx),
        cpu_milli=nodes.cpu_milli[idx],
        memory_mib=nodes.memory_mib[idx],
        num_gpu=nodes.num_gpu[idx],
        model=tuple(nodes.model[i] for i in idx),
    )


def test_a_slice_of_the_trace_replays_the_same_way_through_the_engine_and_the_reference(openb: Path) -> None:
    nodes, pods = load_trace(openb)
    # 152 nodes of every model (770 GPUs) and the first 1,200 pods, tuned to 130 % of those GPUs
    small, work = every_eighth_node(nodes), pods.take(np.arange(1200))
    fast = replay(small, work, "fgd-pack", seed=1)
    reference = replay(small, work, "fgd-pack", seed=1, reference=True)
    placed = [(p.node, p.gpus) if p is not None else None for p in fast.placements]
    assert placed == [(p.node, p.gpus) if p is not None else None for p in reference.placements]
    assert (fast.pods, fast.failed) == (1382, 301)
    assert fast.alloc_pct == {"100": 97.19, "130": 97.43}


@pytest.mark.parametrize("pod", [share(320), share(810), PodRequest(2000, 0, 1, 1000), PodRequest(2000, 0, 2, 1000),
                                 PodRequest(2000, 0, 0, 0)])  # fmt: skip
def test_the_compiled_candidates_are_fgds_candidates(pod: PodRequest) -> None:
    rng = np.random.default_rng(7)
    gpus = rng.choice(np.array([0, 190, 350, 530, 680, 1000]), size=(60, 8))
    cpu = np.full(60, 32000)
    rows, cols, _, after = after_placement(cpu, gpus, pod)
    src, col, after_compiled = placements(gpus, pod.gpu_milli, pod.num_gpu, pod.is_sharing)
    assert len(src) > 0
    assert np.array_equal(src, rows) and np.array_equal(col, cols) and np.array_equal(after_compiled, after)
