"""A training or serving application's own log, read for what its framework says when it runs out of memory."""

from __future__ import annotations

from gpufleet.triage.formats.registry import Format
from gpufleet.triage.readers.app_log import read_app_log

# told only by an out-of-memory report, each framework's wording (readers/oom.py), so it never outscores a format
# with signs of its own (an NCCL log with an OOM line stays an NCCL log); registered last, it loses ties
APP_LOG = Format(
    name="app-log",
    summary="A training or serving log with an out-of-memory error (PyTorch, JAX, TensorFlow, vLLM, Slurm)",
    signs=(
        (
            r"(?:CUDA|HIP) out of memory\.(?:\*\*)? Tried to allocate|CUDA error: out of memory|RESOURCE_EXHAUSTED: "
            r"Out of memory|Resource exhausted: Out of memory while|OOM when allocating tensor|No available memory "
            r"for the cache blocks|KV cache is needed, which is larger than|Cuda failure (?:2 )?'out of memory'",
            7,
        ),
        (r"Detected \d+ oom[-_]kill events? in |srun: error: \S+: tasks? [\d,-]+: Out Of Memory", 7),  # Slurm
        (r"^\W{0,3}(?:\[\w+(?:,\d+)?\](?:<std\w+>)?:\s*)*Traceback \(most recent call last\)", 1),
    ),
    judge=read_app_log,
    keeps_launchers=True,
)
