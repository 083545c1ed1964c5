"""The kernel log's OOM-killer reports through triage, on real captures: host memory, with the process, the pid, the
memory cgroup and its pod, and the limit; the node running out is faulty, a cgroup at its own limit degraded."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpufleet.triage.readers.kernel import read_kernel_log
from gpufleet.triage.run import triage_lines, triage_stream

DATA = Path(__file__).resolve().parents[1] / "data" / "oom"

# capture -> (verdict, [(severity, entity)] of its host-oom findings, words the first one's message holds)
EXPECTED = {
    "kernel_memcg_kubepods_16g_lkml.log": (
        "degraded",
        [("warning", "pod f1c273d3-9b36-11ea-b3df-246e9693c184")],
        "killed pause (pid 5740, anon-rss 4 KiB) in the memory cgroup of pod f1c273d3-9b36-11ea-b3df-246e9693c184 (QoS "
        "guaranteed) at its 16 GiB limit (host memory, not GPU memory)",
    ),
    "kernel_memcg_old_kill_process_k8s.log": (
        "degraded",
        [("warning", "pod 95387fa4-da9c-11e7-9d36-5254b24cbf5e")],
        "killed java (pid 28438, anon-rss 455.2 MiB) in the memory cgroup of pod 95387fa4-da9c-11e7-9d36-5254b24cbf5e",
    ),
    "kernel_memcg_task_in_systemd_istio.log": (
        "degraded",
        [("warning", "pod 0330b2c1-a15b-4cdd-b5e5-72d4a90bee82")],
        "killed a process in the memory cgroup of pod 0330b2c1-a15b-4cdd-b5e5-72d4a90bee82 (QoS burstable) at its "
        "1 GiB limit",
    ),
    "kernel_global_oom_syslog_docker.log": (
        "faulty",
        [("critical", "node"), ("warning", "")],
        "the node ran out of memory: the kernel's OOM killer killed python3 (pid 15784, anon-rss 4.2 MiB), (resolved) "
        "(pid 15925, anon-rss 4.0 MiB), python3 (pid 15783, anon-rss 4.2 MiB) and 1 more (host memory, not GPU memory) "
        "(4 kills, lines",
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_captures(name: str) -> None:
    report = triage_lines(io.StringIO((DATA / name).read_text()), name)
    verdict, entities, words = EXPECTED[name]
    assert (report.format, report.verdict) == ("kernel-log", verdict)
    ooms = report.ordered()
    assert [(f.code, f.severity, f.entity) for f in ooms] == [("host-oom", s, e) for s, e in entities]
    assert words in ooms[0].message, ooms[0].message
    assert ooms[0].fix


def test_the_evidence_is_the_reports_own_lines() -> None:
    report = triage_lines(io.StringIO((DATA / "kernel_memcg_kubepods_16g_lkml.log").read_text()), "lkml")
    (finding,) = report.findings
    assert [line.split("] ", 1)[1][:30] for line in finding.evidence] == [
        "memory: usage 16777216kB, limi",
        "oom-kill:constraint=CONSTRAINT",
        "Memory cgroup out of memory: K",
        "oom_reaper: reaped process 574",
    ]
    assert "took off quoting (29 lines)" in report.notes


def test_oom_kills_beside_gpu_faults() -> None:
    lines = [
        "[  100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        "[  200.000000] Out of memory: Killed process 4242 (python) total-vm:100kB, anon-rss:2097152kB, file-rss:0kB",
    ]
    report = read_kernel_log(lines, "both")
    assert {(f.code, f.severity) for f in report.findings} == {("Xid 79", "critical"), ("host-oom", "critical")}


def test_a_log_of_only_oom_lines_is_told_as_a_kernel_log() -> None:
    line = "Memory cgroup out of memory: Killed process 140339 (python3) total-vm:120832kB, anon-rss:15596kB"
    report = triage_lines(io.StringIO(line + "\n"), "one")
    assert (report.format, [f.code for f in report.findings]) == ("kernel-log", ["host-oom"])


def test_an_oom_kill_deep_in_a_streamed_log_is_read() -> None:
    quiet = b"".join(b"[%6d.000000] eth0: link up\n" % i for i in range(30_000))
    kill = b"[ 99999.000000] Out of memory: Killed process 4242 (python) total-vm:100kB, anon-rss:2048kB\n"
    report = triage_stream(io.BytesIO(quiet + kill), "big")
    assert report.format == "kernel-log" and [f.code for f in report.findings] == ["host-oom"]
