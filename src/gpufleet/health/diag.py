"""Node health checks at DCGM's run levels, and the rule that a diagnostic PASS with links down is not trusted.

- r1 (quick): the driver answers and matches its components, persistence and ECC modes, pending page retirement
  or row remap, NVLink links all up, every GPU present.
- r2 (medium): adds memory (volatile uncorrectable ECC, row-remap failure, remapped-row budget) and PCIe (link at
  its maximum generation and width, replays within DCGM's per-lane budget), and the node's InfiniBand ports.
- r3 (long): adds a stress check. On a real node that is `dcgmi diag -r 3`; on the twin (`gpufleet.sim.diag`) it is
  the steady state each GPU would reach at full load with its current cooling and power limits (thermal headroom,
  power brake, NVLink error rate), which is what a burn test exposes.

`dcgmi diag` is used when present and its verdict is combined with our own link checks: dcgmi has passed -r 2
with every NVLink down (NVIDIA/DCGM#198), so a PASS next to a down link becomes a FAIL that says why.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.errors import BackendError
from gpufleet.sources.dcgmi import DiagReport, parse_diag
from gpufleet.sources.topo import NvlinkGpu

Status = Literal["Pass", "Fail", "Warn", "Skip"]
_RANK = {"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}


@dataclass(slots=True)
class Check:
    name: str
    level: int
    status: Status
    detail: str


@dataclass(slots=True)
class DiagOutcome:
    node: str
    level: int
    checks: list[Check] = field(default_factory=list)
    dcgmi: DiagReport | None = None

    @property
    def verdict(self) -> Status:
        statuses = [c.status for c in self.checks if c.status != "Skip"]
        return max(statuses, key=lambda s: _RANK[s]) if statuses else "Skip"

    @property
    def passed(self) -> bool:
        return self.verdict in ("Pass", "Warn")

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if c.status == "Fail"]


def judge(
    report: DiagReport, node: str, level: int, nvlink: list[NvlinkGpu] | None = None, ib_down: list[str] | None = None
) -> DiagOutcome:
    """dcgmi's verdict, plus our link checks: its PASS is not trusted while NVLink or HCA links are down."""
    out = DiagOutcome(node, level, dcgmi=report)
    for test in report.tests:
        detail = "; ".join(m.text for m in test.messages if m.severity == "error") or test.status
        out.checks.append(Check(f"dcgmi: {test.name}", level, test.status, detail))
    down = []
    for gpu in nvlink or []:
        if gpu.all_inactive or any(not link.active for link in gpu.links):
            down.append(f"GPU {gpu.index} NVLink {gpu.active_links}/{len(gpu.links) or '?'} active")
    down += [f"{port} link down" for port in ib_down or []]
    if down:
        trusted = "" if report.verdict == "Fail" else f"dcgmi said {report.verdict} but "
        out.checks.append(Check("Links", level, "Fail", trusted + "; ".join(down)))
    return out


def run_dcgmi(level: int) -> DiagReport:
    """Run `dcgmi diag -r <level>` on this host."""
    binary = shutil.which("dcgmi")
    if binary is None:
        raise BackendError("dcgmi is not installed", fix="install datacenter-gpu-manager, or use gpufleet's checks")
    try:
        proc = subprocess.run([binary, "diag", "-r", str(level)], capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        raise BackendError(f"dcgmi diag -r {level} did not finish within an hour") from None
    if proc.returncode not in (0, 226) and "Diagnostic" not in proc.stdout:  # 226: some tests failed
        raise BackendError(f"dcgmi diag failed: {proc.stderr.strip()[:300]}", fix="is nv-hostengine running?")
    return parse_diag(proc.stdout, level=level)
