"""`kubectl get pod -o json` through triage: why each container stopped, with the kernel's OOM kill at the memory limit
(host memory) kept apart from a CUDA out of memory (GPU memory), a SIGKILL from outside, a crash and an eviction."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.run import triage_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "oom"
REAL = DATA / "pod_kubeshark_worker_oomkilled.json"
TRAINER = DATA / "pod_trainer_gpu_oomkilled_constructed.json"
# the first line of the EKS capture's OOM (app_torch2_rank3_eks.log), as FallbackToLogsOnError would keep it
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of "
    "39.49 GiB of which 119.38 MiB is free. Including non-PyTorch memory, this process has 8.38 GiB memory in "
    "use. Of the allocated memory 7.96 GiB is allocated by PyTorch, and 7.73 MiB is reserved by PyTorch but "
    "unallocated."
)


def _trainer() -> dict[str, Any]:
    pod: dict[str, Any] = json.loads(TRAINER.read_text())
    return pod


def _status(pod: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = pod["status"]["containerStatuses"][0]
    return status


def _judge(pod: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[str]]:
    report = read("kubectl-pod-json", iter(json.dumps(pod, indent=4).splitlines()), "pod")
    return report.verdict, [(f.code, f.severity) for f in report.findings], [f.message for f in report.findings]


def test_a_real_oomkilled_pod_copied_without_its_kind() -> None:
    report = triage_lines(io.StringIO(REAL.read_text()), "kubeshark")
    assert (report.format, report.verdict) == ("kubectl-pod-json", "faulty")
    (finding,) = report.findings
    assert (finding.code, finding.entity) == (
        "host-oom",
        "pod kubeshark-worker-daemon-set-hvn25 container kubeshark-worker",
    )
    assert finding.message == (
        "container kubeshark-worker of pod kubeshark-worker-daemon-set-hvn25 was killed by the "
        "kernel's OOM killer at its 1Gi memory limit at 2023-05-06T21:03:57Z (its previous run) "
        "(host memory, not GPU memory)"
    )
    assert finding.fix.startswith("raise resources.limits.memory above 1Gi")
    assert '"exitCode": 137' in finding.evidence[0] and '"reason": "OOMKilled"' in finding.evidence[0]
    assert report.notes == [
        "pod kubeshark-worker-daemon-set-hvn25 (kubeshark, node mizu, QoS Burstable): "
        "kubeshark-worker (1Gi memory limit, 1 restart(s))"
    ]


def test_a_gpu_trainer_oomkilled_says_its_gpus_are_not_involved() -> None:
    report = triage_lines(io.StringIO(TRAINER.read_text()), "trainer")
    assert (report.format, report.verdict) == ("kubectl-pod-json", "faulty")
    (finding,) = report.findings  # the init container Completed: nothing to say
    assert finding.message == (
        "container trainer of pod trainer-0 was killed by the kernel's OOM killer at its 16Gi "
        "memory limit at 2025-03-04T14:02:30Z (its previous run) (host memory, not GPU memory; "
        "its 8 nvidia.com/gpu are not involved)"
    )
    assert "waiting: CrashLoopBackOff" in report.notes[-1]


def test_a_cuda_oom_in_the_termination_message_is_gpu_memory() -> None:
    pod = _trainer()
    _status(pod)["lastState"]["terminated"].update(reason="Error", exitCode=1, message=f"Traceback ...\n{CUDA_OOM}\n")
    verdict, findings, messages = _judge(pod)
    assert (verdict, findings) == ("faulty", [("gpu-oom", "critical")])
    assert messages[0].startswith(
        "container trainer of pod trainer-0 failed at 2025-03-04T14:02:30Z (its previous "
        "run) with PyTorch out of memory on GPU 0: tried to allocate 112.00 MiB"
    )
    assert messages[0].endswith("(GPU memory, not the container's memory limit: its 16Gi memory limit)")


@pytest.mark.parametrize(
    ("terminated", "finding", "verdict", "words"),
    [
        (
            {"reason": "Error", "exitCode": 137},
            ("sigkill", "warning"),
            "degraded",
            "was killed with SIGKILL (exit code 137, reason Error) at 2025-03-04T14:02:30Z (its previous run) and not "
            "marked OOMKilled",
        ),
        ({"reason": "Error", "exitCode": 139}, ("sigsegv", "warning"), "degraded", "SIGSEGV: a segmentation fault"),
        ({"reason": "Error", "exitCode": 134}, ("sigabrt", "warning"), "degraded", "SIGABRT"),
        ({"reason": "Error", "exitCode": 143}, ("sigterm", "info"), "healthy", "SIGTERM: told to stop"),
        (
            {"reason": "Error", "exitCode": 2, "message": "config.yaml: no such file\n"},
            ("exit 2", "warning"),
            "degraded",
            "exited with code 2 (Error) at 2025-03-04T14:02:30Z (its previous run): config.yaml: no such",
        ),
        # kubernetes/kubernetes#131530: a runtime reported OOMKilled with exit code 0; the kernel still killed it
        ({"reason": "OOMKilled", "exitCode": 0}, ("host-oom", "critical"), "faulty", "killed by the kernel's OOM"),
        ({"reason": "Completed", "exitCode": 0}, None, "healthy", ""),
    ],
)
def test_how_a_container_stopped(
    terminated: dict[str, Any], finding: tuple[str, str] | None, verdict: str, words: str
) -> None:
    pod = _trainer()
    del _status(pod)["state"]["waiting"]
    _status(pod)["state"]["running"] = {"startedAt": "2025-03-04T14:05:00Z"}
    _status(pod)["lastState"]["terminated"].update(terminated)
    got_verdict, findings, messages = _judge(pod)
    assert (got_verdict, findings) == (verdict, [finding] if finding else [])
    assert words in (messages[0] if messages else "")


def test_no_memory_limit_means_the_node_ran_out() -> None:
    pod = _trainer()
    del pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    _, _, messages = _judge(pod)
    assert "with no memory limit of its own at 2025-03-04T14:02:30Z (its previous run): the node ran out" in messages[0]


def test_an_eviction_for_memory_and_a_failed_gpu_admission() -> None:
    evicted = _trainer()
    evicted["status"].update(
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: memory. Threshold "
        "quantity: 100Mi, available: 91440Ki. Container trainer was using 15Gi, request is 8Gi, has "
        "larger consumption of memory.",
    )
    verdict, findings, messages = _judge(evicted)
    assert verdict == "faulty" and findings[0] == ("evicted", "critical")
    assert messages[0].startswith(
        "pod trainer-0 was evicted by the kubelet: the node was low on host memory (not GPU "
        "memory): The node was low on resource: memory."
    )
    # the kubelet's event text in gnosia93/training-on-eks appendix/a1-karpenter-message.md
    admission = _trainer()
    admission["status"].update(
        phase="Failed",
        reason="UnexpectedAdmissionError",
        message="Pod was rejected: Allocate "
        "failed due to no healthy devices present; cannot allocate unhealthy devices "
        "nvidia.com/gpu, which is unexpected",
    )
    verdict, findings, messages = _judge(admission)
    assert findings[0] == ("UnexpectedAdmissionError", "critical")
    assert messages[0].endswith("the device plugin could not give it its GPUs")


def test_a_healthy_pod_and_a_list() -> None:
    healthy = _trainer()
    status = _status(healthy)
    status.update(ready=True, restartCount=0, state={"running": {"startedAt": "2025-03-04T13:21:41Z"}})
    del status["lastState"]
    assert _judge(healthy)[:2] == ("healthy", [])
    crashing = _trainer()
    _status(crashing)["lastState"] = {}
    assert _judge(crashing)[1] == [("CrashLoopBackOff", "warning")]
    listed = {"apiVersion": "v1", "kind": "List", "items": [healthy, json.loads(REAL.read_text()), {"kind": "Service"}]}
    report = read("kubectl-pod-json", iter(json.dumps(listed).splitlines()), "list")
    assert report.verdict == "faulty" and [f.code for f in report.findings] == ["host-oom"]
    assert "1 item(s) of another kind left out" in report.notes


def test_a_pod_whose_message_holds_a_cuda_oom_is_still_a_pod() -> None:
    pod = _trainer()
    _status(pod)["lastState"]["terminated"]["message"] = CUDA_OOM
    assert triage_lines(io.StringIO(json.dumps(pod, indent=4)), "pod").format == "kubectl-pod-json"


def test_a_cut_pod_is_never_healthy_and_says_so() -> None:
    text = json.dumps(_trainer(), indent=4)
    for cut in range(len(text) // 10, len(text) - 1, max(1, len(text) // 60)):
        report = read("kubectl-pod-json", iter(text[:cut].splitlines()), "cut")
        assert report.verdict in ("faulty", "unknown"), cut
        if report.format == "kubectl-pod-json" and report.judged:
            assert not report.complete and "input ends mid-record" in " ".join(report.notes)


def test_not_a_pod_is_a_clear_unknown() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    report = read("kubectl-pod-json", iter([json.dumps(node)]), "node")
    assert report.verdict == "unknown" and "not a Pod" in report.notes[0]
    assert read("kubectl-pod-json", iter(["no json here"]), "x").verdict == "unknown"


def test_pasting_keeps_the_verdict() -> None:
    text = REAL.read_text()
    pasted = "$ kubectl get pod kubeshark-worker-daemon-set-hvn25 -o json\r\n" + "\r\n".join(
        f"> {line}" for line in text.splitlines()
    )
    report = triage_lines(io.StringIO(pasted), "pasted")
    assert (report.format, report.verdict, [f.code for f in report.findings]) == (
        "kubectl-pod-json",
        "faulty",
        ["host-oom"],
    )


def test_only_the_worst_are_kept_past_the_bound() -> None:
    pod = _trainer()
    pods = []
    for i in range(600):
        one = copy.deepcopy(pod)
        one["metadata"]["name"] = f"w-{i}"
        _status(one)["lastState"]["terminated"].update(reason="Error", exitCode=137 if i % 3 == 0 else 143)
        pods.append(one)
    report = read("kubectl-pod-json", iter(json.dumps({"kind": "List", "items": pods}).splitlines()), "many")
    codes = [f.code for f in report.findings]
    assert len(codes) == 500 and codes.count("sigkill") == 200  # every warning kept before the notes of SIGTERM
    assert "100 more finding(s) not listed" in report.notes[-1]
