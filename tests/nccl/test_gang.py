"""A gang's all-reduce where it landed: the NCCL model's figure under one leaf, more latency per switch crossed and
the leaves' oversubscription on the cross-leaf part."""

from __future__ import annotations

import pytest

from gpufleet.nccl.gang import SWITCH_US, inter_node_steps, predict_gang_allreduce
from gpufleet.nccl.predict import predict_one
from gpufleet.nccl.topology import Topology

H100 = {"gpu": "h100-sxm", "gpus_per_node": 8, "nics_per_node": 8, "nic_gbps": 400.0}


def test_inter_node_steps_follow_the_algorithm() -> None:
    assert inter_node_steps("Ring", 4) == 6 and inter_node_steps("Tree", 4) == 4 and inter_node_steps("Tree", 5) == 6
    assert inter_node_steps("CollNetDirect", 16) == 2 and inter_node_steps("Ring", 1) == 0


def test_under_one_leaf_it_is_the_nccl_models_prediction() -> None:
    one_leaf = predict_gang_allreduce(nodes=4, nbytes=1 << 30, switch_hops=1, oversubscription=3.0, **H100)  # type: ignore[arg-type]
    base = predict_one(Topology(nodes=4, **H100), "allreduce", 1 << 30)  # type: ignore[arg-type]
    assert one_leaf.time_us == base.time_us == one_leaf.one_leaf_time_us
    assert one_leaf.oversubscription == 1.0 and one_leaf.bandwidth_share == 1.0  # one leaf: no uplink on the path


def test_hops_add_latency_per_step_and_oversubscription_slows_the_bytes() -> None:
    small = predict_gang_allreduce(nodes=8, nbytes=64 << 10, switch_hops=5, **H100)  # type: ignore[arg-type]
    assert small.extra_latency_us == pytest.approx(inter_node_steps(small.algo, 8) * 4 * SWITCH_US)
    assert small.time_us == pytest.approx(small.one_leaf_time_us + small.extra_latency_us)
    big = predict_gang_allreduce(nodes=8, nbytes=1 << 30, switch_hops=3, oversubscription=2.0, **H100)  # type: ignore[arg-type]
    flat = predict_gang_allreduce(nodes=8, nbytes=1 << 30, switch_hops=3, oversubscription=1.0, **H100)  # type: ignore[arg-type]
    assert big.bandwidth_share == 0.5 and big.busbw_gbps < 0.6 * flat.busbw_gbps
    assert flat.time_us == pytest.approx(flat.one_leaf_time_us + flat.extra_latency_us)
