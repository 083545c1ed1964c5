"""Node health checks at DCGM's run levels, and the rule that a diagnostic PASS with links down is not trusted.

- r1 (quick): the driver answers and matches its components, persistence and ECC modes, pending page retirement
  or row remap, NVLink links all up, every GPU present.
- r2 (medium): adds memory (volatile uncorrectable ECC, row-remap failure, remapped-row budget) and PCIe (link at
  its maximum generation and width, replays within DCGM's per-lane budget), and the node's InfiniBand ports.
- r3 (long): adds a stress check. On a real node that is `dcgmi diag -r 3`; on the twin it is the steady state each
  GPU would reach at full load with its current cooling and power limits (thermal headroom, power brake, NVLink
  error rate), which is what a burn test exposes.

`dcgmi diag` is used when present and its verdict is combined with our own link checks: dcgmi has passed -r 2
with every NVLink down (NVIDIA/DCGM#198), so a PASS next to a down link becomes a FAIL that says why.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.errors import BackendError, UserError
from gpufleet.sim.gpu_state import FULL_LOAD_POWER_OVER_TDP, THERMAL_HEADROOM_C
from gpufleet.sim.twin import Twin
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


def _check(out: DiagOutcome, name: str, level: int, problems: list[str], ok: str) -> None:
    if level <= out.level:
        out.checks.append(Check(name, level, "Fail" if problems else "Pass", "; ".join(problems) or ok))


def twin_diag(twin: Twin, node: str, level: int) -> DiagOutcome:
    """Run the checks of `level` (1-3) on one node of the twin."""
    if level not in (1, 2, 3):
        raise UserError(f"diag level {level}", fix="use -r 1, 2 or 3")
    cluster_node = twin.cluster.node(node)
    g = twin.gpus
    rows = [twin.gpu_index[(node, gpu.index)] for gpu in cluster_node.gpus]
    out = DiagOutcome(node, level)
    sw = cluster_node.software
    deployment = (
        [f"driver {sw.driver_version} but fabric manager {sw.fabric_manager_version}"]
        if (sw.fabric_manager_version != sw.driver_version)
        else []
    )
    deployment += [line.split("NVRM: ", 1)[1][:120] for line in twin.kmsg[node] if "API mismatch" in line][-1:]
    _check(out, "Deployment", 1, deployment, f"driver {sw.driver_version}, CUDA {sw.cuda_version}")
    missing = [f"GPU {int(g.index_on_node[i])} not found" for i in rows if not g.alive[i]]
    missing += [f"GPU {int(g.index_on_node[i])} not responding" for i in rows if g.alive[i] and g.wedged[i]]
    _check(out, "GPU presence", 1, missing, f"{len(rows)} GPUs answer")
    live = [i for i in rows if g.alive[i]]
    pending = [
        f"GPU {int(g.index_on_node[i])} has a pending row remap or page retirement"
        for i in live
        if g.remap_pending[i] or g.retired_pending[i]
    ]
    _check(out, "Page Retirement/Row Remap", 1, pending, "nothing pending")
    nvlink = [
        f"GPU {int(g.index_on_node[i])} NVLink {int(g.nvlink_active[i])}/{int(g.nvlink_links[i])} up"
        for i in live
        if g.nvlink_active[i] < g.nvlink_links[i]
    ]
    _check(out, "NVLink", 1, nvlink, "all links up")
    memory = [f"GPU {int(g.index_on_node[i])} volatile DBE {int(g.ecc_dbe_vol[i])}" for i in live if g.ecc_dbe_vol[i]]
    memory += [f"GPU {int(g.index_on_node[i])} row remap failure" for i in live if g.remap_failure[i]]
    _check(out, "Memory", 2, memory, "no uncorrectable errors")
    pcie = [
        f"GPU {int(g.index_on_node[i])} link Gen{int(g.pcie_gen[i])} x{int(g.pcie_width[i])} of "
        f"Gen{int(g.pcie_max_gen[i])} x{int(g.pcie_max_width[i])}"
        for i in live
        if g.pcie_gen[i] < g.pcie_max_gen[i] or g.pcie_width[i] < g.pcie_max_width[i]
    ]
    _check(out, "PCIe", 2, pcie, "links at full generation and width")
    ni = twin.node_index[node]
    ib = [
        f"HCA rail {rail} link down"
        for (n, rail), p in sorted(twin.ports.nic_port.items())
        if n == ni and not twin.ports.up[p]
    ]
    _check(out, "InfiniBand", 2, ib, f"{sum(1 for (n, _r) in twin.ports.nic_port if n == ni)} ports active")
    stress = []
    for i in live:
        full = FULL_LOAD_POWER_OVER_TDP * g.tdp_w[i]
        power = min(full, g.power_limit_w[i])
        steady = twin.ambient_c + THERMAL_HEADROOM_C / g.tdp_w[i] * power / g.cooling[i]
        gpu = int(g.index_on_node[i])
        if steady >= g.slowdown_c[i]:
            stress.append(f"GPU {gpu} would reach {steady:.0f} C at full load (slowdown {g.slowdown_c[i]:.0f} C)")
        if g.power_brake[i]:
            stress.append(f"GPU {gpu} power brake asserted")
        if g.nvlink_error_rate_per_s[i] > 0:
            stress.append(f"GPU {gpu} NVLink errors under load")
    _check(out, "Stress", 3, stress, "headroom at full load")
    return out


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
