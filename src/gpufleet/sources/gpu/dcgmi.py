"""Running `dcgmi diag` on this host, under a timeout; its output is read by the dcgmi parser and judged by
`gpufleet.health.dcgm_diag`."""

from __future__ import annotations

import shutil
import subprocess

from gpufleet.errors import BackendError, ParseError
from gpufleet.parsers.nvidia.dcgmi_diag import DiagReport, read_diag


def run_dcgmi(level: int) -> DiagReport:
    """Run `dcgmi diag -r <level>` on this host."""
    binary = shutil.which("dcgmi")
    if binary is None:
        raise BackendError("dcgmi is not installed", fix="install datacenter-gpu-manager, or use gpufleet's checks")
    try:
        proc = subprocess.run([binary, "diag", "-r", str(level)], capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        raise BackendError(f"dcgmi diag -r {level} did not finish within an hour") from None
    try:
        return read_diag(proc.stdout.splitlines(), level=level)  # dcgmi's own `Error: ...` lines are judged too
    except ParseError:
        detail = (proc.stderr.strip() or proc.stdout.strip())[:300]
        raise BackendError(f"dcgmi diag failed: {detail}", fix="is nv-hostengine running?") from None
