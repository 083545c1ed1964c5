"""What the agent's attribution asks its readers for, and when: the kubelet's pod-resources List only when the node
may have changed (a process started or ended, the pod list changed, or the reader's keep_s passed), the pod list's
verdict on ended pods and the join of holders and processes kept while their inputs stay."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.sources.workload.podresources import PodResourcesReader
from tests.agent.test_attribution_matrix import sliced, whole
from tests.attribution_node import check, running

KEEP_S = int(PodResourcesReader.keep_s)


def test_a_steady_node_asks_pod_resources_once_per_keep_s_and_joins_once() -> None:
    case = sliced(4, 2, 4)
    with running(case) as node:
        node.attribution.clock = lambda: float(node.tick)
        for _ in range(KEEP_S):
            assert check(node.collect(), case) == []
        assert node.kubelet.calls["List"] == 1
        assert node.attribution._attributor is not None and node.attribution._attributor.joins == 1
        assert check(node.collect(), case) == []
        assert node.kubelet.calls["List"] == 2 and node.attribution.allotment_reads == 2


def test_a_process_that_starts_or_ends_has_pod_resources_asked_at_once() -> None:
    full = sliced(4, 2, 4)
    fewer = replace(full, pods=full.pods[:-1], procs=full.procs[:-1])
    with running(full) as node:
        node.attribution.clock = lambda: float(node.tick)
        node.collect()
        node.collect()
        node.update(fewer)
        assert check(node.collect(), fewer) == []
        assert node.kubelet.calls["List"] == 2
        node.update(full)
        assert check(node.collect(), full) == []
        assert node.kubelet.calls["List"] == 3


def test_a_pod_given_a_gpu_it_runs_nothing_on_shows_within_keep_s() -> None:
    """No process tells of it: the pod list's next read or the reader's keep_s does."""
    idle = whole(8, idle=1)
    before = replace(idle, pods=idle.pods[:-1])
    with running(before) as node:
        node.attribution.clock = lambda: float(node.tick)
        assert check(node.collect(), before) == []
        node.update(idle)
        seen = None
        for waited in range(1, KEEP_S + 1):
            frame = node.collect()
            if check(frame, idle) == []:
                seen = waited
                break
            assert check(frame, before) == []  # the last answer, never a mix
        assert seen is not None and seen <= KEEP_S
