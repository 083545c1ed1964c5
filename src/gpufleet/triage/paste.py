"""Pasted text back into what the tool printed: terminal colour, CRLF, `> ` quoting, shell prompts and echoed
command lines, `....` elisions, an author's `<===` markers and launcher prefixes (`[1,0]<stdout>:` from mpirun,
`0: ` from `srun --label`) are taken off, one line at a time, so a file of any size streams through in bounded
memory. What was taken off is counted, so the report can say so."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from gpufleet.parsers.kernel.stream import MAX_LINE_BYTES, MAX_SKIP_BYTES

# longer lines are cut at MAX_LINE (a line is never held whole past it), and a "line" longer than MAX_SKIP is not
# text (/dev/zero, a binary): reading stops there. The kernel-log skimmer uses the same bounds.
MAX_LINE, MAX_SKIP = MAX_LINE_BYTES, MAX_SKIP_BYTES

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_QUOTE = re.compile(r"^(?:\s{0,3}>(?: |$))+")
# `user@host:~$ cmd`, `[user@host dir]# cmd`, `(venv) $ cmd`, `PS C:\> cmd`; a bare `# ` or `% ` only before a
# command people paste the output of, since nccl-tests, perfquery and Prometheus print `# ` lines of their own
_PROMPT = re.compile(
    r"^\s*(?:\([\w.-]+\)\s*)?(?:\[[^\]\n]*@[^\]\n]*\]|[\w.-]+@[\w.-]+(?::[^\s$#]*)?)\s*[$#%]\s+\S"
    r"|^\s*(?:\([\w.-]+\)\s*)?\$\s+\S"
    r"|^\s*PS [^>]{1,80}> \S"
    r"|^\s*[#%]\s*(?:sudo\s+)?(?:nvidia-smi|dmesg|journalctl|dcgmi|ib\w+|perfquery|saquery|smpquery|kubectl|cat|z?grep"
    r"|egrep|tail|head|less|mpirun|srun|torchrun|python3?|\./\S+|\S+_perf)\b"
)
_ELISION = re.compile(
    r"^\s*(?:\.{3,}|…+|\[\s*\.{3}\s*\]|\(\s*\.{3}\s*\)|<\s*snip\s*>|\[\s*snip\s*\]|-+\s*snip\s*-+)\s*$"
)
# an author's pointer after the text: `  <=== this`, `  <-- here`, `  ==> the error`. It follows whitespace, and a
# right-pointing one is followed by words, not a number: iblinkinfo and ibqueryerrors print `)==>  12    1[  ]`
_MARKER = re.compile(
    r"\s+(?:<[=-]{2,}(?:\s.*)?|[=-]{2,}>(?:\s+(?!\d)\S.*)?|<-\s*(?:here|this|that|error|look)\b.*)$", re.I
)
_MPIRUN = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_SRUN_LABEL = re.compile(r"^\s{0,4}\d{1,6}: (?=\S)")
_CODE_FENCE = re.compile(r"^\s*```[\w-]*\s*$")


class Paste:
    """Cleans lines and counts what it took off."""

    def __init__(self, launchers: bool = True) -> None:
        self.launchers = launchers  # False keeps them: an NCCL log's reader learns each line's rank from them
        self.stripped: Counter[str] = Counter()
        self.lines = 0
        self.cut = 0  # lines longer than MAX_LINE

    def clean(self, line: str) -> str | None:
        """The line as the tool printed it, or None when it is not the tool's (a prompt, an elision).

        Each rule is tried only when a cheap look at the line says it could apply: most lines of a large log
        need none of them, and this runs once per line."""
        self.lines += 1
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE]
            self.cut += 1
        line = line.rstrip("\r\n")
        if "\r" in line:
            line = line.replace("\r", "")
        if "\x1b" in line:
            line, n = _ANSI.subn("", line)
            self.stripped["terminal colour"] += n > 0
        head = line.lstrip()[:1]
        if head == ">":
            line, n = _QUOTE.subn("", line)
            self.stripped["quoting"] += n
            head = line.lstrip()[:1]
        if self.launchers:
            if head == "[" and "]<std" in line[:24]:
                line = self._strip(_MPIRUN, line, "mpirun prefixes")
            elif head.isdigit() and ": " in line[:12]:
                line = self._strip(_SRUN_LABEL, line, "srun labels")
            head = line.lstrip()[:1]
        if head == "`" and _CODE_FENCE.match(line):
            self.stripped["code fences"] += 1
            return None
        if head in ".…[(<-" and _ELISION.match(line):
            self.stripped["elisions"] += 1
            return None
        if ("$" in line or "#" in line or "%" in line or "> " in line) and _PROMPT.match(line):
            self.stripped["prompts and echoed commands"] += 1
            return None
        if ("<" in line or ">" in line) and (marked := _MARKER.sub("", line)) != line:
            self.stripped["markers"] += 1
            line = marked
        return line

    def _strip(self, pattern: re.Pattern[str], line: str, what: str) -> str:
        new = pattern.sub("", line, count=1)
        if new != line:
            self.stripped[what] += 1
        return new

    def cleaned(self, lines: Iterable[str]) -> Iterator[str]:
        for raw in lines:
            line = self.clean(raw)
            if line is not None:
                yield line

    def notes(self) -> list[str]:
        out = [f"took off {what} ({n} line{'s' if n != 1 else ''})" for what, n in sorted(self.stripped.items()) if n]
        if self.cut:
            out.append(f"{self.cut} line(s) longer than {MAX_LINE} characters were cut")
        return out


def text_lines(stream: BinaryIO) -> Iterator[str]:
    """Lines of a byte stream as text (invalid UTF-8 replaced, never an error), read a bounded piece at a time."""
    while True:
        raw = stream.readline(MAX_LINE + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            rest, skipped = raw, 0
            while rest and not rest.endswith(b"\n"):  # skip the rest of an overlong line without holding it
                rest = stream.readline(MAX_LINE)
                skipped += len(rest)
                if skipped > MAX_SKIP:
                    yield raw.decode("utf-8", errors="replace")
                    return
        yield raw.decode("utf-8", errors="replace")
