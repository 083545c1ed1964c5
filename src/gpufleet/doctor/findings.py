"""What the doctor reports: one finding per problem, on one object of one file."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model import Severity

# The doctor speaks as linters do: what the model calls critical is an "error" in its output (JSON, YAML, the
# table, --list-rules) and in the rule files (data/rules/*.yaml); warning and info keep their names.
_LABELS = {Severity.critical: "error", Severity.warning: "warning", Severity.info: "info"}
_FROM_LABEL = {label: severity for severity, label in _LABELS.items()}


def label(severity: Severity) -> str:
    """The doctor's word for `severity`: error, warning or info."""
    return _LABELS[severity]


def from_label(text: str) -> Severity:
    """A severity as the rule files spell it (error, warning or info), as the model's."""
    try:
        return _FROM_LABEL[text]
    except (KeyError, TypeError):
        raise ValueError(f"severity {text!r} is not error, warning or info") from None


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
            "severity": label(self.severity),
            "file": self.file,
            "object": self.object,
            "message": self.message,
            "fix": self.fix,
        }


def ordered(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by file, line and rule: the order a person fixes them in."""
    return sorted(findings, key=lambda f: (-f.severity.rank, f.file, f.line, f.rule, f.object))
