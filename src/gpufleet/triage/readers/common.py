"""What every reader shares: the bounds on what one input may hold and the whole-text view for parsers that need it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpufleet.triage.report import TriageReport

MAX_TEXT = 64 * 1024 * 1024  # a whole-text parser never gets more than this (kernel logs stream instead)
MAX_FINDINGS = 500  # per input; a log with more says how many were left out

Reader = Callable[[Iterable[str], str], TriageReport]


def bounded_text(lines: Iterable[str], report: TriageReport) -> str:
    """The lines as one text for a whole-text parser, up to MAX_TEXT (a note says when more was left unread)."""
    parts: list[str] = []
    size = 0
    for line in lines:
        size += len(line) + 1
        if size > MAX_TEXT:
            report.notes.append(f"only the first {MAX_TEXT // (1024 * 1024)} MiB were read")
            report.complete = False
            break
        parts.append(line)
    return "\n".join(parts)
