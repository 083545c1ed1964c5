"""Application logs through triage: real captures of each framework's out of memory, told as GPU memory with their
numbers and ranks; Slurm's OOM kills as host memory; and logs that only talk about memory left alone."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from gpufleet.triage.formats import read
from gpufleet.triage.run import triage_lines, triage_stream

DATA = Path(__file__).resolve().parents[1] / "data" / "oom"

# capture -> (format, verdict, [(code, entity)], words the first finding's message must hold)
EXPECTED = {
    "app_torch2_rank3_eks.log": (
        "app-log",
        "faulty",
        [("gpu-oom", "rank 3")],
        [
            "PyTorch out of memory on GPU 0 (rank 3) by 11:10:18",
            "tried to allocate 112.00 MiB",
            "119.38 MiB free of 39.49 GiB",
            "this process holds 8.38 GiB",
            "GPU memory, not host",
        ],
    ),
    "app_torch20_capacty_litgpt.log": (
        "app-log",
        "faulty",
        [("gpu-oom", "GPU 0")],
        ["tried to allocate 8.06 GiB", "8.65 GiB reserved but unallocated"],
    ),
    "app_torch1_detectron2.log": (
        "app-log",
        "faulty",
        [("gpu-oom", "GPU 0")],
        ["on GPU 0 by 11:05:25", "1.58 GiB free of 31.72 GiB", "5.5 GiB reserved but"],
    ),
    "app_torch1_cached_gpu3.log": (
        "app-log",
        "faulty",
        [("gpu-oom", "GPU 3")],
        ["on GPU 3", "tried to allocate 86.00 MiB", "588.65 MiB reserved but unallocated"],
    ),
    "app_jax_xla_oom.log": ("app-log", "faulty", [("gpu-oom", "")], ["JAX/XLA out of memory", "allocate 6 MiB"]),
    "app_tf_resource_exhausted.log": (
        "app-log",
        "faulty",
        [("gpu-oom", "GPU 0")],
        ["TensorFlow out of memory on GPU 0", "tensor [16,112,112,147] of float", "(2 reports, lines 7-14)"],
    ),
    "app_vllm_kv_cache.log": ("app-log", "faulty", [("gpu-oom", "")], ["vLLM out of memory on the GPU at 18:07:28"]),
    "nccl_cuda_calloc_oom.log": ("nccl-log", "faulty", [("cuda_oom", "rank 3, ng30903")], ["GPU out of memory"]),
}


def _triage(text: str, fmt: str | None = None) -> tuple[str, str, list[tuple[str, str]], list[str]]:
    report = triage_lines(io.StringIO(text), "test", fmt)
    return (
        report.format,
        report.verdict,
        [(f.code, f.entity) for f in report.findings],
        [f.message for f in report.findings],
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_captures(name: str) -> None:
    fmt, verdict, findings, messages = _triage((DATA / name).read_text())
    want_fmt, want_verdict, want_findings, words = EXPECTED[name]
    assert (fmt, verdict, findings) == (want_fmt, want_verdict, want_findings)
    for word in words:
        assert word in messages[0], (word, messages[0])


def test_the_fix_follows_the_numbers() -> None:
    report = triage_lines(io.StringIO((DATA / "app_torch20_capacty_litgpt.log").read_text()), "litgpt")
    # PyTorch 2.0 still advised max_split_size_mb; expandable_segments came in 2.1
    assert report.findings[0].fix.startswith(
        "8.65 GiB is reserved by PyTorch but unallocated (fragmentation): set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch 2.1 and later;"
    )
    eks = triage_lines(io.StringIO((DATA / "app_torch2_rank3_eks.log").read_text()), "eks").findings[0]
    assert "expandable_segments" not in eks.fix and eks.fix.startswith("cut GPU memory per step")
    assert eks.evidence == [
        line for line in (DATA / "app_torch2_rank3_eks.log").read_text().splitlines() if "OutOfMemoryError" in line
    ]


def test_a_healthy_log_that_talks_about_out_of_memory_is_not_an_oom() -> None:
    text = (DATA / "app_vllm_healthy_cudagraph.log").read_text()
    fmt, _, findings, _ = _triage(text)
    assert (fmt, findings) == ("unknown", [])  # nothing in it is a sign of any format
    report = triage_lines(io.StringIO(text), "vllm", "app-log")
    assert (report.verdict, report.findings) == ("healthy", [])
    assert "no out-of-memory report" in report.notes[-1]


def test_another_failure_is_not_called_healthy() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "RuntimeError: NCCL communicator was aborted on rank 2.",
    ]
    report = read("app-log", iter(lines), "crash")
    assert [(f.code, f.severity) for f in report.findings] == [("exception", "warning")]
    assert report.findings[0].message.endswith("RuntimeError: NCCL communicator was aborted on rank 2.")


OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU {gpu} has a total capacity of "
    "79.15 GiB of which 3.19 MiB is free. Process 12345 has 79.14 GiB memory in use. Of the allocated memory 78.10 "
    "GiB is allocated by PyTorch, and 214.00 MiB is reserved by PyTorch but unallocated."
)


@pytest.mark.parametrize(
    ("prefix", "entity"),
    [
        ("[rank5]: ", "rank 5"),
        ("[default2]:[rank10]: ", "rank 10"),
        ("[default2]:", "local rank 2"),
        ("[1,6]<stderr>:", "rank 6"),
        ("6: ", "rank 6"),
    ],
)
def test_the_rank_comes_from_the_launchers_prefix(prefix: str, entity: str) -> None:
    report = read("app-log", iter([f"{prefix}{OOM.format(gpu=0)}"]), "log")  # the reader sees launcher prefixes kept
    (finding,) = report.findings
    assert (finding.code, finding.entity) == ("gpu-oom", entity)
    assert f"({entity})" in finding.message


def test_many_ranks_are_one_finding_that_names_them() -> None:
    lines = [f"[rank{r}]: {OOM.format(gpu=r % 8)}" for r in (3, 0, 12, 1, 2, 4, 5, 6)]
    (finding,) = read("app-log", iter(lines), "log").findings
    assert finding.entity == "rank 0, rank 1, rank 2, rank 3, rank 4, rank 5 and 2 more"
    assert "(8 reports, lines 1-8)" in finding.message and len(finding.evidence) == 8


def test_a_traceback_quoting_the_raise_is_not_a_second_report() -> None:
    report = triage_lines(io.StringIO((DATA / "app_vllm_kv_cache.log").read_text()), "vllm")
    assert "reports" not in report.findings[0].message and len(report.findings[0].evidence) == 1


def test_slurm_oom_kills_are_host_memory() -> None:
    lines = [
        "epoch 3 step 1200 loss 2.31",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=128435.1. Some of the step tasks have been OOM Killed.",
        "srun: error: curie-gpu003: task 1: Out Of Memory",
    ]
    fmt, verdict, findings, messages = _triage("\n".join(lines))
    assert (fmt, verdict, findings) == ("app-log", "faulty", [("host-oom", "task 1")])
    assert messages[0].startswith(
        "Slurm killed step 128435.1 at its cgroup's memory limit (1 OOM kill(s)): host memory"
    )


def test_a_sigkilled_worker_is_a_warning_that_points_at_the_oom_killer() -> None:
    lines = ["RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed. "]
    (finding,) = read("app-log", iter(lines), "log").findings
    assert (finding.code, finding.severity) == ("sigkill", "warning")
    assert finding.message.startswith("DataLoader worker 19597 was killed with SIGKILL: most often the kernel's OOM")
    elastic = ["  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 620208)"]
    assert [f.code for f in read("app-log", iter(elastic), "log").findings] == ["sigkill"]


def test_an_nccl_log_with_an_oom_line_stays_an_nccl_log() -> None:
    text = (DATA / "nccl_cuda_calloc_oom.log").read_text()
    plus_traceback = "Traceback (most recent call last):\n" + text
    assert _triage(plus_traceback)[0] == "nccl-log"


def test_pasting_keeps_the_verdict() -> None:
    text = (DATA / "app_torch2_rank3_eks.log").read_text()
    pasted = "$ kubectl logs llama-3-8b-node-0-0\n" + "\n".join(f"> {line}" for line in text.splitlines()) + "\n"
    assert _triage(pasted)[:3] == _triage(text)[:3]


def test_seeded_fuzz_of_every_capture_never_raises() -> None:
    """The out-of-memory captures (logs, kernel logs, pods) mutated and cut at random: a report every time."""
    rng = random.Random(7)
    files = [p for p in sorted(DATA.iterdir()) if not p.name.endswith(".source.txt")]
    for k in range(200):
        data = bytearray(rng.choice(files).read_bytes())
        for _ in range(rng.randint(0, 12)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        if data and rng.random() < 0.5:
            data = data[: rng.randrange(len(data))]
        report = triage_stream(io.BytesIO(bytes(data)), f"fuzz-{k}")
        assert report.verdict in ("healthy", "degraded", "faulty", "unknown")


def test_a_vllm_traceback_cut_at_any_point_never_reads_healthy() -> None:
    """Cut anywhere, the log is unknown or faulty; once the line its traceback quotes is whole (the raise of the
    out-of-memory error), the report is read from it even when the exception's own line is cut or missing."""
    data = (DATA / "app_vllm_kv_cache.log").read_bytes()
    quoted_end = data.index(b"\n", data.index(b"raise ValueError")) + 1
    for cut in range(len(data) + 1):
        report = triage_stream(io.BytesIO(data[:cut]), "vllm.log")
        assert report.verdict != "healthy", (cut, data[:cut][-60:])
        if cut >= quoted_end:
            assert report.verdict == "faulty", (cut, data[:cut][-60:])
            assert [f.code for f in report.findings] == ["gpu-oom"] and "vLLM" in report.findings[0].message
            from_quoted = any("source line its traceback quotes" in note for note in report.notes)
            assert from_quoted is (b"ValueError: No available memory for the cache blocks" not in data[:cut]), cut


def test_a_log_that_ends_inside_a_traceback_is_not_healthy() -> None:
    lines = ["epoch 3 step 1200 loss 2.31", "Traceback (most recent call last):",
             '  File "train.py", line 3, in <module>', "    model.step()"]  # fmt: skip
    report = read("app-log", iter(lines), "cut")
    assert (report.verdict, report.findings) == ("unknown", [])
    assert any("ends inside a traceback" in note for note in report.notes)
    whole = read("app-log", iter([*lines, "RuntimeError: step failed"]), "whole")
    assert [(f.code, f.severity) for f in whole.findings] == [("exception", "warning")]
    assert not any("traceback" in note for note in whole.notes)


def test_a_quoted_raise_is_not_reported_when_another_exception_ends_the_traceback() -> None:
    lines = [
        '  File "worker.py", line 493, in raise_if_cache_size_invalid',
        '    raise ValueError("No available memory for the cache blocks. "',
        "KeyboardInterrupt",
    ]
    report = read("app-log", iter(lines), "interrupted")
    assert not [f for f in report.findings if f.code == "gpu-oom"] and report.verdict != "faulty"
