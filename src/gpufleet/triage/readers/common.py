"""What every reader shares: the bounds on what one input may hold and the whole-text view for parsers that need it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from gpufleet.triage.report import TriageReport

MAX_TEXT = 64 * 1024 * 1024  # a whole-text parser never gets more than this (kernel logs stream instead)
MAX_FINDINGS = 500  # per input; a log with more says how many were left out

Reader = Callable[[Iterable[str], str], TriageReport]


def bounded_lines(lines: Iterable[str], report: TriageReport) -> Iterator[str]:
    """The lines up to MAX_TEXT characters in all; past that the report says the rest was not read."""
    size = 0
    for line in lines:
        size += len(line) + 1
        if size > MAX_TEXT:
            report.notes.append(f"only the first {MAX_TEXT // (1024 * 1024)} MiB were read")
            report.complete = False
            return
        yield line


def bounded_text(lines: Iterable[str], report: TriageReport) -> str:
    """The lines as one text for a whole-text parser, up to MAX_TEXT."""
    return "\n".join(bounded_lines(lines, report))
