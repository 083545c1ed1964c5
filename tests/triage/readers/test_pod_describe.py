"""`kubectl describe pod` through triage: the scheduler's reasons each with their action, container states judged as
the JSON reader judges them, and a Pending pod without its events still not called healthy."""

from __future__ import annotations

import io
import random

import pytest

from gpufleet.model import Severity
from gpufleet.triage.formats import read
from gpufleet.triage.report import TriageReport
from gpufleet.triage.run import triage_lines
from tests.conftest import CAPTURES

KUBECTL = CAPTURES / "kubectl"
PENDING = (KUBECTL / "describe_pod_pending_tf_notebook.txt").read_text()


def _triage(text: str) -> TriageReport:
    return triage_lines(io.StringIO(text), "test")


def test_insufficient_gpus_is_named_with_the_device_plugin_check() -> None:
    report = _triage((KUBECTL / "describe_pod_events_insufficient_gpu_l40s.txt").read_text())
    assert (report.format, report.verdict) == ("kubectl-describe-pod", "degraded")
    (finding,) = report.findings
    assert finding.code == "FailedScheduling: Insufficient nvidia.com/gpu"
    assert "allocatable" in finding.fix and "device plugin" in finding.fix


def test_a_pending_pod_without_its_events_is_not_healthy() -> None:
    report = _triage(PENDING)
    assert (report.format, report.verdict) == ("kubectl-describe-pod", "degraded")
    assert report.findings[0].entity == "pod tf-notebook-747db6987b-86zts"
    assert "nvidia.com/gpu" in report.findings[0].message


def test_each_scheduler_reason_gets_its_own_finding() -> None:
    event = (
        "  Warning  FailedScheduling  3m  default-scheduler  0/7 nodes are available: 3 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint {nvidia.com/gpu-xid-error: true}, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.\n"
    )
    report = _triage(
        PENDING.replace("  Type     Reason            Age\n", "  Type     Reason  Age  From  Message\n" + event)
    )
    assert {f.code for f in report.findings} == {
        "FailedScheduling: Insufficient nvidia.com/gpu",
        "FailedScheduling: untolerated taint nvidia.com/gpu-xid-error",
        "FailedScheduling: node affinity/selector",
    }
    taint = next(f for f in report.findings if "taint" in f.code)
    assert "GPU health check" in taint.fix


def test_container_states_are_judged_as_the_json_reader_does() -> None:
    text = (
        PENDING.replace("Status:         Pending", "Status:         Running")
        .replace(
            "    Port:   8888/TCP\n",
            "    Port:   8888/TCP\n    State:          Waiting\n      Reason:       CrashLoopBackOff\n"
            "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
            "    Ready:          False\n    Restart Count:  4\n",
        )
        .replace(
            "      nvidia.com/gpu:  1\n    Requests:",
            "      memory:          4Gi\n      nvidia.com/gpu:  1\n    Requests:",
        )
    )
    text = text.replace("  PodScheduled   False ", "  PodScheduled   True ")
    report = _triage(text)
    assert report.verdict == "faulty"
    oom = next(f for f in report.findings if f.code == "host-oom")
    assert oom.severity is Severity.critical and "4Gi" in oom.message and "1 nvidia.com/gpu" in oom.message


def test_an_image_pull_failure_and_a_failed_allocation() -> None:
    events = (
        "Events:\n  Type     Reason     Age   From     Message\n  ----     ------     ----  ----     -------\n"
        '  Warning  Failed     12s   kubelet  Failed to pull image "nvcr.io/nvidia/cuda:12.9": rpc error: code = '
        "NotFound\n  Warning  UnexpectedAdmissionError  5s  kubelet  Allocate failed due to rpc error: code = Unknown "
        "desc = device plugin Allocate failed, which is unexpected\n"
    )
    report = _triage("Name:         gpu-pod\nNamespace:    default\nStatus:       Failed\n" + events)
    assert {f.code: f.severity for f in report.findings} == {
        "ErrImagePull": Severity.warning,
        "UnexpectedAdmissionError": Severity.critical,
    }


@pytest.mark.parametrize("seed", range(3))
def test_seeded_fuzz_never_escapes(seed: int) -> None:
    """Cuts, character swaps and shuffles of the kubectl captures: each reader answers, never a traceback."""
    rng = random.Random(seed)
    captures = sorted(p for p in KUBECTL.glob("*.txt") if not p.name.endswith(".source.txt"))
    for _ in range(100):
        lines = rng.choice(captures).read_text().splitlines()
        op = rng.randrange(3)
        if op == 0:
            lines = lines[: rng.randrange(len(lines) + 1)]
        elif op == 1:
            old, new = rng.choice(":\t -0"), rng.choice(["", "::", "\x00", "9", "&a "])
            lines = [line.replace(old, new) for line in lines]
        else:
            rng.shuffle(lines)
        for fmt in ("kubectl-describe-pod", "kubectl-node-yaml", "kubectl-pod-yaml", "kubectl-describe-node"):
            read(fmt, iter(lines), "fuzz")


def test_kubectl_events_rows_without_their_header() -> None:
    report = _triage((KUBECTL / "kubectl_events_unbound_pvc_excerpt.txt").read_text())
    assert (report.format, report.verdict) == ("kubectl-events", "degraded")
    (finding,) = report.findings
    assert (finding.entity, finding.code) == ("pod postgres-0", "FailedScheduling: unbound PersistentVolumeClaim")
    assert any("FailedBinding" in n for n in report.notes)  # another object's warning, listed


def test_kubectl_get_events_table_is_read_by_its_columns() -> None:
    text = (
        "NAMESPACE   LAST SEEN           TYPE      REASON                     OBJECT              MESSAGE\n"
        "ml          26m (x150 over 12h) Warning   FailedScheduling           pod/train-0         0/4 nodes are "
        "available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found "
        "for incoming pod.\n"
        "ml          2m                  Warning   UnexpectedAdmissionError   pod/infer-1         Allocate failed "
        "due to rpc error: code = Unknown desc = no healthy devices, which is unexpected\n"
        "ml          1m                  Normal    Scheduled                  pod/infer-2         Successfully "
        "assigned ml/infer-2 to gpu-3\n"
    )
    report = _triage(text)
    assert (report.format, report.verdict) == ("kubectl-events", "faulty")
    assert {(f.entity, f.code) for f in report.findings} == {
        ("pod train-0", "FailedScheduling: Insufficient nvidia.com/gpu"),
        ("pod infer-1", "UnexpectedAdmissionError"),
    }
