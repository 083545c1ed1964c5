"""Accelerators of three vendors in one cluster: NVIDIA H100, AMD MI300X and Intel Gaudi 3 nodes as kubectl prints
them, pods made by kubectl, each landing on its own vendor's nodes; gangs, quotas and scores per vendor."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from gpufleet.errors import ParseError
from gpufleet.model import Gang, GpuRequest, GpuSharing, Pod
from gpufleet.sched.framework.queues import QueueBook, QueueSpec
from gpufleet.sched.framework.scheduler import Scheduler
from gpufleet.sched.framework.snapshot import parse_node, parse_pod, pod_info
from gpufleet.sched.framework.types import Placement
from tests.sched.k8s_objects import amd_node, gaudi_node, knode, kpod, kubectl_pod, pod, snap

Q = "kueue.x-k8s.io/queue-name"
GROUP = "scheduling.x-k8s.io/pod-group"


def mixed() -> list[dict[str, object]]:
    return [knode("h100-0"), knode("h100-1"), amd_node("mi300x-0"), amd_node("mi300x-1"),
            gaudi_node("gaudi3-0"), gaudi_node("gaudi3-1")]  # fmt: skip


def test_nodes_of_each_vendor_read_from_their_labels_and_capacity() -> None:
    amd = parse_node(amd_node("m", product="Instinct_MI300X"))
    assert (amd.node.gpu_vendor, amd.node.gpu_model, len(amd.node.gpus)) == ("amd", "mi300x", 8)
    assert amd.allocatable["amd.com/gpu"] == 8 and amd.node.gpu_resource == "amd.com/gpu"
    assert set(amd.node.gpus[0].nvlink_peers) == set(range(1, 8))  # one XGMI mesh
    oam = parse_node(amd_node("o", product="Instinct_MI300X_OAM"))
    assert oam.node.gpu_model == "mi300x"
    gaudi = parse_node(gaudi_node("g"))
    assert (gaudi.node.gpu_vendor, gaudi.node.gpu_model, len(gaudi.node.gpus)) == ("intel", "gaudi3", 8)
    # without the driver Gaudi feature discovery leaves device.type empty: the PCI id still names the model
    bare = parse_node(gaudi_node("g2", device_type="", device_id="1020"))
    assert bare.node.gpu_model == "gaudi2"
    # a node whose GPUs disagree carries one amd.com/gpu.product-name.<name> key per name (no plain key)
    two = amd_node("t")
    labels = two["metadata"]["labels"]  # type: ignore[index]
    del labels["amd.com/gpu.product-name"], labels["beta.amd.com/gpu.product-name"]
    labels["amd.com/gpu.product-name.Instinct_MI325X"] = "8"
    assert parse_node(two).node.gpu_model == "mi325x"


def test_mixed_naming_partitions_are_logical_gpus_of_the_node() -> None:
    info = parse_node(amd_node("cpx", resources={"amd.com/cpx_nps4": 64}, partition="cpx_nps4"))
    assert len(info.node.gpus) == 64 and info.allocatable["amd.com/cpx_nps4"] == 64
    small = parse_pod(kpod("infer", gpus=1, gpu_resource="amd.com/cpx_nps4"))
    assert small.pod.gpu == GpuRequest(GpuSharing.mig, count=1, mig_profile="cpx_nps4", vendor="amd")
    s = snap(knode("h100-0"), amd_node("cpx", resources={"amd.com/cpx_nps4": 64}, partition="cpx_nps4"))
    sched = Scheduler.from_snapshot(s)
    placed = [sched.schedule_one(parse_pod(kpod(f"i{k}", gpus=1, gpu_resource="amd.com/cpx_nps4"))) for k in range(64)]
    assert all(isinstance(p, Placement) and p.node == "cpx" for p in placed)
    over = sched.schedule_one(parse_pod(kpod("i64", gpus=1, gpu_resource="amd.com/cpx_nps4")))
    assert not isinstance(over, Placement)
    assert "1 Insufficient amd.com/cpx_nps4" in over.message
    assert "1 node(s) had NVIDIA accelerators, not the AMD accelerators the pod requests (amd.com/cpx_nps4)" in (
        over.message
    )


def test_pods_made_by_kubectl_land_on_their_own_vendors_nodes(tmp_path: Path) -> None:
    pods = [
        kubectl_pod(tmp_path, "train-nv", "nvidia.com/gpu=8,cpu=16,memory=64Gi"),
        kubectl_pod(tmp_path, "train-amd", "amd.com/gpu=8,cpu=16,memory=64Gi"),
        kubectl_pod(tmp_path, "train-gaudi", "habana.ai/gaudi=8,cpu=16,memory=64Gi"),
        kubectl_pod(tmp_path, "infer-amd", "amd.com/gpu=2,cpu=4,memory=16Gi"),
    ]
    for p in pods:
        kubernetes_validate.validate(p, "1.31", strict=True)
    s = snap(*mixed(), *pods)
    assert {p.pod.name: p.pod.gpu.vendor for p in s.pods} == {
        "train-nv-0": "nvidia", "train-amd-0": "amd", "train-gaudi-0": "intel", "infer-amd-0": "amd",
    }  # fmt: skip
    result = Scheduler.from_snapshot(s).plan(s.pending("gpufleet"), s.gangs, preemption=False)
    where = {p.pod: p.node for p in result.placements}
    assert where["default/train-nv-0"].startswith("h100")
    assert where["default/train-amd-0"].startswith("mi300x") and where["default/infer-amd-0"].startswith("mi300x")
    assert where["default/train-gaudi-0"].startswith("gaudi3")
    # the big AMD pod fills one MI300X node: the small one takes the other, never an H100 or a Gaudi
    assert where["default/infer-amd-0"] != where["default/train-amd-0"]


def test_a_pod_never_spills_to_another_vendor_and_the_message_names_both() -> None:
    s = snap(*mixed())
    sched = Scheduler.from_snapshot(s)
    for i in range(2):
        assert sched.schedule_one(pod(f"amd{i}", gpus=8, gpu_resource="amd.com/gpu")).node.startswith("mi300x")  # type: ignore[union-attr]
    third = sched.schedule_one(pod("amd2", gpus=8, gpu_resource="amd.com/gpu"))
    assert not isinstance(third, Placement)  # 16 NVIDIA GPUs and 16 Gaudis are free, and stay so
    assert third.message == (
        "0/6 nodes are available: 2 Insufficient amd.com/gpu, "
        "2 node(s) had Intel Gaudi accelerators, not the AMD accelerators the pod requests (amd.com/gpu), "
        "2 node(s) had NVIDIA accelerators, not the AMD accelerators the pod requests (amd.com/gpu)."
    )
    gaudi = sched.schedule_one(pod("g", gpus=4, gpu_resource="habana.ai/gaudi"))
    assert isinstance(gaudi, Placement) and gaudi.node.startswith("gaudi3") and len(gaudi.gpus) == 4
    # a CPU-only pod may go anywhere; a pod asking for two vendors' devices fits no accelerator node
    both = parse_pod(kpod("both", resources={"limits": {"amd.com/gpu": "1", "nvidia.com/gpu": "1"}}))
    fail = sched.schedule_one(both)
    assert not isinstance(fail, Placement)
    assert "not the AMD accelerators and NVIDIA accelerators the pod requests" in fail.message


def test_fractional_amd_and_gaudi_requests_are_refused_with_the_vendors_fix() -> None:
    with pytest.raises(ParseError) as err:
        parse_pod(kpod("half", gpus="0.5", gpu_resource="amd.com/gpu"))
    assert "must be an integer" in err.value.message and "amd.com/cpx_nps4" in (err.value.fix or "")
    with pytest.raises(ParseError) as err:
        parse_pod(kpod("half", gpus="500m", gpu_resource="habana.ai/gaudi"))
    assert "Gaudi" in (err.value.fix or "")


def test_an_amd_gang_never_spans_to_nvidia_nodes() -> None:
    s = snap(*mixed())
    sched = Scheduler.from_snapshot(s)
    members = [pod(f"g{i}", gpus=8, gpu_resource="amd.com/gpu", labels={GROUP: "g"}) for i in range(3)]
    result = sched.plan(members, {"default/g": Gang("default/g", 3)}, preemption=False)
    assert result.placements == [] and len(result.failures) == 3  # two AMD nodes hold two of the three
    assert not sched.state.placed
    two = [pod(f"h{i}", gpus=8, gpu_resource="amd.com/gpu", labels={GROUP: "h"}) for i in range(2)]
    done = sched.plan(two, {"default/h": Gang("default/h", 2)}, preemption=False)
    assert sorted(p.node for p in done.placements) == ["mi300x-0", "mi300x-1"]


def test_quota_is_counted_per_vendor_resource() -> None:
    s = snap(*mixed())
    sched = Scheduler.from_snapshot(s)
    book = QueueBook.of(
        [
            QueueSpec(name="rocm", guaranteed={"amd.com/gpu": 8}, borrowing=False),
            QueueSpec(name="mixed", guaranteed={"nvidia.com/gpu": 8, "amd.com/gpu": 8}),
            QueueSpec(name="cuda", guaranteed={"nvidia.com/gpu": 16}),
        ]
    )
    assert {"nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"} <= set(book.resources)
    first = sched.plan([pod("r0", gpus=8, gpu_resource="amd.com/gpu", labels={Q: "rocm"})], {}, queues=book)
    assert len(first.placements) == 1 and book.used("rocm", "amd.com/gpu") == 8
    assert book.used("rocm", "nvidia.com/gpu") == 0
    more = sched.plan([pod("r1", gpus=1, gpu_resource="amd.com/gpu", labels={Q: "rocm"})], {}, queues=book)
    assert more.failures[0].message == "queue rocm is at its guaranteed 8 amd.com/gpu and may not borrow"
    nvidia = sched.plan([pod("r2", gpus=1, labels={Q: "rocm"})], {}, queues=book)
    assert nvidia.failures[0].message == "queue rocm is at its guaranteed 0 nvidia.com/gpu and may not borrow"
    # `mixed` may borrow, but only AMD quota left idle: none is (rocm holds 8, mixed's own 8 are its guarantee)
    amd = [pod(f"m{i}", gpus=8, gpu_resource="amd.com/gpu", labels={Q: "mixed"}) for i in range(2)]
    second = sched.plan(amd, {}, queues=book)
    assert len(second.placements) == 1
    assert second.failures[0].message == "queue mixed: no idle amd.com/gpu quota left to borrow"
    # ... while cuda's idle NVIDIA quota is there to borrow for NVIDIA GPUs
    nv = [pod(f"n{i}", gpus=8, labels={Q: "mixed"}) for i in range(2)]
    third = sched.plan(nv, {}, queues=book)
    assert len(third.placements) == 2 and book.is_borrowing("mixed")
    assert all(p.node.startswith("h100") for p in third.placements)


def test_model_pods_ask_for_their_vendors_resource() -> None:
    amd = pod_info(Pod("a", cpu_milli=1000, gpu=GpuRequest(count=2, vendor="amd")))
    assert amd.requests == {"cpu": 1000, "amd.com/gpu": 2}
    gaudi = pod_info(Pod("g", gpu=GpuRequest(count=8, vendor="intel")))
    assert gaudi.requests == {"habana.ai/gaudi": 8}
    part = pod_info(Pod("p", gpu=GpuRequest(GpuSharing.mig, count=1, mig_profile="cpx_nps4", vendor="amd")))
    assert part.requests == {"amd.com/cpx_nps4": 1}
    mig = pod_info(Pod("m", gpu=GpuRequest(GpuSharing.mig, count=1, mig_profile="1g.10gb")))
    assert mig.requests == {"nvidia.com/mig-1g.10gb": 1}


def test_a_node_is_scored_on_its_own_vendors_devices() -> None:
    s = snap(amd_node("mi300x-0"), amd_node("mi300x-1"), knode("h100-0"))
    sched = Scheduler.from_snapshot(s)
    assert sched.schedule_one(pod("a", gpus=4, gpu_resource="amd.com/gpu")).node == "mi300x-0"  # type: ignore[union-attr]
    # binpack: the half-full MI300X node scores higher than the empty one for the next AMD pod
    ranked = sched.explain(pod("b", gpus=2, gpu_resource="amd.com/gpu")).feasible
    assert [n for n, _ in ranked] == ["mi300x-0", "mi300x-1"] and ranked[0][1] > ranked[1][1]
