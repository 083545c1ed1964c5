"""A training or serving application's own log, read for what its framework says when it runs out of memory and
for the driver/CUDA setup errors that stop it before it computes."""

from __future__ import annotations

from gpufleet.catalog.setup_errors import any_setup_error_pattern
from gpufleet.triage.formats.registry import Format
from gpufleet.triage.readers.app_log import read_app_log

# told only by an out-of-memory report, each framework's wording (readers/oom.py), so it never outscores a format
# with signs of its own (an NCCL log with an OOM line stays an NCCL log); registered last, it loses ties
APP_LOG = Format(
    name="app-log",
    summary="A training or serving log (a pod's, a Slurm job's) with an out-of-memory error (PyTorch, JAX, "
    "TensorFlow, vLLM, Slurm) or a driver/CUDA setup error (no kernel image, driver too old, version mismatch)",
    signs=(
        (
            r"(?:CUDA|HIP) out of memory\.(?:\*\*)? Tried to allocate|CUDA error: out of memory|RESOURCE_EXHAUSTED: "
            r"Out of memory|Resource exhausted: Out of memory while|OOM when allocating tensor|No available memory "
            r"for the cache blocks|KV cache is needed, which is larger than|Cuda failure (?:2 )?'out of memory'",
            7,
        ),
        (r"Detected \d+ oom[-_]kill events? in |srun: error: \S+: tasks? [\d,-]+: Out Of Memory", 7),  # Slurm
        # a driver/CUDA setup error in CUDA's, NVML's, nvidia-smi's, the container toolkit's or a shell's words
        # (catalog/data/setup_errors.yaml); a mention in prose scores too, and its judge finds nothing there
        (any_setup_error_pattern(), 7),
        (r"^\W{0,3}(?:\[\w+(?:,\d+)?\](?:<std\w+>)?:\s*)*Traceback \(most recent call last\)", 1),
    ),
    judge=read_app_log,
    keeps_launchers=True,
)
