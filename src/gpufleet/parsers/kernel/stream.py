"""A kernel log read from a byte stream, pure: the lines of a multi-gigabyte log worth parsing, found a chunk at a
time. Opening, following and rotating files is the live follower's work
(`gpufleet.sources.node.kernel_log`); the parsing itself is `KmsgParser`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from gpufleet.parsers.kernel.vendors import CANDIDATE_WORDS as VENDOR_WORDS

CHUNK_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut here
MAX_SKIP_BYTES = 16 * 1024 * 1024  # a "line" longer than this is not text (/dev/zero, a binary): reading stops
# what a line must hold for the parser (or a link-flap count) to read it; each is looked for with bytes.find, many
# times faster than one regex alternation over gigabytes. A journald JSON line may spell its message as a byte
# array, so those (a line starting with `{`) are always read.
CANDIDATE_WORDS = (
    b"NVRM",
    b"SXid",
    b"nvswitch",
    *VENDOR_WORDS,  # amdgpu and habanalabs reports
    b"lost carrier",
    b"Gained carrier",
    b": Link down",
    b": Link up",
    # the kernel's OOM killer, for triage to tell a host-memory kill from a GPU-memory one
    b"Killed process",
    b"Kill process",
    b"oom-kill:",
    b"invoked oom-killer",
    b"oom_reaper",
    b"memory: usage",
    b"Memory cgroup stats for",
    b"killed as a result of limit",
)
# the lines after a candidate also go to the parser: a multi-line report's later lines need not repeat a trigger
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


def candidate_lines(stream: BinaryIO, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines of a kernel log worth parsing, read a chunk at a time: the rest of a
    multi-gigabyte log is skipped by one regex scan instead of a Python step per line. Feed them with
    `KmsgParser.skip_to(number)` before each line, so line numbers and line-count windows stay those of the file."""
    lineno = first_line  # the number of the line starting at `pos`
    context_until = 0  # lines up to this number follow a candidate closely enough to be read too
    for block in _line_blocks(stream):
        pos = 0
        for start in (*_candidate_starts(block), len(block)):
            if start < pos:
                continue  # a second trigger on a line already taken
            while pos < start and lineno <= context_until:  # the lines just after the last candidate
                line_end = block.find(b"\n", pos, start)
                line_end = start if line_end == -1 else line_end
                yield lineno, _text(block[pos:line_end])
                pos, lineno = line_end + 1, lineno + 1
            lineno += block.count(b"\n", pos, start)
            if start == len(block):
                break
            line_end = block.find(b"\n", start)
            line_end = len(block) if line_end == -1 else line_end
            yield lineno, _text(block[start:line_end])
            context_until = lineno + _CONTEXT_LINES
            pos, lineno = line_end + 1, lineno + 1
        if pos < len(block) and not block.endswith(b"\n"):
            lineno += 1  # the last line, without its newline, was passed over


def _candidate_starts(block: bytes) -> list[int]:
    """The offsets where the lines holding a candidate word start, in order, each once."""
    starts: set[int] = set()
    for word in CANDIDATE_WORDS:
        at = block.find(word)
        while at != -1:
            line_start = block.rfind(b"\n", 0, at) + 1
            starts.add(line_start)
            at = block.find(b"\n", at)  # on to the next line: one hit per line is enough
            at = -1 if at == -1 else block.find(word, at)
    if block.startswith(b"{"):
        starts.add(0)
    at = block.find(b"\n{")
    while at != -1:
        starts.add(at + 1)
        at = block.find(b"\n{", at + 1)
    return sorted(starts)


def _text(raw: bytes) -> str:
    return raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace").rstrip("\r")
