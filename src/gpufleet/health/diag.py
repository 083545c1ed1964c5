"""Node health checks at DCGM's run levels, and the rule that a diagnostic PASS with links down is not trusted.

- r1 (quick): the driver answers and matches its components, persistence and ECC modes, pending page retirement
  or row remap, NVLink as the GPU model has it (health.nvlink), every GPU present.
- r2 (medium): adds memory (volatile uncorrectable ECC, row-remap failure, remapped-row budget) and PCIe (link at
  its maximum generation and width, replays within DCGM's per-lane budget), and the node's InfiniBand ports.
- r3 (long): adds a stress check. On a real node that is `dcgmi diag -r 3`; on the twin (`gpufleet.sim.diag`) it is
  the steady state each GPU would reach at full load with its current cooling and power limits (thermal headroom,
  power brake, NVLink error rate), which is what a burn test exposes.

`dcgmi diag` is used when present and judged by `gpufleet.health.dcgm_diag.assess`, the judgement `gpufleet triage`
gives the same output: a failure whose only reasons are the diagnostic's own errors makes the run Unknown, never a
GPU failure, and an output that is cut or lacks its level's tests is Unknown, never Pass. Its verdict is combined
with our own link checks: dcgmi has passed -r 2 with every NVLink down (NVIDIA/DCGM#198), so a PASS next to a down
link becomes a FAIL that says why. A saved `nvidia-smi nvlink -s` is judged by `gpufleet.health.nvlink`, the
judgement `gpufleet triage` gives it: a PCIe card without NVLink bridges has no active link by design, not a fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.health.dcgm_diag import DiagAssessment, assess
from gpufleet.health.nvlink import NvlinkJudgement, judge_nvlink
from gpufleet.model import Severity
from gpufleet.parsers.nvidia.dcgmi_diag import DiagReport
from gpufleet.parsers.nvidia.topo import NvlinkGpu, NvlinkStatus

Status = Literal["Pass", "Fail", "Warn", "Skip", "Unknown"]
_RANK = {"Skip": 0, "Pass": 1, "Warn": 2, "Unknown": 3, "Fail": 4}


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
    assessment: DiagAssessment | None = None

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
    report: DiagReport,
    node: str,
    level: int,
    nvlink: NvlinkStatus | Sequence[NvlinkGpu] | None = None,
    ib_down: list[str] | None = None,
) -> DiagOutcome:
    """dcgmi's verdict judged (the GPUs, a setting, or the diagnostic itself), plus our link checks: its PASS is not
    trusted while NVLink or HCA links are down."""
    assessment = assess(report, level)
    out = DiagOutcome(node, level, dcgmi=report, assessment=assessment)
    for verdict in assessment.tests:
        out.checks.append(Check(f"dcgmi: {verdict.test.name}", level, verdict.status, verdict.detail))
    for issue in assessment.issues:
        if issue.test == "dcgmi":  # dcgmi's own failure, printed outside the table
            status: Status = "Fail" if issue.severity == "critical" else "Unknown"
            out.checks.append(Check("dcgmi", level, status, f"{issue.message} ({issue.fix})"))
    if assessment.gaps:
        out.checks.append(Check("dcgmi output", level, "Unknown", "; ".join(assessment.gaps)))
    if assessment.verdict == "Unknown" and all(c.status in ("Pass", "Skip") for c in out.checks):
        out.checks.append(Check("dcgmi output", level, "Unknown", "no test of the run can be judged"))
    links = link_check(level, nvlink, ib_down, dcgmi_verdict=report.verdict)
    if links is not None:
        out.checks.append(links)
    return out


def link_check(
    level: int,
    nvlink: NvlinkStatus | Sequence[NvlinkGpu] | None,
    ib_down: list[str] | None = None,
    dcgmi_verdict: str | None = None,
) -> Check | None:
    """NVLink (a `nvidia-smi nvlink -s`, judged by health.nvlink exactly as `gpufleet triage` judges it) and HCA
    links: Fail naming what is down, Warn for degraded NVLinks, Unknown when the listing cannot be judged, Pass
    otherwise (a PCIe card without NVLink bridges has no active link by design); None when nothing was given."""
    if nvlink is None and not ib_down:
        return None
    judged = judge_nvlink(nvlink) if nvlink is not None else NvlinkJudgement()
    down = [f"{i.entity}: {i.message}" for i in judged.issues if i.severity is Severity.critical]
    down += [f"{port} link down" for port in ib_down or []]
    if down:
        trusted = "" if dcgmi_verdict in (None, "Fail") else f"dcgmi said {dcgmi_verdict} but "
        return Check("Links", level, "Fail", trusted + "; ".join(down))
    if judged.verdict == "Warn":
        said = [f"{i.entity}: {i.message}" for i in judged.issues if i.severity is Severity.warning]
        return Check("Links", level, "Warn", "; ".join(said))
    if judged.verdict == "Unknown":
        why = [w for w in (judged.cut_short, judged.partial, *judged.notes) if w]
        return Check("Links", level, "Unknown", "; ".join(why) or "no GPU's NVLinks can be judged")
    gpus = (nvlink.gpus if isinstance(nvlink, NvlinkStatus) else nvlink) if nvlink is not None else []
    if gpus and all(g.links and g.active_links == len(g.links) for g in gpus):
        return Check("Links", level, "Pass", f"{len(gpus)} GPU(s), every NVLink active")
    return Check("Links", level, "Pass", "; ".join(judged.notes) or "every link up")


def judge_links(node: str, level: int, nvlink: NvlinkStatus | Sequence[NvlinkGpu]) -> DiagOutcome:
    """The link checks alone, from a saved `nvidia-smi nvlink -s` (no diagnostic run)."""
    out = DiagOutcome(node, level)
    check = link_check(level, nvlink)
    if check is not None:
        out.checks.append(check)
    return out
