"""What the doctor reports: one finding per problem, on one object of one file."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


SEVERITY_ORDER = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: Severity
    file: str
    object: str  # Kind/namespace/name; "" for a file-level or cluster-level finding
    message: str
    fix: str
    line: int = 0  # 1-based line of the object's document in `file`; 0 when unknown

    def to_json(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "severity": str(self.severity),
            "file": self.file,
            "object": self.object,
            "message": self.message,
            "fix": self.fix,
        }


def ordered(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by file, line and rule: the order a person fixes them in."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.file, f.line, f.rule, f.object))
