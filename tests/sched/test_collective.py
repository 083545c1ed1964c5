"""A placed gang's predicted all-reduce in a three-tier fabric: one leaf group, over a spine, over the cores."""

from __future__ import annotations

import pytest

from gpufleet.model import Cluster, Gang, GpuRequest, Pod
from gpufleet.sched.framework.collective import gang_allreduce
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import pod_info
from gpufleet.spec.builder import build_cluster
from gpufleet.spec.cluster_spec import ClusterBody


def _three_tier() -> Scheduler:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": 16, "gpu": {"model": "h100-sxm", "count": 8}, "nics": {"count": 2}}],
            "fabric": {"leafRadix": 8, "nodesPerScalableUnit": 4, "tiers": 3},
        }
    )
    return Scheduler.from_cluster(build_cluster("three", body))


def test_the_same_gang_size_costs_more_the_farther_it_lands() -> None:
    sched = _three_tier()
    results = {}
    for name, n in (("near", 4), ("far", 12)):
        members = [pod_info(Pod(f"{name}-{i}", gpu=GpuRequest(count=8), gang=name)) for i in range(n)]
        landing = sched.plan(members, {name: Gang(name, n)}).landings[name]
        results[name] = (landing, gang_allreduce(sched.state, landing, members, 1 << 30))
    near, (near_ar, _) = results["near"]
    far, (far_ar, _) = results["far"]
    assert near.switch_hops == 1 and far.switch_hops == 5
    assert near_ar is not None and far_ar is not None
    # two 400 Gb/s rails per node, as the built fabric cables them; the fabric is non-blocking (1:1)
    assert (near_ar.nodes, near_ar.gpus_per_node, near_ar.switch_hops) == (4, 8, 1)
    assert near_ar.time_us == near_ar.one_leaf_time_us and near_ar.extra_latency_us == 0
    assert far_ar.oversubscription == 1.0 and far_ar.bandwidth_share == 1.0
    # a ring over 12 nodes: 22 inter-node steps, each four switches more than under one leaf
    assert far_ar.algo == "Ring" and far_ar.extra_latency_us == pytest.approx(22 * 4 * 0.3)
    assert far_ar.time_us > far_ar.one_leaf_time_us


def test_no_prediction_without_a_fabric_says_why() -> None:
    sched = Scheduler.from_cluster(_without_fabric())
    members = [pod_info(Pod(f"g-{i}", gpu=GpuRequest(count=8), gang="g")) for i in range(2)]
    landing = sched.plan(members, {"g": Gang("g", 2)}).landings["g"]
    prediction, why = gang_allreduce(sched.state, landing, members, 1 << 20)
    assert prediction is None and "--fabric" in why


def _without_fabric() -> Cluster:
    body = ClusterBody.model_validate(
        {
            "nodePools": [{"name": "n", "count": 2, "gpu": {"model": "h100-sxm", "count": 8}}],
            "fabric": {"topology": "none"},
        }
    )
    return build_cluster("bare", body)
