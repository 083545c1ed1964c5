"""Each policy's choice on tiny hand-built clusters, with the arithmetic that makes it so."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.errors import UserError
from gpufleet.sched.replay.policies import expand_policies, make_policy
from gpufleet.sched.replay.policies.base import pick_max
from gpufleet.sched.replay.state import PodRequest, ReplayPlacement
from tests.sched.replay_helpers import make_cluster, pods_of, set_free

RNG = np.random.default_rng(0)


def choose(policy: str, cluster, pod: PodRequest):  # type: ignore[no-untyped-def]
    feasible = cluster.feasible(pod)
    return make_policy(policy).choose(cluster, pod, feasible, RNG)


def two_g2_nodes():  # type: ignore[no-untyped-def]
    return make_cluster([("n0", 96000, 393216, 8, "G2"), ("n1", 96000, 393216, 8, "G2")])


def test_best_fit_prefers_least_left_and_tightest_gpu() -> None:
    c = two_g2_nodes()
    # n0: 64 cores, GPUs 1000x6 + 300 + 600 -> left after a 4-core/250m pod: cpu 60000, gpu 6650
    set_free(c, 0, 64000, [1000] * 6 + [300, 600])
    # n1: idle -> cpu 92000, gpu 7750; score n0 = trunc(100*(1 - 0.5*60000/128000 - 0.5*6650/8000)) = 34
    #                                    score n1 = trunc(100*(1 - 0.5*92000/128000 - 0.5*7750/8000)) = 15
    placement = choose("best-fit", c, PodRequest(4000, 0, 1, 250))
    assert placement.node == 0
    assert placement.gpus == (6,)  # 300 free is the tightest GPU that fits 250


def test_ties_go_to_the_node_whose_name_sorts_first() -> None:
    c = make_cluster([("b-node", 8000, 100, 1, "T4"), ("a-node", 8000, 100, 1, "T4")])
    # identical nodes tie on every score: the reference simulator then takes the lexicographically first name
    assert choose("best-fit", c, PodRequest(1000, 0, 1, 1000)).node == 1
    assert pick_max(np.array([3.0, 3.0]), np.array([True, True]), c) == 1
    assert pick_max(np.array([3.0, 3.0]), np.array([True, False]), c) == 0


def test_first_fit_takes_first_node_and_first_gpu() -> None:
    c = two_g2_nodes()
    set_free(c, 0, 1000, [1000] * 8)  # too little CPU for the pod
    set_free(c, 1, 96000, [100, 500, 900] + [1000] * 5)
    placement = choose("first-fit", c, PodRequest(2000, 0, 1, 400))
    assert placement.node == 1
    assert placement.gpus == (1,)  # GPU 0 has 100 free, GPU 1 is the first with >= 400


def test_random_is_seeded_and_stays_feasible() -> None:
    c = make_cluster([(f"n{i}", 8000, 100, 2, "T4") for i in range(20)])
    pod = PodRequest(1000, 0, 1, 500)
    feasible = c.feasible(pod)
    feasible[:10] = False
    policy = make_policy("random")
    picks_a = [policy.choose(c, pod, feasible, np.random.default_rng(7)).node for _ in range(5)]
    picks_b = [policy.choose(c, pod, feasible, np.random.default_rng(7)).node for _ in range(5)]
    assert picks_a == picks_b
    assert all(p >= 10 for p in picks_a)


def test_gpu_packing_bands() -> None:
    c = make_cluster([("a", 64000, 1000, 4, "T4"), ("b", 64000, 1000, 4, "T4"), ("c", 64000, 1000, 4, "T4")])
    set_free(c, 1, 64000, [1000, 1000, 1000, 600])  # used node, GPU 3 shared
    set_free(c, 2, 64000, [1000, 1000, 1000, 0])  # used node, no shared GPU
    # sharing 500m pod: b can share GPU 3 (600 free): 100 - 60 // 10 = 94;
    # c must open an idle GPU: 50 - 1 = 49; a is idle: max(33 - 4, 4) = 29
    share = choose("gpu-packing", c, PodRequest(1000, 0, 1, 500))
    assert (share.node, share.gpus) == (1, (3,))
    # whole-GPU pod: b and c both open one idle GPU (49); tie -> name order -> b
    assert choose("gpu-packing", c, PodRequest(1000, 0, 1, 1000)).node == 1


def test_gpu_clustering_prefers_nodes_holding_the_same_shape() -> None:
    c = make_cluster([("a", 64000, 1000, 8, "G2"), ("b", 64000, 1000, 8, "G2"), ("c", 64000, 1000, 8, "G2")])
    one_gpu = PodRequest(1000, 0, 1, 1000)
    sharing = PodRequest(1000, 0, 1, 300)
    c.place(one_gpu, ReplayPlacement(0, (0,)))  # a holds only 1-GPU pods
    c.place(sharing, ReplayPlacement(2, (0,)))  # c holds only sharing pods
    # another sharing pod: c holds only sharing pods: 75 + fill; a holds another shape: 0 + fill; b idle: 25
    assert choose("gpu-clustering", c, sharing).node == 2
    # a 1-GPU pod goes to a (only its shape), not to idle b
    assert choose("gpu-clustering", c, one_gpu).node == 0


def test_dot_product_prefers_the_least_aligned_node() -> None:
    c = make_cluster([("a", 128000, 1000, 8, "G2"), ("b", 128000, 1000, 8, "G2")])
    set_free(c, 0, 16000, [1000] * 8)  # little CPU left: small dot product on the CPU axis
    # pod 8 cores, 1 GPU: a: (16000*8000/128000^2 + 8000*1000/8000^2)/2 = (0.0078 + 0.125)/2 -> score 93
    #                     b: (128000*8000/128000^2 + 0.125)/2 = (0.0625+0.125)/2 -> score 90
    assert choose("dot-product", c, PodRequest(8000, 0, 1, 1000)).node == 0


def test_fgd_packs_sharing_pod_onto_the_gpu_that_fragments_least() -> None:
    from gpufleet.sched.replay.frag import FragModel, TypicalPods
    from gpufleet.sched.replay.policies.fgd import FGD

    c = make_cluster([("a", 32000, 1000, 2, "T4"), ("b", 32000, 1000, 2, "T4")])
    set_free(c, 0, 32000, [1000, 500])
    # the only typical pod wants 600m: a's GPU 1 (500 free) is already fragment (frag 500)
    typical = TypicalPods(
        cpu_milli=np.array([1000]),
        gpu_milli=np.array([600]),
        num_gpu=np.array([1]),
        gpu_spec=("",),
        weight=np.array([1.0]),
    )
    fgd = FGD()
    fgd.use_model(c, FragModel(typical, c.models))
    pod = PodRequest(1000, 0, 1, 500)
    placement = fgd.choose(c, pod, c.feasible(pod), RNG)
    # a/GPU 1 -> [1000, 0]: frag 500 -> 0, delta +500, score trunc(100 sigmoid(0.5)) = 62
    # a/GPU 0 -> [500, 500]: frag 500 -> 1000, score 37; b/any -> [500, 1000]: frag 0 -> 500, score 37
    assert (placement.node, placement.gpus) == (0, (1,))


def test_every_policy_places_a_pod_only_on_a_feasible_node() -> None:
    c = make_cluster([("a", 4000, 100, 2, "T4"), ("b", 64000, 1000, 2, "V100M16"), ("c", 64000, 1000, 8, "G2")])
    pod = PodRequest(8000, 500, 2, 1000, "V100M16|V100M32")
    workload = pods_of([pod])
    for name in expand_policies("all"):
        policy = make_policy(name)
        policy.prepare(c, workload)
        placement = policy.choose(c, pod, c.feasible(pod), RNG)
        assert placement.node == 1, name
        assert placement.gpus == (0, 1), name


def test_unknown_policy_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown policy 'bestfit'"):
        expand_policies("bestfit")


def test_unschedulable_message_counts_each_filter() -> None:
    c = make_cluster([("a", 2000, 100, 2, "T4"), ("b", 64000, 10, 2, "T4"), ("c", 64000, 1000, 8, "G2")])
    set_free(c, 2, 64000, [300] * 8)
    pod = PodRequest(8000, 500, 1, 1000)
    assert not c.feasible(pod).any()
    assert c.unschedulable_message(pod) == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 fewer than 1 GPU(s) with 1000m free."
    )
    assert c.unschedulable_message(PodRequest(1000, 5, 0, 0)) == "3/3 nodes are available."


def test_fgd_plus_avoids_stranding_gpus_behind_exhausted_memory() -> None:
    # a and b: 2 idle GPUs each; a has 1500 MiB of memory, b 4000. Every pod in the workload needs 1000 MiB.
    c = make_cluster([("a", 16000, 1500, 2, "T4"), ("b", 16000, 4000, 2, "T4")])
    pod = PodRequest(1000, 1000, 1, 1000)
    workload = pods_of([pod] * 4)
    # FGD ignores memory: both nodes keep one usable GPU (delta 0, score 50) -> tie -> a (name order)
    fgd = make_policy("fgd")
    fgd.prepare(c, workload)
    assert fgd.choose(c, pod, c.feasible(pod), RNG).node == 0
    # FGD+: on a the pod leaves 500 MiB, so a's last GPU can host no typical pod: frag 0 -> 1000,
    # score trunc(100 * sigmoid(-1)) = 26; on b nothing is stranded (score 50)
    plus = make_policy("fgd-plus")
    plus.prepare(c, workload)
    assert plus.choose(c, pod, c.feasible(pod), RNG).node == 1


def test_fgd_plus_prefers_a_used_node_on_equal_scores() -> None:
    c = make_cluster([("a", 16000, 4000, 2, "T4"), ("b", 16000, 4000, 2, "T4"), ("c", 16000, 4000, 2, "T4")])
    cpu_pod = PodRequest(1000, 100, 0, 0)
    workload = pods_of([PodRequest(1000, 100, 1, 1000)] * 3)
    plus = make_policy("fgd-plus")
    plus.prepare(c, workload)
    c.place(cpu_pod, ReplayPlacement(2))  # c is in use; a CPU pod fragments no GPU anywhere: equal scores
    assert plus.choose(c, cpu_pod, c.feasible(cpu_pod), RNG).node == 2
