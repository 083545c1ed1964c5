"""The partition planner: optimality on hand-checked and brute-forced demands, configs, labels, reconfiguration."""

from __future__ import annotations

import random
from functools import cache

import kubernetes_validate
import pytest
import yaml

from gpufleet.errors import UserError
from gpufleet.model import Cluster, Pod, PodPhase
from gpufleet.sched.partition.device_plugin import load_config
from gpufleet.sched.partition.emit import (
    MIG_CONFIG_LABEL,
    commands,
    configmaps,
    device_plugin_config,
    mig_parted_config,
    reconfiguration,
    summary,
)
from gpufleet.sched.partition.mig import MigLayout, count_vectors, layout_for_counts
from gpufleet.sched.partition.planner import WHOLE, parse_demand, plan, solve, synthetic_cluster

H100 = "H100-SXM5-80GB"


def brute_force(geometry: str, demand: dict[str, int]) -> int:
    """Fewest GPUs by exhaustive search over every realisable mix (small demands only)."""
    keys = sorted(demand)
    mixes = [tuple(dict(k).get(p, 0) for p in keys) for k in count_vectors(geometry) if k]
    mixes = [m for m in mixes if any(m)]
    if WHOLE in keys:
        mixes.append(tuple(1 if p == WHOLE else 0 for p in keys))

    @cache
    def best(left: tuple[int, ...]) -> int:
        if not any(left):
            return 0
        useful = [m for m in mixes if any(a > 0 and b > 0 for a, b in zip(left, m, strict=True))]
        return 1 + min(best(tuple(max(a - b, 0) for a, b in zip(left, m, strict=True))) for m in useful)

    return best(tuple(demand[k] for k in keys))


def test_seven_1g_fit_one_gpu() -> None:
    sol = solve(H100, {"1g.10gb": 7})
    assert (sol.gpus, sol.lower_bound, sol.optimal) == (1, 1, True)


def test_two_3g_and_one_1g_need_two_gpus() -> None:
    # 3g at 0 and 4 take all eight memory slices, so the 1g cannot join them
    sol = solve(H100, {"3g.40gb": 2, "1g.10gb": 1})
    assert sol.gpus == 2 and sol.lower_bound == 2
    assert sol.lp_bound == pytest.approx(1 + 1 / 8)  # LP: 3g+4x1g (one GPU) and 1/8 of the 2x3g one... is 9/8
    for mix in sol.patterns:
        layout_for_counts(H100, dict(mix))


def test_the_issue_mix_fits_on_33_gpus_which_is_the_lower_bound() -> None:
    sol = solve(H100, parse_demand("1g.10gb=60,3g.40gb=10,gpu=20"))
    # 20 whole GPUs; ten GPUs of 3g.40gb@4 + 4x1g.10gb give all 3g and 40 1g; 20 more 1g need ceil(20/7) = 3
    assert sol.gpus == 33 and sol.lower_bound == 33 and sol.optimal and sol.gap == 0
    assert sol.lp_bound == pytest.approx(20 + 10 + 20 / 7)
    assert sol.patterns[()] == 20
    assert sol.provided["1g.10gb"] >= 60 and sol.provided["3g.40gb"] == 10 and sol.provided[WHOLE] == 20


def test_planner_matches_exhaustive_search_on_random_small_demands() -> None:
    rng = random.Random(7)
    profiles = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", WHOLE]
    for _ in range(25):
        demand = {p: rng.randint(1, 5) for p in rng.sample(profiles, 3)}
        sol = solve(H100, demand)
        assert sol.gpus == brute_force(H100, demand), demand
        assert all(sol.provided[k] >= v for k, v in demand.items())


def test_bad_demands_are_user_errors() -> None:
    with pytest.raises(UserError, match=r"bad demand entry 'x'"):
        parse_demand("1g.10gb=3,x")
    with pytest.raises(UserError, match=r"empty"):
        parse_demand("1g.10gb=0")
    with pytest.raises(UserError, match=r"no MIG profile '1g.5gb'"):
        solve(H100, {"1g.5gb": 1})
    assert parse_demand("nvidia.com/mig-1g.10gb=2,1g.10gb=1") == {"1g.10gb": 3}
    with pytest.raises(UserError, match=r"needs 9 GPUs but only 8"):
        plan(synthetic_cluster("h100", 8), {"1g.10gb": 60})


def test_mig_parted_config_labels_and_configmaps() -> None:
    result = plan(synthetic_cluster("h100", 40), parse_demand("1g.10gb=60,3g.40gb=10,gpu=20"))
    doc, labels = mig_parted_config(result)
    assert doc["version"] == "v1"
    assert set(labels) == {n.name for n in result.cluster.nodes}
    for name, entries in doc["mig-configs"].items():
        assert name in labels.values()
        for entry in entries:
            assert entry["device-filter"] == "0x233010DE"
            assert entry["devices"] == "all" or all(isinstance(i, int) for i in entry["devices"])
            if entry["mig-enabled"]:
                MigLayout.of(H100, layout_for_counts(H100, entry["mig-devices"]).placements)
    # every GPU's planned layout is what its node's config says, and the demand is covered
    provided: dict[str, int] = {}
    for node, name in labels.items():
        for entry in doc["mig-configs"][name]:
            gpus = [g.index for g in result.cluster.node(node).gpus] if entry["devices"] == "all" else entry["devices"]
            for _ in gpus:
                for p, n in (
                    entry.get("mig-devices") or {WHOLE: 1} if not entry["mig-enabled"] else entry["mig-devices"]
                ).items():
                    provided[p] = provided.get(p, 0) + n
    assert provided["1g.10gb"] >= 60 and provided["3g.40gb"] >= 10 and provided[WHOLE] >= 20
    plugin = device_plugin_config(result, time_slicing=2)
    assert plugin.mig_strategy == "mixed"
    assert plugin.sharing.time_slicing is not None
    shared = [r.name for r in plugin.sharing.time_slicing.resources]
    assert shared == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    for cm in configmaps(result, plugin):
        kubernetes_validate.validate(cm, "1.30.0", strict=True)
        for text in cm["data"].values():
            assert yaml.safe_load(text)["version"] == "v1"
    assert load_config(configmaps(result, plugin)[1]["data"]["default"]).sharing.time_slicing is not None
    assert summary(result)["nodeLabels"]["h100-sxm-004"] == {MIG_CONFIG_LABEL: labels["h100-sxm-004"]}


def busy_cluster() -> Cluster:
    """Two 8-GPU H100 nodes: node 000 runs a whole-GPU pod on GPU 0 and a CPU pod; node 001 is idle."""
    cluster = synthetic_cluster("h100", 16)
    cluster.pods = [
        Pod("trainer", node="h100-sxm-000", gpu_indices=(0,), phase=PodPhase.running),
        Pod("web", node="h100-sxm-000", phase=PodPhase.running),
        Pod("done", node="h100-sxm-001", gpu_indices=(1,), phase=PodPhase.succeeded),
    ]
    return cluster


def test_changes_go_to_idle_gpus_first_so_nothing_drains() -> None:
    result = plan(busy_cluster(), {"1g.10gb": 63})  # 9 GPUs: all of the idle node and one free GPU of the busy one
    recon = reconfiguration(result)
    assert recon.drain == [] and recon.moved_pods == {}
    assert recon.in_place == ["h100-sxm-000", "h100-sxm-001"]
    assert recon.changed_gpus["h100-sxm-001"] == list(range(8))
    assert 0 not in recon.changed_gpus["h100-sxm-000"]
    assert recon.relabel == {
        "h100-sxm-000": mig_parted_config(result)[1]["h100-sxm-000"],
        "h100-sxm-001": "all-1g.10gb",
    }


def test_a_plan_that_needs_a_busy_gpu_drains_its_node_and_moves_its_pods() -> None:
    result = plan(busy_cluster(), {"1g.10gb": 16 * 7})
    recon = reconfiguration(result)
    assert recon.drain == ["h100-sxm-000"]
    assert recon.moved_pods == {"h100-sxm-000": ["default/trainer", "default/web"]}
    assert recon.in_place == ["h100-sxm-001"]
    steps = commands(recon)
    assert steps[:2] == ["kubectl cordon h100-sxm-000", "kubectl drain h100-sxm-000 --ignore-daemonsets "
                         "--delete-emptydir-data"]  # fmt: skip
    assert f"kubectl label node h100-sxm-001 {MIG_CONFIG_LABEL}=all-1g.10gb --overwrite" in steps
    assert steps[-1] == "kubectl uncordon h100-sxm-000"


def test_gpus_that_already_have_a_wanted_layout_are_kept() -> None:
    cluster = busy_cluster()
    gpu = cluster.node("h100-sxm-000").gpus[0]
    gpu.mig_enabled = True
    gpu.mig_instances = layout_for_counts(H100, {"1g.10gb": 7}).to_instances(gpu.uuid)
    result = plan(cluster, {"1g.10gb": 7})
    recon = reconfiguration(result)
    assert recon.changed_gpus == {} and recon.drain == []


def test_several_gpu_models_are_planned_together() -> None:
    from gpufleet.spec.builder import build_cluster
    from gpufleet.spec.cluster_spec import ClusterBody

    body = ClusterBody.model_validate(
        {
            "nodePools": [
                {"name": "h", "count": 1, "gpu": {"model": "h100-sxm", "count": 8}},
                {"name": "a", "count": 1, "gpu": {"model": "a100-40gb", "count": 8}},
                {"name": "t", "count": 1, "gpu": {"model": "t4", "count": 4}},
            ]
        }
    )
    # 1g.5gb exists only on the A100-40GB (7 per GPU); 3g.40gb only on the H100 (2 per GPU)
    result = plan(build_cluster("mix", body), {"1g.5gb": 14, "3g.40gb": 2})
    sol = result.solution
    assert {m.name for m in result.gpu_models} == {"h100-sxm", "a100-40gb"}  # the T4s cannot do MIG
    assert sol.gpus == 3 and sol.optimal
    assert sol.by_pool == {"a100-40gb": {(("1g.5gb", 7),): 2}, "h100-sxm": {(("3g.40gb", 2),): 1}}
    doc, labels = mig_parted_config(result)
    filters = {entry["device-filter"] for entries in doc["mig-configs"].values() for entry in entries}
    assert filters == {"0x233010DE", "0x20B010DE"}
    assert labels["a-000"] != labels["h-000"]
