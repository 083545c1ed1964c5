"""The validation verdicts on real outputs: vectorAdd's (tests/deploy/data/validate, NVIDIA's docs), nvidia-smi's
table and its failures (tests/corpus, tests/captures/nvsmi_lines), nccl-tests' all_reduce_perf runs (tests/scored:
a healthy 8-GPU H100 node, a 4-GPU A100 node with P2P disabled), each between the markers the step's script prints;
and pods and events as kubectl prints them (tests/integrations/kubernetes/data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.deploy.validate import MARK
from gpufleet.deploy.validate_judge import (
    finished,
    gpu_model,
    judge_cuda,
    judge_nccl,
    judge_output,
    judge_saved,
    judge_step,
    pod_problem,
    reports,
    sections,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "validate"
SMI_TABLE = (ROOT / "corpus" / "nvsmi_table_01_a100_stas00.txt").read_text()
SMI_LINES = ROOT / "captures" / "nvsmi_lines"
VECTORADD = (DATA / "vectoradd_pass.txt").read_text()
NCCL = ROOT / "scored" / "round2" / "nccltests"
K8S = ROOT / "integrations" / "kubernetes" / "data"


def marked(name: str, text: str, code: int) -> str:
    return f"{MARK} {name}\n{text.rstrip()}\n{MARK} {name} exit {code}\n"


def cuda_log(smi: str = SMI_TABLE, smi_code: int = 0, vector: str = VECTORADD, vector_code: int = 0) -> str:
    where = f"{MARK} where node=dgx-004 gpus=0\n"
    return where + marked("nvidia-smi", smi, smi_code) + marked("vectorAdd", vector, vector_code)


def test_sections_split_the_output_and_keep_each_exit_code() -> None:
    found = sections(cuda_log(vector_code=1))
    assert list(found) == ["nvidia-smi", "vectorAdd"]
    assert found["vectorAdd"].lines[-1] == "Done" and found["vectorAdd"].exit_code == 1
    assert "NVIDIA A100 80GB PCIe" in found["nvidia-smi"].text and found["nvidia-smi"].exit_code == 0
    cut = sections(f"{MARK} vectorAdd\n[Vector addition of 50000 elements]\n")
    assert cut["vectorAdd"].exit_code is None


def test_a_working_gpu_passes_with_what_nvidia_smi_showed() -> None:
    result = judge_cuda("dgx-004", cuda_log())
    assert result.status == "PASS", result
    assert "1 GPU (NVIDIA A100 80GB PCIe), driver 550.90.12, CUDA 12.4" in result.reason
    assert "Test PASSED" in result.reason


@pytest.mark.parametrize(
    ("capture", "said"),
    [
        ("no_driver.txt", "communicate with the NVIDIA driver"),
        ("mismatch.txt", "mismatch"),
        ("gpu_is_lost.txt", "lost"),
    ],
)
def test_nvidia_smi_failing_fails_the_node_with_its_reason(capture: str, said: str) -> None:
    text = (SMI_LINES / capture).read_text()
    result = judge_cuda("dgx-004", cuda_log(smi=text, smi_code=9, vector="", vector_code=1))
    assert result.status == "FAIL"
    assert result.reason.startswith("nvidia-smi")
    assert said.lower() in (result.reason + " ".join(result.evidence)).lower(), result


def test_nvidia_smi_with_no_gpu_fails() -> None:
    text = (SMI_LINES / "no_devices.txt").read_text()
    result = judge_cuda("dgx-004", cuda_log(smi=text, smi_code=6))
    assert result.status == "FAIL" and "nvidia-smi" in result.reason


def test_nvidia_smi_missing_from_the_container_names_the_toolkit() -> None:
    result = judge_cuda("dgx-004", cuda_log(smi="sh: 1: nvidia-smi: not found", smi_code=127))
    assert result.status == "FAIL"
    assert result.reason.startswith("nvidia-smi not found where the step ran")
    assert "container toolkit" in result.reason


def test_vectoradd_without_test_passed_fails() -> None:
    # the sample's own failure line (vectorAdd.cu: "Failed to allocate device vector A (error code %s)!")
    failed = (
        "[Vector addition of 50000 elements]\n"
        "Failed to allocate device vector A (error code no CUDA-capable device is detected)!"
    )
    result = judge_cuda("dgx-004", cuda_log(vector=failed, vector_code=1))
    assert result.status == "FAIL"
    assert result.reason.startswith("vectorAdd failed: Failed to allocate device vector A")
    assert "(exit 1)" in result.reason
    cut = "\n".join(VECTORADD.splitlines()[:3])  # stopped before the check
    result = judge_cuda("dgx-004", cuda_log(vector=cut, vector_code=0))
    assert result.status == "FAIL" and result.reason == '"Test PASSED" missing from vectorAdd\'s output'


def test_a_step_that_ran_elsewhere_fails() -> None:
    result = judge_output("dgx-005", "cuda", 1, cuda_log())
    assert result.status == "FAIL" and result.reason == "the step ran on dgx-004, not on dgx-005"


def test_a_healthy_all_reduce_passes_against_the_model() -> None:
    log = marked("nccl-tests", (NCCL / "05_h100_8gpu_single_node_indented.txt").read_text(), 0)
    result = judge_nccl("dgx-004", log, 8)
    assert result.status == "PASS", result
    assert result.reason.startswith("all_reduce_perf on 8 GPUs: busbw avg 448.212 GB/s")
    assert "of the model's expectation" in result.reason


def test_bus_bandwidth_far_below_the_expected_fails() -> None:
    log = marked("nccl-tests", (NCCL / "04_dgx_a100_4gpu_p2p_disabled.txt").read_text(), 0)
    result = judge_nccl("dgx-a100", log, 4)
    assert result.status == "FAIL"
    assert result.reason.startswith("bus bandwidth far below the expected: bus bandwidth peaks at 5.2 GB/s")


def test_fewer_ranks_than_the_node_has_gpus_fails() -> None:
    # its header lists 8 ranks: on a 16-GPU node (an HGX-2, say) half the GPUs were left out
    log = marked("nccl-tests", (NCCL / "05_h100_8gpu_single_node_indented.txt").read_text(), 0)
    result = judge_nccl("hgx-2", log, 16)
    assert result.status == "FAIL" and result.reason == "all_reduce_perf ran on 8 of the node's 16 GPUs"
    # an excerpt without the header names no ranks: the node's count stands
    excerpt = marked("nccl-tests", (NCCL / "03_dgx_a100_4gpu_nvswitch.txt").read_text(), 0)
    assert judge_nccl("dgx-a100", excerpt, 4).reason.startswith("all_reduce_perf on 4 GPUs: busbw avg 222.066")


def test_all_reduce_perf_missing_or_silent_fails() -> None:
    missing = judge_nccl("n", marked("nccl-tests", "sh: 1: all_reduce_perf: not found", 127), 8)
    assert missing.status == "FAIL" and missing.reason.startswith("all_reduce_perf not found where the step ran")
    silent = judge_nccl("n", marked("nccl-tests", "Segmentation fault (core dumped)", 139), 8)
    assert silent.status == "FAIL" and silent.reason.startswith("all_reduce_perf failed: ")
    assert "Segmentation fault" in silent.reason
    quiet = judge_nccl("n", marked("nccl-tests", "", 1), 8)
    assert quiet.status == "FAIL" and quiet.reason == "all_reduce_perf printed no results (exit 1)"


def _items(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((K8S / name).read_text())["items"]
    return items


def test_an_unschedulable_pod_is_waited_for_then_reported() -> None:
    pod = next(p for p in _items("pods.json") if p["metadata"]["name"] == "train-0")
    assert pod_problem(pod, []) is not None and pod_problem(pod, []).startswith(  # type: ignore[union-attr]
        "unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu"
    )
    assert not finished(pod, [])  # the GPUs may free up (the cuda step ends, another job ends)
    result = judge_step("dgx-004", "nccl", 8, pod, [], "", timed_out=True)
    assert result.status == "FAIL" and result.reason.startswith("unschedulable: 0/4 nodes are available")


def test_failed_scheduling_events_say_why_when_the_pod_does_not() -> None:
    events = _items("events.json")
    pod = {"metadata": {"name": "train-0"}, "status": {"phase": "Pending"}}
    problem = pod_problem(pod, events)
    assert problem is not None and problem.startswith("unschedulable: ")
    newest = max(events, key=lambda e: e.get("lastTimestamp") or "")
    assert problem == f"unschedulable: {newest['message']}"


def _pulling(reason: str, message: str) -> dict[str, Any]:
    """A pod as kubectl prints it while the kubelet cannot pull its image (status.containerStatuses[].state)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpufleet-validate-x-cuda-dgx-004-abcde", "namespace": "default"},
        "spec": {
            "nodeName": "dgx-004",
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:nope"}],
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/k8s/cuda-sample:nope",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": reason, "message": message}},
                }
            ],
        },
    }


def test_an_image_that_cannot_be_pulled_fails_at_once() -> None:
    message = 'Back-off pulling image "nvcr.io/nvidia/k8s/cuda-sample:nope"'
    pod = _pulling("ImagePullBackOff", message)
    assert finished(pod, [])
    result = judge_step("dgx-004", "cuda", 1, pod, [], "")
    assert result.status == "FAIL" and result.reason == f"image pull failed (ImagePullBackOff): {message}"


def test_a_pod_the_kubelet_refused_is_reported_with_its_reason() -> None:
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
            "unhealthy devices nvidia.com/gpu, which is unexpected",
        },
    }
    result = judge_step("dgx-004", "cuda", 1, pod, [], "")
    assert result.status == "FAIL" and result.reason.startswith("UnexpectedAdmissionError: Pod was rejected")


def test_a_finished_pod_is_judged_by_its_log_and_the_node_by_all_its_steps() -> None:
    done = {"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}
    ok = judge_step("dgx-004", "cuda", 1, done, [], cuda_log())
    slow = judge_step(
        "dgx-004",
        "nccl",
        4,
        done,
        [],
        marked("nccl-tests", (NCCL / "04_dgx_a100_4gpu_p2p_disabled.txt").read_text(), 0),
    )
    by_node = reports([ok, slow])
    assert [(r.node, r.status) for r in by_node] == [("dgx-004", "FAIL")]
    assert [s["status"] for s in by_node[0].as_dict()["steps"]] == ["PASS", "FAIL"]


def test_saved_output_is_judged_by_where_it_says_it_ran() -> None:
    # `kubectl logs job/NAME > cuda.log`: the node from the step's where line, the step from its sections
    saved = judge_saved(cuda_log(), "cuda.log")
    assert (saved.node, saved.step, saved.status) == ("dgx-004", "cuda", "PASS")
    # the sbatch script's file: the GPUs it was given (Slurm's indices) are the GPUs all_reduce_perf must cover
    uuids = ",".join(f"GPU-{k:08x}-0000-0000-0000-000000000000" for k in range(16))
    nccl = f"{MARK} where node=hgx-2 gpus={uuids}\n" + marked(
        "nccl-tests", (NCCL / "05_h100_8gpu_single_node_indented.txt").read_text(), 0
    )
    result = judge_saved(nccl, "gpufleet-validate-hgx-2-nccl.out")
    assert (result.node, result.status) == ("hgx-2", "FAIL")
    assert result.reason == "all_reduce_perf ran on 8 of the node's 16 GPUs"
    # no where line: the file's name says which node and step; "all" says nothing of how many GPUs
    bare = marked("nccl-tests", (NCCL / "03_dgx_a100_4gpu_nvswitch.txt").read_text(), 0)
    result = judge_saved(f"{MARK} where node= gpus=all\n" + bare, "gpufleet-validate-dgx-a100-nccl.out")
    assert (result.node, result.step, result.status) == ("dgx-a100", "nccl", "PASS")
    assert result.reason.startswith("all_reduce_perf: busbw avg 222.066")
    stray = judge_saved("hello\n", "notes.txt")
    assert stray.status == "FAIL" and stray.reason.startswith("notes.txt holds no step output")


def test_a_job_past_its_deadline_is_reported_with_what_its_pod_waited_on() -> None:
    # the Job controller's condition when activeDeadlineSeconds passes (its pods are then deleted)
    job = {
        "metadata": {"name": "gpufleet-validate-ab12cd-nccl-dgx-004"},
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                 "message": "Job was active longer than specified deadline"}
            ]
        },
    }  # fmt: skip
    assert finished(None, [], job)
    pulling = {"type": "Normal", "reason": "Pulling", "message": 'Pulling image "nvcr.io/nvidia/pytorch:25.06-py3"',
               "lastTimestamp": "2026-12-03T10:00:05Z", "involvedObject": {"kind": "Pod", "name": "p"}}  # fmt: skip
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "nccl", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}  # fmt: skip
    result = judge_step("dgx-004", "nccl", 8, pod, [pulling], "", job=job)
    assert result.status == "FAIL"
    assert result.reason == (
        "the Job failed (DeadlineExceeded): Job was active longer than specified deadline; ContainerCreating; "
        'last event Pulling: Pulling image "nvcr.io/nvidia/pytorch:25.06-py3"'
    )
    gone = judge_step("dgx-004", "nccl", 8, None, [], "", job=job)
    assert gone.reason == "the Job failed (DeadlineExceeded): Job was active longer than specified deadline"


def test_a_pod_that_ended_without_the_tests_output_fails() -> None:
    done = {"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}
    result = judge_step("dgx-004", "cuda", 1, done, [], "")
    assert result.status == "FAIL" and result.reason == "the pod succeeded but its log holds none of the test's output"
    failed = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "cuda", "state": {"terminated": {"exitCode": 128, "reason": "StartError",
         "message": "failed to create containerd task: nvidia-container-cli: initialization error"}}}]}}  # fmt: skip
    result = judge_step("dgx-004", "cuda", 1, failed, [], "")
    assert result.reason == (
        "the pod failed before the test ran: failed to create containerd task: "
        "nvidia-container-cli: initialization error"
    )


def test_a_run_that_names_no_gpu_is_judged_against_the_nodes_own_gpu() -> None:
    # GPU feature discovery's product label (the product name with '-' for ' '), Slurm's GRES type
    assert gpu_model("NVIDIA-A100-SXM4-80GB") == "a100-80gb"
    assert gpu_model("NVIDIA-H100-80GB-HBM3") == "h100-sxm" and gpu_model("h100") == "h100-sxm"
    assert gpu_model("") is None and gpu_model("NVIDIA-Graphics-Device") is None
    # excerpts without nccl-tests' header: the model for the node's A100s says what the bandwidth should be
    slow = marked("nccl-tests", (NCCL / "04_dgx_a100_4gpu_p2p_disabled.txt").read_text(), 0)
    result = judge_nccl("dgx-a100", slow, 4, "NVIDIA-A100-SXM4-80GB")
    assert result.status == "FAIL"
    assert result.reason.startswith("bus bandwidth far below the expected: bandwidth is 2% of expected")
    good = marked("nccl-tests", (NCCL / "03_dgx_a100_4gpu_nvswitch.txt").read_text(), 0)
    result = judge_nccl("dgx-a100", good, 4, "NVIDIA-A100-SXM4-80GB")
    assert result.status == "PASS" and result.reason.endswith("97% of the model's expectation")
