"""The setup errors a log holds (health.setup_errors judges each line against catalog/data/setup_errors.yaml): one
finding per fault, however many ranks or restarts printed it, with what the lines name (the CUDA version an image
requires, the GPU's compute capability and what the build carries, the NVML library's version). Application logs,
`kubectl describe pod` and `kubectl get events` feed their lines through one `SetupErrors`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpufleet.catalog.setup_errors import setup_error_hint
from gpufleet.health.setup_errors import SetupIssue, judge_setup_line, supported_archs
from gpufleet.triage.report import MAX_EVIDENCE, TriageFinding, TriageReport

CHECK = "setup"
_HINT = setup_error_hint()  # the patterns' literal starts: most lines are passed over on this one search
_NVML_VERSION = re.compile(r"NVML library version: (?P<version>[\d.]+)")
CONTEXT_LINES = 5  # a line that completes a report (PyTorch's list of capabilities, NVML's version) follows it


@dataclass
class _Seen:
    issue: SetupIssue
    entities: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


class SetupErrors:
    """Collects the setup errors of one input, line by line."""

    def __init__(self, numbered: bool = True) -> None:
        self.numbered = numbered  # False: the numbers fed are a count of the texts read, not an input's lines
        self.seen: dict[str, _Seen] = {}
        self._last: tuple[int, _Seen] | None = None  # the last report, for the lines that complete it

    def might_hold(self, number: int, line: str) -> bool:
        """False when `feed` would do nothing with the line: a cheap test for callers whose entity costs a search."""
        return (self._last is not None and number - self._last[0] <= CONTEXT_LINES) or _HINT.search(line) is not None

    def feed(self, number: int, line: str, entity: str = "") -> bool:
        """Reads one line; True when it reported a setup error."""
        if self._last is not None and number - self._last[0] <= CONTEXT_LINES:
            self._complete(self._last[1], line)
        if not _HINT.search(line):
            return False
        issue = judge_setup_line(line)
        if issue is None:
            return False
        seen = self.seen.get(issue.id)
        if seen is None:
            seen = self.seen[issue.id] = _Seen(issue)
        for detail in issue.details:
            if detail not in seen.details:
                seen.details.append(detail)
        if entity and entity not in seen.entities:
            seen.entities.append(entity)
        seen.numbers.append(number)
        if len(seen.lines) < MAX_EVIDENCE:
            seen.lines.append(line.strip()[:2000])
        self._last = (number, seen)
        return True

    def _complete(self, seen: _Seen, line: str) -> None:
        detail = ""
        if seen.issue.id == "no-kernel-image" and (archs := supported_archs(line)):
            detail = f"the build carries {archs}"
        elif seen.issue.id == "nvml-version-mismatch" and (m := _NVML_VERSION.search(line)):
            detail = f"the user-space NVML library is {m['version']}"
        if detail and detail not in seen.details:
            seen.details.append(detail)
            if len(seen.lines) < MAX_EVIDENCE:
                seen.lines.append(line.strip()[:2000])

    @property
    def found(self) -> bool:
        return bool(self.seen)

    def into(self, report: TriageReport) -> None:
        for seen in self.seen.values():
            error = seen.issue.error
            count = len(seen.numbers)
            lines = f", lines {seen.numbers[0]}-{seen.numbers[-1]}" if self.numbered else ""
            where = f" ({count} reports{lines})" if count > 1 else ""
            codes = f" ({', '.join(error.codes)})" if error.codes else ""
            named = f"; {'; '.join(seen.details)}" if seen.details else ""
            message = f"{seen.issue.text.rstrip('.')}{codes}: {error.cause}{named}{where}"
            entity = ", ".join(seen.entities[:6]) + (f" and {len(seen.entities) - 6} more" if len(seen.entities) > 6
                                                     else "")  # fmt: skip
            report.findings.append(
                TriageFinding(CHECK, seen.issue.severity, message, entity, error.id, error.fix, seen.lines)
            )
