"""Triage one input end to end: stream its lines through the paste cleaner, tell its format from the first lines,
and hand the rest to that format's reader without holding the whole input (a kernel log of any size streams)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import BinaryIO

from gpufleet.parsers.kernel.stream import candidate_lines
from gpufleet.triage.detect import SAMPLE_LINES, Detector
from gpufleet.triage.formats import REGISTRY
from gpufleet.triage.paste import SHAPE_LINES, Cleaned, Paste, Shape, text_lines
from gpufleet.triage.report import TriageReport

SAMPLE_CHARS = 4 * 1024 * 1024  # the sample a format is told from never holds more than this
WIDE_SAMPLE_LINES = 20_000  # a kernel log may start with thousands of lines before its first NVIDIA one


def kernel_log_lines(stream: BinaryIO, paste: Paste, head: Sequence[str] = ()) -> Iterator[tuple[int, str]]:
    """The numbered, cleaned lines of a kernel log worth parsing: `head` (the lines already read from `stream`)
    whole, then the rest of the stream skimmed a chunk at a time (`kmsg_stream.candidate_lines`). A paste wrapped at
    a terminal's width has every candidate's next lines read too: they may be its rest."""
    rest = candidate_lines(stream, len(head) + 1, context_after_all=paste.shape.wrap > 0)
    return paste.numbered(chain(enumerate(head, start=1), rest))


def triage_lines(raw: Iterable[str], source: str, fmt: str | None = None) -> TriageReport:
    """Judge the raw lines of one input (as read or pasted). `fmt` forces a format instead of telling it."""
    return _triage(iter(raw), None, source, fmt)


def triage_stream(stream: BinaryIO, source: str, fmt: str | None = None) -> TriageReport:
    """Judge a byte stream; a kernel log's lines past the sample are skimmed a chunk at a time for the few that
    hold a GPU or link report, so a log of any size reads at the speed of one regex scan."""
    return _triage(text_lines(stream), stream, source, fmt)


def _triage(raw_iter: Iterator[str], stream: BinaryIO | None, source: str, fmt: str | None) -> TriageReport:
    """`raw_iter` gives the lines; when `stream` is the stream it reads, a kernel log may take the rest from it."""
    sample: list[str] = []  # raw lines held to tell the format
    size = 0
    for line in raw_iter:  # the first lines, which the paste's shape (a list, an indentation, a wrap) is learnt from
        sample.append(line)
        size += len(line)
        if len(sample) >= SHAPE_LINES or size >= SAMPLE_CHARS:
            break
    shape = Shape.learn(sample)
    found = fmt
    if found is None:
        found = _tell(sample, raw_iter, Paste(shape=shape))
    if found is None:
        report = TriageReport("unknown", source, judged=False)
        report.notes.append(f"not a format triage knows ({', '.join(REGISTRY.names())})")
        if not sample:
            report.notes[-1] = "the input is empty"
        return report
    # a format judged as another (a syslog's link events, judged as the kernel log they are) is read as that one
    judged = REGISTRY.judged(found) if found in REGISTRY else None
    # start again from the first line, cleaned for this format, and go on through the rest as it streams
    paste = Paste(launchers=judged is None or not judged.keeps_launchers, shape=shape)
    if judged is not None and judged.judge_numbered is not None and stream is not None:
        report = judged.judge_numbered(kernel_log_lines(stream, paste, sample), source)
    else:
        report = REGISTRY.judge(found, Cleaned(paste, chain(sample, raw_iter)), source)
    report.notes[:0] = paste.notes()
    if judged is not None and judged.name != found:
        report.notes.insert(0, f"{found} is judged as {judged.name}, the format its lines belong to")
    return report


def _tell(sample: list[str], raw_iter: Iterator[str], paste: Paste) -> str | None:
    """The format of the input from its cleaned first lines; past the usual sample the first sure answer is taken,
    up to WIDE_SAMPLE_LINES. Lines read past `sample` are added to it."""
    detector = Detector()
    size = sum(map(len, sample))

    def raw() -> Iterator[str]:
        nonlocal size
        yield from list(sample)
        while size < SAMPLE_CHARS and len(sample) < WIDE_SAMPLE_LINES:
            line = next(raw_iter, None)
            if line is None:
                return
            sample.append(line)
            size += len(line)
            yield line

    for number, line in paste.numbered(enumerate(raw(), start=1)):
        detector.feed(line)
        if number >= SAMPLE_LINES and (found := detector.best()) is not None:
            return found
    return detector.best()
