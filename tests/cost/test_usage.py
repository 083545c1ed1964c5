"""GPU time measured from hand-built range series: held, idle and unallocated hours, a gap that is nobody's time,
MIG slices priced as their share of a GPU, a pod replacing another, duplicate series, nodes' idle and empty stretches
and the pools' peaks."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.cost.usage import grid_of, slice_fraction
from tests.cost.series import ALL, H100, gpu, held, run, util


def test_held_idle_and_unallocated_hours() -> None:
    a, b = gpu("n1", 0), gpu("n1", 1)
    usage = run(
        [util(a, [90.0] * 30 + [2.0] * 30), util(b, [0.0] * 60)],
        [held(a, ALL, "train-0-n1", "training", "train-0")],
        kinds={"train-0": "job"},
    )
    (job,) = usage.workloads
    assert (job.workload, job.namespace, job.kind, job.pods, job.peak_gpus) == ("train-0", "training", "job", 1, 1.0)
    (part,) = job.parts
    assert (part.node, part.model, part.gpu_hours, part.idle_gpu_hours, part.unknown_gpu_hours) == (
        "n1", H100, 1.0, 0.5, 0.0)  # fmt: skip
    assert part.busy_gpu_hours == pytest.approx(0.5 * 0.9 + 0.5 * 0.02)
    (cap,) = usage.capacity
    assert (cap.gpus, cap.held_gpu_hours, cap.idle_gpu_hours, cap.unallocated_gpu_hours) == (2.0, 1.0, 0.5, 1.0)
    (node,) = usage.nodes
    # the second half hour both GPUs were idle (one held at 2 %, one nobody's); never empty, one was held
    assert (node.covered_hours, node.idle_hours, node.empty_hours) == (1.0, 0.5, 0.0)
    assert node.idle_stretches_h == [0.5] and node.empty_stretches_h == []


def test_the_idle_threshold_is_the_callers() -> None:
    a = gpu("n1", 0)
    series = ([util(a, [8.0] * 60)], [held(a, ALL, "p", "ns")])
    assert run(*series).capacity[0].idle_gpu_hours == 1.0
    assert run(*series, idle_below=5.0).capacity[0].idle_gpu_hours == 0.0


def test_a_gap_in_the_data_is_nobodys_time() -> None:
    a = gpu("n1", 0)
    present = [True] * 20 + [False] * 20 + [True] * 20  # the agent was silent for 20 minutes
    values = [95.0 if p else np.nan for p in present]
    usage = run([util(a, values)], [held(a, present, "p", "ns", "w")])
    assert usage.workloads[0].parts[0].gpu_hours == pytest.approx(40 / 60, abs=1e-3)
    cap = usage.capacity[0]
    assert (cap.unallocated_gpu_hours, cap.idle_gpu_hours) == (0.0, 0.0)
    assert usage.nodes[0].covered_hours == pytest.approx(40 / 60, abs=1e-3)
    held_line = usage.timeline.held
    assert held_line[25] is None and held_line[5] == 1.0  # the chart shows the gap as a gap


def test_held_without_a_reading_is_held_but_not_idle() -> None:
    a = gpu("n1", 0)
    usage = run([util(a, [1.0] * 30 + [np.nan] * 30)], [held(a, ALL, "p", "ns")])
    part = usage.workloads[0].parts[0]
    assert (part.gpu_hours, part.idle_gpu_hours, part.unknown_gpu_hours) == (1.0, 0.5, 0.5)
    assert usage.nodes[0].idle_hours == 0.5  # an unread held GPU may be busy: the node is not called idle


def test_mig_slices_count_as_their_share_and_replace_their_gpu() -> None:
    parent = gpu("n1", 0)
    small = gpu("n1", 0, gi="1", profile="1g.10gb")
    large = gpu("n1", 0, gi="2", profile="3g.40gb")
    eng = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    usage = run(
        [util(parent, [40.0] * 60)],  # a MIG GPU's own series would count its capacity again
        [held(small, ALL, "notebook-7", "research")],
        engine=[util(small, [0.0] * 60, eng), util(large, [0.8] * 60, eng)],
    )
    assert slice_fraction("1g.10gb", H100) == pytest.approx(1 / 7)
    assert usage.gpus == pytest.approx(4 / 7, abs=1e-3)
    by_gi = {m.gi_id: m for m in usage.mig}
    assert set(by_gi) == {"1", "2"}
    s = by_gi["1"]
    assert (s.profile, s.workload, s.namespace, s.held_hours, s.idle_hours) == ("1g.10gb", "notebook-7", "research",
                                                                                 1.0, 1.0)  # fmt: skip
    assert s.fraction == pytest.approx(1 / 7, abs=1e-3) and s.util_avg_pct == 0.0
    assert by_gi["2"].unallocated_hours == 1.0 and by_gi["2"].workload == ""
    (part,) = usage.workloads[0].parts
    assert part.gpu_hours == pytest.approx(1 / 7, abs=1e-3)  # a seventh of a GPU for an hour
    assert usage.capacity[0].unallocated_gpu_hours == pytest.approx(3 / 7, abs=1e-3)


def test_a_pod_that_replaces_another_takes_the_steps_they_share() -> None:
    a = gpu("n1", 0)
    old = [i < 40 for i in range(60)]  # the old pod's series lingers 10 minutes (the store's lookback)
    new = [i >= 30 for i in range(60)]
    usage = run([util(a, [50.0] * 60)], [held(a, new, "web-b", "inference", "web"), held(a, old, "old-a", "batch")])
    hours = {w.workload: w.parts[0].gpu_hours for w in usage.workloads}
    assert hours == {"old-a": 0.5, "web": 0.5}
    assert usage.capacity[0].held_gpu_hours == 1.0


def test_a_gpu_reported_twice_counts_once() -> None:
    a = gpu("n1", 0)
    twice = {**a, "instance": "10.0.0.7:9400", "job": "gpufleet-agent"}  # the same GPU from a second scrape
    utils = [util(a, [70.0] * 60), util(twice, [70.0] * 60)]
    usage = run(utils, [held(a, ALL, "p", "ns"), held(twice, ALL, "p", "ns")])
    assert usage.gpus == 1.0
    assert usage.capacity[0].held_gpu_hours == 1.0 and usage.workloads[0].peak_gpus == 1.0


def test_workload_kinds_and_names() -> None:
    a, b, c = gpu("n1", 0), gpu("n1", 1), gpu("n1", 2)
    usage = run(
        [util(g, [50.0] * 60) for g in (a, b, c)],
        [
            held(a, ALL, "chat-0", "inference", "chat"),
            held(b, ALL, "reserved-3", "default"),
            held(c, ALL, "etl-x", "batch", "etl"),
        ],
        kinds={"chat": "service"},
    )
    kinds = {(w.namespace, w.workload): w.kind for w in usage.workloads}
    assert kinds == {("inference", "chat"): "service", ("default", "reserved-3"): "pod", ("batch", "etl"): "workload"}


def test_empty_nodes_pools_and_peaks() -> None:
    busy = [gpu("n1", i) for i in range(8)]
    spare = [gpu("n2", i) for i in range(8)]
    half = [i < 30 for i in range(60)]
    usage = run(
        [util(g, [80.0] * 60) for g in busy] + [util(g, [0.0] * 60) for g in spare],
        [held(g, ALL, "train-n1", "training", "train") for g in busy]
        + [held(g, half, "train-n2", "training", "train") for g in spare[:4]],
        pools={"n1": "h100-pool", "n2": "h100-pool"},
        labels={"n2": {"karpenter.sh/capacity-type": "spot"}},
    )
    nodes = {n.node: n for n in usage.nodes}
    assert (nodes["n2"].idle_hours, nodes["n2"].empty_hours, nodes["n2"].empty_stretches_h) == (1.0, 0.5, [0.5])
    assert nodes["n2"].labels == {"karpenter.sh/capacity-type": "spot"}
    assert (nodes["n1"].idle_hours, nodes["n1"].peak_held_gpus) == (0.0, 8.0)
    (pool,) = usage.pools
    assert (pool.pool, pool.nodes, pool.gpus, pool.peak_nodes_in_use, pool.peak_gpus_held) == (
        "h100-pool", 2, 16.0, 2, 12.0)  # fmt: skip
    (train,) = usage.workloads
    assert train.peak_gpus == 12.0 and train.pods == 2


def test_nothing_reported_is_said() -> None:
    usage = run([], [])
    assert usage.gpus == 0 and usage.workloads == [] and usage.nodes == []
    assert usage.notes and set(usage.timeline.held) == {None}


def test_the_grid_covers_the_period_in_whole_steps() -> None:
    t = grid_of(0.0, 600.0, 60.0)
    assert t[0] == 60.0 and t[-1] == 600.0 and t.size == 10
    assert grid_of(0.0, 0.0, 60.0).size == 0
