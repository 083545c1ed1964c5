"""Trace replay over a cluster of three vendors: pods that name a vendor's resource stay on that vendor's nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.sched.replay.openb import GPU_NODE_FILE, load_nodes, load_pods, model_resource
from gpufleet.sched.replay.policies import POLICIES
from gpufleet.sched.replay.runner import replay
from gpufleet.sched.replay.state import PodRequest, ReplayCluster
from tests.clirun import gpufleet

NODES = """sn,cpu_milli,memory_mib,gpu,model
h100-0,96000,786432,8,h100-sxm
mi300x-0,96000,786432,8,mi300x
mi300x-1,96000,786432,8,mi300x
gaudi3-0,96000,786432,8,gaudi3
cpu-0,64000,262144,0,
"""


def trace(tmp: Path, *, with_resource: bool = True) -> Path:
    """28 GPUs' worth of AMD pods (whole, half and two-GPU ones) for 16 AMD GPUs, 8 NVIDIA pods, 4 Gaudi pods and
    2 CPU pods, with or without the gpu_resource column."""
    (tmp / GPU_NODE_FILE).write_text(NODES)
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos" + (",gpu_resource" if with_resource else "")]

    def add(name: str, gpus: int, milli: int, resource: str) -> None:
        rows.append(f"{name},4000,16384,{gpus},{milli},,LS" + (f",{resource}" if with_resource else ""))

    for i in range(12):
        add(f"amd-whole-{i:02d}", 1, 1000, "amd.com/gpu")
    for i in range(16):
        add(f"amd-half-{i:02d}", 1, 500, "amd.com/gpu")  # 8 GPUs' worth
    for i in range(4):
        add(f"amd-pair-{i:02d}", 2, 1000, "amd.com/gpu")  # 8 more: 28 GPUs asked of 16
    for i in range(8):
        add(f"nv-{i:02d}", 1, 1000, "nvidia.com/gpu")
    for i in range(4):
        add(f"gaudi-{i:02d}", 1, 1000, "habana.ai/gaudi")
    for i in range(2):
        add(f"cpu-{i:02d}", 0, 0, "")
    path = tmp / "openb_pod_list_vendors.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_node_models_resolve_to_their_vendors_resource() -> None:
    assert model_resource("mi300x") == "amd.com/gpu"
    assert model_resource("gaudi3") == "habana.ai/gaudi"
    assert model_resource("h100-sxm") == "nvidia.com/gpu"
    assert model_resource("V100M16") == "nvidia.com/gpu"  # the trace's own code
    assert model_resource("G9") == "nvidia.com/gpu"  # a code the catalog does not know is the trace's


def test_pod_lists_carry_the_resource_and_refuse_an_unknown_one(tmp_path: Path) -> None:
    pods = load_pods(trace(tmp_path))
    assert pods.resource(0) == "amd.com/gpu" and pods.resource(len(pods) - 1) == ""
    assert load_pods(trace(tmp_path, with_resource=False)).gpu_resource == ()
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_resource\np,1000,10,1,1000,amd.com/gpus\n")
    with pytest.raises(ParseError) as err:
        load_pods(bad)
    assert "bad.csv:2: gpu_resource 'amd.com/gpus' is not a vendor's GPU resource" in err.value.message
    assert "habana.ai/gaudi" in (err.value.fix or "")


def test_feasibility_and_the_reason_name_both_resources(tmp_path: Path) -> None:
    trace(tmp_path)
    cluster = ReplayCluster.from_nodes(load_nodes(tmp_path / GPU_NODE_FILE))
    amd = PodRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000, gpu_resource="amd.com/gpu")
    assert [cluster.names[i] for i in cluster.feasible(amd).nonzero()[0]] == ["mi300x-0", "mi300x-1"]
    assert cluster.feasible(PodRequest(cpu_milli=1000, num_gpu=1, gpu_milli=1000)).sum() == 4  # any vendor
    assert cluster.unschedulable_message(amd) == (
        "2/5 nodes are available: 1 node(s) had habana.ai/gaudi, not amd.com/gpu, "
        "1 node(s) had nvidia.com/gpu, not amd.com/gpu, 1 node(s) had no amd.com/gpu."
    )


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_keeps_pods_to_their_vendor(tmp_path: Path, policy: str) -> None:
    pods = trace(tmp_path)
    nodes = load_nodes(tmp_path / GPU_NODE_FILE)
    kept = replay(nodes, load_pods(pods), policy, seed=7, tune=0)
    assert kept.pods == 46
    # AMD pods ask for 28 GPUs of the 16 AMD ones; the 8 NVIDIA and 4 Gaudi pods fit on their own nodes, so at most
    # 12 + 16 of the 32 GPUs end up allocated, whatever the H100 and Gaudi nodes have left
    allocated = kept.alloc_curve[-1] / 100 * 32
    assert 12 + 8 <= round(allocated, 6) <= 28 and kept.failed >= 10
    spill = replay(nodes, load_pods(trace(tmp_path, with_resource=False)), policy, seed=7, tune=0)
    assert spill.alloc_curve[-1] / 100 * 32 > 28  # without the column the same pods spill onto other vendors' GPUs


def test_the_replay_command_runs_a_vendor_trace(tmp_path: Path) -> None:
    trace(tmp_path)
    run = gpufleet("sched", "replay", "--trace-dir", str(tmp_path), "--pods", "vendors", "--policy", "best-fit",
                   "--tune", "0", "--seed", "3", "-o", "json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["pods"] == 46 and data["failed"] >= 10
