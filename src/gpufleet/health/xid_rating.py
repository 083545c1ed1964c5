"""How a verdict of the Xid policy (health/xid_policy.py, or the vendors' rules it hands amdgpu and habanalabs reports
to) is rated, the one rating every door gives it: the severity of the finding a report makes (the agent's kernel
detector files it so, the control plane's escalations too, and `gpufleet triage` rates its findings so), and what a
report that carries only an Xid's code can be judged (a metric series, which the shipped Xid alerts page on and
triage reads in a dcgm-exporter scrape).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpufleet.health.xid_policy import (
    Rule,
    Verdict,
    XidPolicy,
    XidSeverity,
    code_severities,
    code_verdicts,
    default_policy,
)
from gpufleet.model import Severity


def finding_severity(judged: Verdict | Rule) -> Severity:
    """The severity a verdict of the policy (or an escalation's rule) gives a report, whichever door reads it:
    critical when the policy rates the report FATAL (the shipped alert pages on such a code, and its runbook takes
    the GPU or node out of service); info when it is non-fatal and asks for nothing (IGNORE: kept, watched, never
    drained); else warning. FATAL wins over an IGNORE in the same verdict (NVIDIA's NVLink5 decode table rates an
    Xid 149 NETIR_LINK_EVT subcode Fatal with the resolution IGNORE): what the driver calls fatal is never filed as
    information."""
    if judged.severity is XidSeverity.FATAL:
        return Severity.critical
    return Severity.info if judged.action.value == "IGNORE" else Severity.warning


class CodeReading(BaseModel):
    """What a report that carries nothing but an Xid's code can be judged (a metric series such as dcgm-exporter's
    DCGM_EXP_XID_ERRORS_COUNT{xid="N"} or DCGM_FI_DEV_XID_ERRORS = N), as the shipped Xid alerts judge it: a code
    every line of which the policy rates FATAL is critical (GpuXidFatal pages); one whose line decides (`by_line`:
    an NVLink5 Xid's decoded unit and status, an Xid 64's failure text, the state an Xid 154 announces) is a warning
    (GpuXidLineDependent) until the line itself is read; one every line of which is NONFATAL is the bare code's
    verdict, a warning, or info when it asks for nothing."""

    model_config = ConfigDict(frozen=True)

    code: int
    severity: Severity
    by_line: bool
    verdict: Verdict  # the bare code's verdict: its action and reason, when the code alone decides


def code_reading(code: int, policy: XidPolicy | None = None) -> CodeReading:
    """The judgement of a report of Xid `code` that carries only the code (see `CodeReading`)."""
    policy = policy or default_policy()
    bare = code_verdicts(code, policy)[0]
    if len(code_severities(code, policy)) > 1:
        return CodeReading(code=code, severity=Severity.warning, by_line=True, verdict=bare)
    return CodeReading(code=code, severity=finding_severity(bare), by_line=False, verdict=bare)
