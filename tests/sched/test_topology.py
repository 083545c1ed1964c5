"""NVLink domains inside a node and leaf-switch packing across nodes."""

from __future__ import annotations

from gpufleet.model import Cluster, Gang, GpuRequest, Pod
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import FabricHealth, LeafHealth, PodInfo, pod_info
from gpufleet.sched.framework.topology import CLIQUE_LABEL, choose_gpus, leaves_spanned, nvlink_domains
from gpufleet.sched.framework.types import Failure, Placement
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody
from tests.sched.k8s_objects import H100_NVL, fabric_cluster, knode, pod, snap


def test_domains_nvswitch_and_pairs() -> None:
    sxm = fabric_cluster(nodes=1, per_su=1).nodes[0]
    assert nvlink_domains(sxm) == [frozenset(range(8))]
    nvl = fabric_cluster(nodes=1, per_su=1, model="h100-nvl", gpus=4).nodes[0]
    assert nvlink_domains(nvl) == [frozenset({0, 1}), frozenset({2, 3})]
    pcie = fabric_cluster(nodes=1, per_su=1, model="l40s", gpus=2).nodes[0]
    assert nvlink_domains(pcie) == [frozenset({0}), frozenset({1})]


def test_choose_gpus_keeps_pairs_whole() -> None:
    pairs = [frozenset({0, 1}), frozenset({2, 3})]
    assert choose_gpus(pairs, {0, 1, 2, 3}, 1) == (0,)
    assert choose_gpus(pairs, {1, 2, 3}, 1) == (1,)  # finish the broken pair first
    assert choose_gpus(pairs, {1, 2, 3}, 2) == (2, 3)
    assert choose_gpus(pairs, {0, 1, 2, 3}, 4) == (0, 1, 2, 3)
    assert choose_gpus(pairs, {1, 3}, 3) is None


def test_two_gpu_pod_needs_one_nvlink_pair() -> None:
    # nvl-a has one free GPU in each pair (not an NVLink domain); nvl-b has a whole pair free.
    s = snap(
        knode("nvl-a", gpus=4, product=H100_NVL),
        knode("nvl-b", gpus=4, product=H100_NVL),
    )
    sched = Scheduler.from_snapshot(s)
    a = sched.state.index["nvl-a"]
    sched.state.assign(pod("x0"), a, (0,))
    sched.state.assign(pod("x1"), a, (2,))
    sched.state.assign(pod("y0", gpus=1), sched.state.index["nvl-b"], (0,))
    placed = sched.schedule_one(pod("ft", gpus=2))
    assert isinstance(placed, Placement) and placed.node == "nvl-b" and placed.gpus == (2, 3)
    # now neither node has a free pair although nvl-a still has 2 free GPUs
    sched.state.used[a, sched.state.res_index["nvidia.com/gpu"]] = 2
    again = sched.schedule_one(pod("ft2", gpus=2))
    assert isinstance(again, Failure)
    assert "node(s) had no NVLink domain with 2 free GPUs" in again.message


def test_leaves_of_rail_optimized_fabric() -> None:
    cluster = fabric_cluster(nodes=8, per_su=4)
    leaves = Scheduler.from_cluster(cluster).state.leaves  # from the fabric's topology model
    assert len(leaves["n-000"]) == 8
    assert leaves["n-000"] == leaves["n-003"] != leaves["n-004"]
    assert leaves_spanned(leaves, ["n-000", "n-001"]) == 8
    assert leaves_spanned(leaves, ["n-000", "n-004"]) == 16


def test_gang_lands_under_one_leaf_group() -> None:
    cluster = fabric_cluster(nodes=8, per_su=4)
    # su1 (n-000..n-003) has 2 GPUs busy on n-000; su2 is empty, but spread: the gang of 3 x 8 fits only in su2
    # without splitting, and su1 also fits 3 whole nodes. Best fit picks the tighter group.
    sched = Scheduler.from_cluster(cluster)
    sched.state.assign(pod_info(Pod("busy", gpu=GpuRequest(count=2))), 0)
    members = [pod_info(Pod(f"g-{i}", gpu=GpuRequest(count=8), gang="default/g")) for i in range(3)]
    result = sched.plan(members, {"default/g": Gang("default/g", 3)})
    nodes = sorted(p.node for p in result.placements)
    assert len(nodes) == 3
    leaves = sched.state.leaves
    assert leaves_spanned(leaves, nodes) == 8  # one rail group of 8 leaves, not 16
    assert nodes == ["n-001", "n-002", "n-003"]  # the group with less free capacity that still holds the gang


def test_gang_too_big_for_one_group_spans_the_fewest() -> None:
    cluster = fabric_cluster(nodes=12, per_su=4)
    sched = Scheduler.from_cluster(cluster)
    members = [pod_info(Pod(f"g-{i}", gpu=GpuRequest(count=8), gang="default/g")) for i in range(6)]
    result = sched.plan(members, {"default/g": Gang("default/g", 6)})
    assert len(result.placements) == 6
    assert leaves_spanned(sched.state.leaves, [p.node for p in result.placements]) == 16


def test_gang_keeps_off_a_degraded_leaf_unless_nothing_else_fits() -> None:
    cluster = fabric_cluster(nodes=8, per_su=4)
    rails = {f"n-{i:03d}": {r: f"su{i // 4 + 1}-r{r}" for r in range(8)} for i in range(8)}
    degraded = FabricHealth(rails, {"su1-r3": LeafHealth("degraded", 0.5, ("1 of 2 uplinks missing",))})
    members = [pod_info(Pod(f"g-{i}", gpu=GpuRequest(count=8), gang="default/g")) for i in range(3)]

    def plan(health: FabricHealth | None, gang: list[PodInfo]) -> list[str]:
        sched = Scheduler.from_cluster(cluster, fabric_health=health)
        sched.state.assign(pod_info(Pod("busy", gpu=GpuRequest(count=2))), 0)
        return sorted(p.node for p in sched.plan(gang, {"default/g": Gang("default/g", len(gang))}).placements)

    # su1 is the tighter group (test above); one of its rail leaves short of an uplink sends the gang to su2
    assert plan(FabricHealth(rails), members) == ["n-001", "n-002", "n-003"]
    assert plan(degraded, members) == ["n-004", "n-005", "n-006"]
    # seven whole nodes fit only by taking su1's too
    seven = [pod_info(Pod(f"g-{i}", gpu=GpuRequest(count=8), gang="default/g")) for i in range(7)]
    assert plan(degraded, seven) == [f"n-{i:03d}" for i in range(1, 8)]


def test_unknown_fabric_health_is_ok() -> None:
    health = FabricHealth()
    assert health.node_state("anything") == ("ok", 1.0, ())
    sched = Scheduler.from_cluster(fabric_cluster(nodes=2, per_su=2), fabric_health=health)
    assert not sched.state.fabric_avoid.any() and not sched.state.has_fabric_health


# --- the fabric's topology model: spines, NVLink domains, where a gang landed ------------------------------------


def _three_tier() -> Cluster:
    """16 two-rail nodes, 4 per scalable unit, radix-8 switches in three tiers: su1+su2 sit under spines 1-4,
    su3+su4 under spines 5-8, and only the cores join the two."""
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": 16, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 2}}],
            "fabric": {"leafRadix": 8, "nodesPerScalableUnit": 4, "tiers": 3},
        }
    )
    return build_cluster("three", body)


def _gang(n: int, name: str = "default/g") -> tuple[list[PodInfo], dict[str, Gang]]:
    members = [pod_info(Pod(f"{name}-{i}", gpu=GpuRequest(count=8), gang=name)) for i in range(n)]
    return members, {name: Gang(name, n)}


def test_a_gang_too_big_for_a_leaf_group_stays_under_one_set_of_spines() -> None:
    sched = Scheduler.from_cluster(_three_tier())
    state = sched.state
    assert state.spine_groups == 2 and state.topology is not None
    # su4 loses two nodes: su3+su4 keep exactly the six the gang needs, su1+su2 keep eight. Member by member the
    # gang would start at n-000 and fill su1+su2; the tightest set of spines that holds it keeps those whole.
    for i in (12, 13):
        state.assign(pod_info(Pod(f"busy-{i}", gpu=GpuRequest(count=8))), state.index[f"n-{i:03d}"])
    members, gangs = _gang(6)
    result = sched.plan(members, gangs)
    nodes = sorted(p.node for p in result.placements)
    assert nodes == ["n-008", "n-009", "n-010", "n-011", "n-014", "n-015"]
    landed = result.landings["default/g"]
    assert landed.nodes == tuple(nodes) and landed.switch_hops == 3
    assert landed.spines == ("spine-5", "spine-6", "spine-7", "spine-8")
    assert landed.leaves == ("leaf-su3-r0", "leaf-su3-r1", "leaf-su4-r0", "leaf-su4-r1")


def test_a_gang_under_one_leaf_group_lands_one_switch_apart_and_across_cores_five() -> None:
    sched = Scheduler.from_cluster(_three_tier())
    members, gangs = _gang(3)
    landed = sched.plan(members, gangs).landings["default/g"]
    assert landed.switch_hops == 1 and landed.spines == () and len(landed.leaves) == 2
    # twelve nodes fit under no one set of spines: the gang climbs to the cores
    big, big_gangs = _gang(12, "default/big")
    far = sched.plan(big, big_gangs).landings["default/big"]
    assert far.switch_hops == 5 and len(far.spines) == 8


def test_a_gang_goes_to_one_nvlink_domain_where_the_nodes_name_theirs() -> None:
    cluster = fabric_cluster(nodes=8, per_su=8)  # one leaf group: only the NVLink domains tell the nodes apart
    for node in cluster.nodes:
        rack = "a" if node.name in ("n-000", "n-002", "n-004", "n-006") else "b"
        node.labels[CLIQUE_LABEL] = f"cluster-uuid.{rack}"
    sched = Scheduler.from_cluster(cluster)
    sched.state.assign(pod_info(Pod("busy", gpu=GpuRequest(count=8))), sched.state.index["n-001"])
    members, gangs = _gang(3)
    result = sched.plan(members, gangs)
    # rack b has exactly three whole nodes left: the tightest domain that holds the gang
    assert sorted(p.node for p in result.placements) == ["n-003", "n-005", "n-007"]
    assert result.landings["default/g"].nvlink_domains == ("cluster-uuid.b",)
