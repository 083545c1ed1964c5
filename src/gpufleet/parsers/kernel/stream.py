"""A kernel log read from a byte stream, pure: the lines of a multi-gigabyte log worth parsing, found a chunk at a
time. Opening, following and rotating files is the live follower's work
(`gpufleet.sources.node.kernel_log`); the parsing itself is `KmsgParser`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

import re2

from gpufleet.parsers.kernel.vendors import CANDIDATE_WORDS as VENDOR_WORDS

CHUNK_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut here
MAX_SKIP_BYTES = 16 * 1024 * 1024  # a "line" longer than this is not text (/dev/zero, a binary): reading stops
# what a line must hold for the kernel-log parser to read it. Its reports may span lines (a fallen-off-the-bus report
# over three, a printk's indented continuations), so the lines after one of these are read too. A journald JSON line
# may spell its message as a byte array, so those (a line starting with `{`) are always read.
PARSER_WORDS = (b"NVRM", b"SXid", b"nvswitch", *VENDOR_WORDS)  # VENDOR_WORDS: amdgpu and habanalabs reports
# what a line must hold for the other readers of a kernel log: a link going down or up, and a line of the kernel's
# OOM killer's report (for triage to tell a host-memory kill from a GPU-memory one). Each is read on its own line.
LINE_WORDS = (
    b"lost carrier",
    b"Gained carrier",
    b": Link down",
    b": Link up",
    b"Killed process",
    b"Kill process",
    b"oom-kill:",
    b"invoked oom-killer",
    b"oom_reaper",
    b"memory: usage",
    b"Memory cgroup stats for",
    b"killed as a result of limit",
)
CANDIDATE_WORDS = PARSER_WORDS + LINE_WORDS
# every word in one pattern, searched once over a chunk. RE2 runs it as one automaton at a fixed cost per byte; the
# standard library's regex tries the words one by one at every offset that starts one (slower than a find per word,
# which itself costs a pass over the chunk per word). A JSON line's `{` is one more parser's word.
_CANDIDATE = re2.compile(b"(?m)" + b"|".join(re.escape(word) for word in CANDIDATE_WORDS) + rb"|^\{")
# which reader a found word is for, told by its first byte (no word of the parser's starts like another reader's, as
# a test checks): asking the match for a group costs more than the search itself
PARSER_FIRST_BYTES = frozenset(word[0] for word in (*PARSER_WORDS, b"{"))
# the lines after a parser's candidate also go to the parser: a multi-line report's later lines need not repeat a
# trigger
_CONTEXT_LINES = 4
KMSG_RECORD = re.compile(rb"^\d+,\d+,\d+,")  # a /dev/kmsg record's prio,seq,usec, prefix


def _line_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """The stream in blocks of whole lines (the last may lack its newline); a line longer than MAX_LINE_BYTES
    is cut there, so no block holds more than a chunk and one line."""
    buf = b""
    overlong = False  # the rest of a cut line is being dropped
    skipped = 0
    while chunk := stream.read(CHUNK_BYTES):
        if overlong:
            newline = chunk.find(b"\n")
            if newline == -1:
                skipped += len(chunk)
                if skipped > MAX_SKIP_BYTES:
                    break
                continue
            chunk, overlong, skipped = chunk[newline:], False, 0
        buf += chunk
        end = buf.rfind(b"\n") + 1
        if end:
            block, buf = buf[:end], buf[end:]
            yield block
        if len(buf) > MAX_LINE_BYTES:
            buf, overlong = buf[:MAX_LINE_BYTES], True
    if buf:
        yield buf


def candidate_lines(
    stream: BinaryIO, first_line: int = 1, *, context_after_all: bool = False
) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines of a kernel log worth parsing, read a chunk at a time: the rest of a
    multi-gigabyte log is skipped by one scan of a chunk instead of a Python step per line. A line holding a word of
    the parser's is followed by the next _CONTEXT_LINES lines; `context_after_all` follows every candidate so (a
    terminal's hard wrap: a line's rest is on the next line). Feed them with `KmsgParser.skip_to(number)` before each
    line, so line numbers and line-count windows stay those of the file."""
    lineno = first_line  # the number of the line starting at `pos`
    context_until = 0  # lines up to this number follow a candidate closely enough to be read too
    for block in _line_blocks(stream):
        size = len(block)
        pos = 0
        for start, end, context in (*_candidate_spans(block), (size, size, False)):
            while pos < start and lineno <= context_until:  # the lines just after the last candidate
                line_end = block.find(b"\n", pos, start)
                line_end = start if line_end == -1 else line_end
                yield lineno, _text(block[pos:line_end])
                pos, lineno = line_end + 1, lineno + 1
            if pos < start:
                lineno += block.count(b"\n", pos, start)
            if start == size:
                break
            yield lineno, _text(block[start:end])
            if context or context_after_all:
                context_until = lineno + _CONTEXT_LINES
            pos, lineno = end + 1, lineno + 1
        if pos < size and not block.endswith(b"\n"):
            lineno += 1  # the last line, without its newline, was passed over


def _candidate_spans(block: bytes) -> list[tuple[int, int, bool]]:
    """(start, end, holds a parser's word) of the lines holding a candidate word, in order, each once."""
    spans: list[tuple[int, int, bool]] = []
    line_end = -1
    for match in _CANDIDATE.finditer(block):
        at = match.start()
        parsers = block[at] in PARSER_FIRST_BYTES
        if at < line_end:  # another word on a line already taken
            if parsers and not spans[-1][2]:
                spans[-1] = (spans[-1][0], line_end, True)
            continue
        line_end = block.find(b"\n", at)
        if line_end == -1:
            line_end = len(block)
        spans.append((block.rfind(b"\n", 0, at) + 1, line_end, parsers))
    return spans


def _text(raw: bytes) -> str:
    return raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r")
