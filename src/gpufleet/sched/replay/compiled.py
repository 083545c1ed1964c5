"""The compiled kernels, imported on first use: numba's import is heavy and only a placement needs it."""

from __future__ import annotations

from types import ModuleType


def compiled() -> ModuleType:
    """:mod:`gpufleet.sched.replay.kernels` (compiled on its first call, then cached on disk)."""
    from gpufleet.sched.replay import kernels

    return kernels
