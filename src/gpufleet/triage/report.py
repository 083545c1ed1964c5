"""What triage says about one input: its format, findings with the lines that show them, and a verdict.

`faulty` means something needs action (a fatal Xid, a lost GPU, a failed hardware diagnostic); `degraded` means
warnings or below-expected performance; `unknown` means the input cannot support a verdict (nothing to judge, or it
ends mid-record with nothing fatal seen), and a note says why. A truncated input never gets a confident `healthy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.model import Severity

Verdict = Literal["healthy", "degraded", "faulty", "unknown"]
MAX_EVIDENCE = 8  # lines quoted per finding


@dataclass(slots=True)
class TriageFinding:
    check: str  # what looked: "xid", "ecc", "dcgmi: Memory", "nccl"
    severity: Severity
    message: str
    entity: str = ""  # a GPU's PCI id / index / UUID, a port, a rank or host
    code: str = ""  # "Xid 79", "SXid 22013", an NCCL class, a counter name
    fix: str = ""
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": str(self.severity),
            "entity": self.entity,
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
            "evidence": self.evidence[:MAX_EVIDENCE],
        }


@dataclass(slots=True)
class TriageReport:
    format: str
    source: str
    findings: list[TriageFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was assumed, stripped, or could not be read
    judged: bool = True  # False: the input held nothing this format's reader could judge
    complete: bool = True  # False: it ends mid-record

    @property
    def verdict(self) -> Verdict:
        severities = {f.severity for f in self.findings}
        if Severity.critical in severities:
            return "faulty"
        if not self.judged or not self.complete:
            return "unknown"
        return "degraded" if Severity.warning in severities else "healthy"

    def ordered(self) -> list[TriageFinding]:
        """The findings worst first, in the reader's order within a severity."""
        return sorted(self.findings, key=lambda f: -f.severity.rank)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "verdict": self.verdict,
            "findings": [f.as_dict() for f in self.ordered()],
            "notes": self.notes,
        }
