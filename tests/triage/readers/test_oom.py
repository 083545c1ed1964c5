"""Out of memory told apart: each framework's GPU wording read with its numbers, the advice those numbers point to, the
kernel's OOM-killer reports assembled line by line, and the one line that puts a host kill beside a GPU OOM."""

from __future__ import annotations

import re

import pytest

from gpufleet.model import Severity
from gpufleet.triage.readers import oom
from gpufleet.triage.readers.oom import (
    OomKillTracker,
    describe_gpu_oom,
    describe_kills,
    format_bytes,
    parse_gpu_oom,
    side_by_side,
    to_bytes,
)
from gpufleet.triage.report import TriageFinding, TriageReport

GIB = 1 << 30
MIB = 1 << 20
# PyTorch 2.2+ (c10/cuda/CUDACachingAllocator.cpp), with another process on the GPU, as vLLM/transformers users report
TORCH_OTHERS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.21 GiB. GPU 0 has a total capacity of 93.11 GiB "
    "of which 3.15 GiB is free. Process 569641 has 73.59 GiB memory in use. Including non-PyTorch memory, this process "
    "has 16.36 GiB memory in use. Of the allocated memory 15.64 GiB is allocated by PyTorch, and 50.30 MiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management "
    " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
TORCH_FRAGMENTED = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB "
    "of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. Of the "
    "allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation."
)


def test_sizes_read_and_print_as_the_tools_do() -> None:
    assert (
        to_bytes("79.15 GiB") == int(79.15 * GIB) and to_bytes("0 bytes") == 0 and to_bytes("512.00 KiB") == 512 << 10
    )
    assert (
        format_bytes(16 * GIB) == "16 GiB" and format_bytes(1.5 * MIB) == "1.5 MiB" and format_bytes(12) == "12 bytes"
    )


def test_pytorch_2_wording_with_other_processes() -> None:
    oom = parse_gpu_oom(f"[rank0]: {TORCH_OTHERS}")
    assert oom is not None and (oom.framework, oom.gpu) == ("PyTorch", 0)
    assert oom.sizes["requested"][0] == "3.21 GiB" and oom.sizes["free"][0] == "3.15 GiB"
    assert oom.sizes["this process"][0] == "16.36 GiB" and oom.sizes["reserved, unallocated"][0] == "50.30 MiB"
    assert oom.others == [(569641, ("73.59 GiB", to_bytes("73.59 GiB")))]
    summary, fix = describe_gpu_oom(oom)
    assert "process 569641 holds 73.59 GiB" in summary
    assert fix.startswith("other processes (569641) hold 73.6 GiB of this GPU") and "nvidia-smi" in fix


def test_reserved_but_unallocated_suggests_expandable_segments_as_pytorch_does() -> None:
    oom = parse_gpu_oom(TORCH_FRAGMENTED)
    assert oom is not None
    _, fix = describe_gpu_oom(oom)
    assert fix.startswith(
        "9.35 GiB is reserved by PyTorch but unallocated (fragmentation): set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as PyTorch's message says"
    )
    small = parse_gpu_oom(TORCH_OTHERS)  # 50.30 MiB held unallocated: not worth a setting
    assert small is not None and "expandable_segments" not in describe_gpu_oom(small)[1]


@pytest.mark.parametrize(
    ("line", "framework", "gpu", "sizes"),
    [
        # 1.4-2.0: reserved in total includes the allocated; the difference is held but unallocated
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.78 GiB total capacity; 12.01 GiB "
            "already allocated; 1.20 GiB free; 13.50 GiB reserved in total by PyTorch)",
            "PyTorch",
            1,
            {"requested": 2 * GIB, "total": to_bytes("15.78 GiB"), "reserved, unallocated": to_bytes("1.49 GiB")},
        ),
        # 1.0-1.3: "cached" is what the allocator holds unallocated
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB "
            "already allocated; 9.28 GiB free; 4.68 MiB cached)",
            "PyTorch",
            0,
            {"requested": to_bytes("12.50 MiB"), "reserved, unallocated": to_bytes("4.68 MiB")},
        ),
        # with set_per_process_memory_fraction
        (
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 1.00 GiB already "
            "allocated; 5.00 GiB free; 1.50 GiB allowed; 1.02 GiB reserved in total by PyTorch)",
            "PyTorch",
            0,
            {"allowed": to_bytes("1.50 GiB")},
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
            "7406166528 bytes.",
            "JAX/XLA",
            None,
            {"requested": 7406166528},
        ),
        (
            "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/"
            "local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of memory while trying to "
            "allocate 5520758552 bytes.",
            "JAX/XLA",
            None,
            {"requested": 5520758552},
        ),
        (
            "ResourceExhaustedError: OOM when allocating tensor with shape[128,128,109,109] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc",
            "TensorFlow",
            1,
            {},
        ),
        ("node1:1:1 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'", "NCCL", None, {}),
        (
            "ng:1:1 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
            "NCCL",
            None,
            {"requested": 6291456},
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.",
            "vLLM",
            None,
            {},
        ),
        ("RuntimeError: CUDA error: out of memory", "CUDA", None, {}),
    ],
)
def test_each_frameworks_wording(line: str, framework: str, gpu: int | None, sizes: dict[str, int]) -> None:
    oom = parse_gpu_oom(line)
    assert oom is not None and (oom.framework, oom.gpu) == (framework, gpu)
    for key, value in sizes.items():
        assert abs(oom.sizes[key][1] - value) <= 0.01 * value, key


def test_vllm_says_how_much_kv_cache_it_needed() -> None:
    line = (
        "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (9.75 GiB). Based on the available memory, "
        "the estimated maximum model length is 79872."
    )
    oom = parse_gpu_oom(line)
    assert oom is not None and oom.detail == "16.00 GiB of KV cache needed, 9.75 GiB available"
    assert "--gpu-memory-utilization" in describe_gpu_oom(oom)[1]


def test_tensorflow_on_the_cpu_is_host_memory_and_an_impossible_size_is_no_shortage() -> None:
    cpu = parse_gpu_oom(
        "OOM when allocating tensor with shape[563354,256] and type float on "
        "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"
    )
    assert cpu is not None and cpu.on_cpu and "host RAM, not GPU memory" in describe_gpu_oom(cpu)[0]
    huge = parse_gpu_oom("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.")
    assert huge is not None and huge.impossible and "corrupted size" in describe_gpu_oom(huge)[0]


@pytest.mark.parametrize(
    "line",
    [
        "INFO 12-19 22:58:27 model_runner.py:1415] If out-of-memory error occurs during cudagraph capture, consider "
        "decreasing `gpu_memory_utilization` or switching to eager mode.",
        "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing",
        "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom",
        "[2025-12-31 17:08:24,236] [WARNING] [stage3.py:2236:step] 1 pytorch allocator cache flushes since last step. "
        "this happens when there is high memory pressure",
        "Memory cgroup out of memory: Killed process 63214 (uwsgi) total-vm:3149468kB, anon-rss:164992kB",
    ],
)
def test_sentences_about_memory_are_not_gpu_reports(line: str) -> None:
    assert parse_gpu_oom(line) is None


def _kills(lines: list[str]) -> OomKillTracker:
    tracker = OomKillTracker()
    for number, line in enumerate(lines, start=1):
        tracker.feed(number, line)
    return tracker


def test_a_modern_memcg_report_is_one_kill_with_its_cgroup_pod_limit_and_rss() -> None:
    tracker = _kills(
        [
            "[ 7093.543707] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999",
            "[ 7093.543800] memory: usage 16777216kB, limit 16777216kB, failcnt 1234",
            "[ 7093.543801] memory+swap: usage 16777216kB, limit 9007199254740988kB, failcnt 0",
            "[ 7093.543900] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-ab.scope,"
            "mems_allowed=0,oom_memcg=/kubepods/burstable/pod2f1c9b0e-1d2a-4b3c-8d4e-5f6a7b8c9d0e,task_memcg=/kubepods/"
            "burstable/pod2f1c9b0e-1d2a-4b3c-8d4e-5f6a7b8c9d0e/0123,task=python,pid=1234,uid=0",
            "[ 7093.544000] Memory cgroup out of memory: Killed process 1234 (python) total-vm:30000000kB, "
            "anon-rss:16000000kB, file-rss:1234kB, shmem-rss:0kB, UID:0 pgtables:33000kB oom_score_adj:999",
            "[ 7093.560000] oom_reaper: reaped process 1234 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
        ]
    )
    (kill,) = tracker.kills
    assert (kill.scope, kill.process, kill.pid, kill.limit_kb) == ("memcg", "python", 1234, 16777216)
    assert (kill.pod_uid, kill.qos, kill.anon_rss_kb) == ("2f1c9b0e-1d2a-4b3c-8d4e-5f6a7b8c9d0e", "burstable", 16000000)
    assert len(kill.lines) == 5  # the unlimited memory+swap line is not evidence
    message, fix = describe_kills(tracker.kills)
    assert message == (
        "the kernel's OOM killer killed python (pid 1234, anon-rss 15.3 GiB) in the memory cgroup of pod "
        "2f1c9b0e-1d2a-4b3c-8d4e-5f6a7b8c9d0e (QoS burstable) at its 16 GiB limit (host memory, not GPU "
        "memory)"
    )
    assert "resources.limits.memory" in fix


def test_the_old_chosen_then_killed_child_is_one_kill_and_two_reports_are_two() -> None:
    tracker = _kills(
        [
            "Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child",
            "Killed process 28438 (java) total-vm:20255636kB, anon-rss:466160kB, file-rss:13684kB",
            "Out of memory: Kill process 456 (python) score 50 or sacrifice child",
            "Killed process 457 (python) total-vm:1kB, anon-rss:2048kB",
        ]
    )
    assert [(k.scope, k.pid, k.killed) for k in tracker.kills] == [("memcg", 28438, True), ("node", 457, True)]


def test_a_reaper_line_alone_still_says_a_kill_happened() -> None:
    (kill,) = _kills(["oom_reaper: reaped process 345646 (vector), now anon-rss:0kB, file-rss:0kB"]).kills
    assert (kill.process, kill.pid, kill.scope) == ("vector", 345646, "")
    assert describe_kills([kill])[0].startswith("the kernel's OOM killer killed vector (pid 345646) (host memory")


def test_a_killed_line_is_read_from_its_scope_however_far_before_its_words() -> None:
    """The kill line's search starts where its longest scope could: the scope is read whole, and a `Killed process`
    whose process cannot be read gives way to the next one on the line."""
    lines = [
        "Memory cgroup out of memory (oom_kill_allocating_task): Killed process 7 (a) total-vm:1kB, anon-rss:2kB",
        "Out of memory: Killed process 8 (b)",
        "x" * 200 + " Out of memory (oom_kill_allocating_task): Killed process 9 (c) total-vm:1kB",
        "Killed process (no pid) then Memory cgroup out of memory: Killed process 10 (d) anon-rss:4kB",
    ]
    tracker = _kills(lines)
    assert [(k.scope, k.pid, k.process, k.anon_rss_kb) for k in tracker.kills] == [
        ("memcg", 7, "a", 2),
        ("node", 8, "b", None),
        ("node", 9, "c", None),
        ("memcg", 10, "d", 4),
    ]


def test_each_report_line_is_searched_only_when_it_holds_its_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill line costs one search, not one per kind of report line; a line holding none of the words costs none."""
    searched: list[str] = []

    class Counted:
        def __init__(self, pattern: re.Pattern[str]) -> None:
            self.pattern = pattern

        def search(self, line: str, *pos: int) -> re.Match[str] | None:
            searched.append(self.pattern.pattern)
            return self.pattern.search(line, *pos)

    for name in ("_USAGE", "_TASK_IN", "_STATS", "_CONSTRAINT", "_CHOSEN", "_KILLED", "_REAPED"):
        monkeypatch.setattr(oom, name, Counted(getattr(oom, name)))
    tracker = _kills(["Memory cgroup out of memory: Killed process 7 (a) total-vm:1kB, anon-rss:2kB"])
    assert len(searched) == 1 and tracker.kills[0].pid == 7
    _kills(["systemd[1]: Started systemd-oomd.service - Userspace Out-Of-Memory (OOM) Killer.", "earlyoom-killer"])
    assert len(searched) == 1


def test_the_systemd_cgroup_driver_spells_the_pod_uid_with_underscores() -> None:
    path = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0330b2c1_a15b_4cdd_b5e5_72d4a90bee82.slice"
    (kill,) = _kills([f"oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg={path},task_memcg={path}/x,task=a,pid=1"]).kills
    assert (kill.pod_uid, kill.qos) == ("0330b2c1-a15b-4cdd-b5e5-72d4a90bee82", "besteffort")


def test_side_by_side_names_both_failures_and_only_across_inputs() -> None:
    pod = TriageReport("kubectl-pod-json", "pod.json")
    pod.findings.append(
        TriageFinding(
            "pod",
            Severity.critical,
            "container trainer of pod trainer-0 was killed by the kernel's "
            "OOM killer at its 16Gi memory limit (host memory)",
            "pod trainer-0 container trainer",
            "host-oom",
        )
    )
    log = TriageReport("app-log", "train.log")
    log.findings.append(
        TriageFinding(
            "app-log",
            Severity.critical,
            "PyTorch out of memory on GPU 0 (rank 3) at 14:02:11: ...",
            "rank 3",
            "gpu-oom",
        )
    )
    combined = side_by_side([pod, log])
    assert combined is not None
    line, involved = combined
    assert involved == [pod, log]
    assert line.startswith(
        "pod trainer-0 container trainer: killed by the kernel's OOM killer (host memory, 16Gi "
        "limit); train.log: running out of GPU memory at 14:02:11 on rank 3 is a separate failure"
    )
    assert side_by_side([pod]) is None and side_by_side([log]) is None
    both = TriageReport("kernel-log", "one.log")
    both.findings += [pod.findings[0], log.findings[0]]
    assert side_by_side([both]) is None  # one input: its own findings already say which is which
