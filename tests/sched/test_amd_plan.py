"""Planning AMD partition modes per node: the choices, what each change drains, and the DCM ConfigMap it emits."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpufleet.errors import UserError
from gpufleet.model import Cluster, GpuRequest, Pod, PodPhase, TaintEffect, Toleration
from gpufleet.sched.partition.amd_emit import DCM_LABEL, advertised_after, commands, dcm_configmap, summary
from gpufleet.sched.partition.amd_partition import dcm_profile_problems, mode
from gpufleet.sched.partition.amd_plan import nodes_needed, parse_amd_demand, plan_amd
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody

DCM_TOL = Toleration(key="amd-dcm", operator="Equal", value="up", effect=TaintEffect.no_execute)


def cluster(mi300x: int = 4, per_node: int = 8, extra: list[dict[str, object]] | None = None) -> Cluster:
    pools = [
        {"name": "h100", "count": 2, "gpu": {"model": "h100-sxm", "count": 8}},
        *([{"name": "mi300x", "count": mi300x, "gpu": {"model": "mi300x", "count": per_node}}] if mi300x else []),
        *(extra or []),
    ]
    return build_cluster("t", ClusterBody.model_validate({"nodePools": pools}))


def running(c: Cluster, name: str, node: str, gpus: tuple[int, ...] = (), tolerate: bool = False) -> None:
    gpu = GpuRequest(count=len(gpus), vendor="amd") if gpus else GpuRequest()
    tols = (DCM_TOL,) if tolerate else ()
    c.pods.append(Pod(name, "ml", gpu=gpu, node=node, gpu_indices=gpus, phase=PodPhase.running, tolerations=tols))


def test_demand_parsing() -> None:
    assert parse_amd_demand("cpx=40, gpu=3") == {"cpx": 40, "spx": 3}
    assert parse_amd_demand("amd.com/cpx_nps4=16,spx=1") == {"cpx_nps4": 16, "spx": 1}
    for bad, says in [
        ("cpx", "bad demand entry 'cpx'"),
        ("xpx=3", "'xpx' is not a partition mode"),
        ("cpx=4,cpx_nps4=8", "demand names cpx both with and without a memory mode"),
        ("cpx=0", "the demand is empty"),
    ]:
        with pytest.raises(UserError, match=says):
            parse_amd_demand(bad)


def test_small_inference_pods_and_whole_gpu_jobs_change_one_node() -> None:
    c = cluster()
    plan = plan_amd(c, {"cpx": 40, "spx": 3})
    assert [(ch.node, ch.target.name) for ch in plan.changed] == [("mi300x-000", "cpx_nps1")]
    # NPS1 over NPS4: both give 64 partitions, and keeping the memory mode spares a driver reload
    assert not plan.changed[0].driver_reload and plan.provided == {"cpx": 64, "spx": 24} and plan.optimal
    assert {ch.node for ch in plan.choices} == {f"mi300x-00{i}" for i in range(4)}  # H100 nodes are not AMD's
    assert advertised_after(plan, "mixed")["mi300x-000"] == {"amd.com/cpx_nps1": 64}
    assert advertised_after(plan, "single")["mi300x-001"] == {"amd.com/gpu": 8}


def test_busy_nodes_are_left_alone_and_a_forced_change_says_what_it_drains() -> None:
    c = cluster()
    running(c, "train-0", "mi300x-000", (0, 1, 2, 3))
    running(c, "logs", "mi300x-000")  # no GPU, no toleration: the taint evicts it too
    running(c, "probe", "mi300x-000", (7,), tolerate=True)  # on a GPU and tolerating: must be stopped by hand
    running(c, "train-1", "mi300x-001", (0,))
    plan = plan_amd(c, {"cpx": 40})
    assert [ch.node for ch in plan.changed] == ["mi300x-002"]  # the idle nodes change first
    every = plan_amd(c, {"cpx": 4 * 64})
    first = next(ch for ch in every.changed if ch.node == "mi300x-000")
    assert first.gpu_pods == ["ml/train-0", "ml/probe"] and first.evicted == ["ml/train-0", "ml/logs"]
    assert first.kept == ["ml/probe"]
    steps = commands(every)
    node0 = [s for s in steps if "mi300x-000" in s or "probe" in s]
    assert node0 == [
        "kubectl taint nodes mi300x-000 amd-dcm=up:NoExecute",
        "kubectl delete pod -n ml probe  # on the GPUs, tolerates amd-dcm",
        f"kubectl label node mi300x-000 {DCM_LABEL}=cpx-nps1 --overwrite",
        "kubectl wait node/mi300x-000 --for=jsonpath='{.metadata.labels.amd\\.com/gpu\\.compute-memory-partition}'"
        "=cpx_nps1 --timeout=30m",
        "kubectl taint nodes mi300x-000 amd-dcm=up:NoExecute-",
    ]
    drain = next(n for n in summary(every)["nodes"] if n["node"] == "mi300x-000")["drain"]
    assert drain == {
        "gpuPods": ["ml/train-0", "ml/probe"],
        "evicted": ["ml/train-0", "ml/logs"],
        "tolerating": ["ml/probe"],
    }


def test_nodes_already_in_a_serving_mode_stay_and_an_nps_change_reloads_the_driver() -> None:
    c = cluster(mi300x=2)
    c.node("mi300x-001").labels["amd.com/gpu.compute-memory-partition"] = "cpx_nps1"
    assert plan_amd(c, {"cpx": 64}).changed == []
    nps4 = plan_amd(c, {"cpx_nps4": 16})
    # either node must change its memory mode; equal costs go to the first node
    assert [(ch.node, ch.current.name, ch.target.name) for ch in nps4.changed] == [
        ("mi300x-000", "spx_nps1", "cpx_nps4")
    ]
    assert nps4.changed[0].driver_reload


def test_a_demand_that_does_not_fit_or_needs_kernel_modes_is_refused() -> None:
    c = cluster()
    with pytest.raises(UserError) as err:
        plan_amd(c, {"cpx": 300})
    assert "the demand does not fit 4 AMD nodes: cpx=300 (at most 256)" in err.value.message
    with pytest.raises(UserError) as err:
        plan_amd(c, {"cpx": 256, "spx": 1})
    assert "each node serves one mode" in err.value.message
    with pytest.raises(UserError) as err:
        plan_amd(c, {"qpx": 4})
    assert "no node can serve qpx" in err.value.message and "--kernel-modes" in (err.value.fix or "")
    with pytest.raises(UserError, match="has no partitionable AMD GPUs"):
        plan_amd(cluster(mi300x=0), {"cpx": 1})


def test_kernel_modes_are_set_with_amd_smi_not_dcm() -> None:
    c = cluster(mi300x=2)
    plan = plan_amd(c, {"qpx_nps4": 32}, dcm_only=False)
    assert [ch.target.name for ch in plan.changed] == ["qpx_nps4"]
    data = summary(plan)
    assert data["nodeLabels"] == {}
    assert "qpx" not in json.loads(data["dcmConfigMap"]["data"]["config.json"])["gpu-config-profiles"]
    assert commands(plan)[1:3] == [
        "# on mi300x-000: amd-smi set -g all -M NPS4  # reloads the amdgpu driver",
        "# on mi300x-000: amd-smi set -g all -C QPX",
    ]


def test_the_dcm_configmap_is_the_operators_shape_and_passes_its_checks() -> None:
    c = cluster(extra=[{"name": "small", "count": 1, "gpu": {"model": "mi300x", "count": 4}}])
    plan = plan_amd(c, {"cpx_nps4": 4 * 64 + 32})  # every node in CPX+NPS4, the 4-GPU one too
    cm = dcm_configmap(plan)
    kubernetes_validate.validate(cm, "1.31", strict=True)
    assert cm["metadata"] == {"name": "config-manager-config", "namespace": "kube-amd-gpu"}
    config = json.loads(cm["data"]["config.json"])
    assert config["gpuClientSystemdServices"] == {"names": ["amd-metrics-exporter", "gpuagent"]}
    profiles = config["gpu-config-profiles"]
    assert set(profiles) == {"cpx-nps4-4gpu", "cpx-nps4-8gpu"}
    assert profiles["cpx-nps4-8gpu"] == {
        "skippedGPUs": {"ids": []},
        "profiles": [{"computePartition": "CPX", "memoryPartition": "NPS4", "numGPUsAssigned": 8}],
    }
    for name, body in profiles.items():
        gpus = 4 if name.endswith("4gpu") else 8
        entries = [(p["computePartition"], p["memoryPartition"], p["numGPUsAssigned"]) for p in body["profiles"]]
        assert dcm_profile_problems(entries, gpus, body["skippedGPUs"]["ids"]) == []
    labels = summary(plan)["nodeLabels"]
    assert labels["small-000"] == {DCM_LABEL: "cpx-nps4-4gpu"} and labels["mi300x-003"] == {DCM_LABEL: "cpx-nps4-8gpu"}


def test_fewest_nodes_for_a_demand() -> None:
    assert nodes_needed("mi300x", {"cpx": 40, "spx": 3}, 8) == 2
    assert nodes_needed("mi300x", {"cpx": 65}, 8) == 2
    with pytest.raises(UserError, match="qpx is not among the modes planned here"):
        nodes_needed("mi300x", {"qpx": 1}, 8)
    assert nodes_needed("mi300x", {"qpx": 33}, 8, dcm_only=False) == 2
    assert mode("mi300x", "QPX", "NPS1").partitions == 4


def test_the_emitted_configmap_reads_like_the_operators_example() -> None:
    """The GPU Operator documentation's example ConfigMap: the same names, keys and entry fields as ours."""
    real = yaml.safe_load((Path(__file__).parent / "data" / "amd-dcm-configmap.yaml").read_text())
    ours = dcm_configmap(plan_amd(cluster(mi300x=2), {"cpx_nps4": 64, "spx": 8}))
    assert ours["metadata"] == real["metadata"] and set(ours["data"]) == set(real["data"]) == {"config.json"}
    theirs, mine = json.loads(real["data"]["config.json"]), json.loads(ours["data"]["config.json"])
    assert set(theirs) <= set(mine)
    assert {json.dumps(p, sort_keys=True) for p in theirs["gpu-config-profiles"].values()} == {
        json.dumps(p, sort_keys=True) for p in mine["gpu-config-profiles"].values()
    }  # CPX+NPS4 and SPX+NPS1 on 8 GPUs: the example's two profiles, entry for entry
