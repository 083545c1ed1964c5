"""Pasted text back into what the tool printed, in one step every reader goes through.

Two kinds of damage are undone. What a paste does to the whole text is learnt once from its first lines (`Shape`):
a markdown list it was pasted into (`- `, `* `, `1. ` before the first line and that item's indentation on the
rest), a uniform indentation (a four-space code block, output indented in a ticket), a terminal's hard wrap at a
fixed width (a line exactly that wide continued on the next), and launcher tags every line carries (`[0] ` from
Intel MPI's -prepend-rank, torchrun's `[default0]:` and `[rank0]:`). What a paste does to single lines is undone
line by line: terminal colour, CRLF, `> ` quoting, ``` fences (alone, or on the first and last lines of content),
shell prompts and echoed command lines (their commands noted for the readers, `Cleaned`), `....` elisions, an
author's `<===` markers, the launcher prefixes `[1,0]<stdout>:` (mpirun --tag-output) and `0: ` (srun --label), and
the log source `kubectl logs --prefix` and `oc logs --prefix` put before each line (`[pod/NAME/CONTAINER] `,
`[node/NAME] `). A kernel log's `dmesg -T` stamps are a framing the kernel-log parser reads
(parsers/kernel/framing.py), left as they are.

Lines stream through in bounded memory (one line is held back to join a wrapped one); what was taken off is
counted, so the report can say so."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import BinaryIO

from gpufleet.parsers.kernel.stream import MAX_LINE_BYTES, MAX_SKIP_BYTES

# longer lines are cut at MAX_LINE (a line is never held whole past it), and a "line" longer than MAX_SKIP is not
# text (/dev/zero, a binary): reading stops there. The kernel-log skimmer uses the same bounds.
MAX_LINE, MAX_SKIP = MAX_LINE_BYTES, MAX_SKIP_BYTES
MAX_COMMANDS, MAX_COMMAND = 16, 400  # prompt lines' commands kept for the readers, and how much of each
SHAPE_LINES = 5000  # the first lines a paste's shape is learnt from (a wrap may show only past a long header)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_QUOTE = re.compile(r"^(?:\s{0,3}>(?: |$))+")
# `user@host:~$ cmd`, `[user@host dir]# cmd`, `(venv) $ cmd`, `PS C:\> cmd`; a bare `# ` or `% ` only before a
# command people paste the output of, since nccl-tests, perfquery and Prometheus print `# ` lines of their own
_PROMPT = re.compile(
    r"^\s*(?:\([\w.-]+\)\s*)?(?:\[[^\]\n]*@[^\]\n]*\]|[\w.-]+@[\w.-]+(?::[^\s$#]*)?)\s*[$#%]\s+(?P<a>\S)"
    r"|^\s*(?:\([\w.-]+\)\s*)?\$\s+(?P<b>\S)"
    r"|^\s*PS [^>]{1,80}> (?P<c>\S)"
    r"|^\s*[#%]\s*(?P<d>)(?:sudo\s+)?(?:nvidia-smi|dmesg|journalctl|dcgmi|ib\w+|perfquery|saquery|smpquery|kubectl"
    r"|cat|z?grep|egrep|tail|head|less|mpirun|srun|torchrun|python3?|\./\S+|\S+_perf|rocm-smi|amd-smi|hl-smi|oc"
    r"|mlxlink|mstlink)\b"
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
# `kubectl logs --prefix` (kubectl 1.18+, pkg/cmd/logs/logs.go: fmt.Sprintf("[pod/%s/%s] ", pod, container), and
# "[node/%s] " for a node's logs in 1.27+); `oc logs --prefix` is the same code. Pod and container names are DNS names
# (RFC 1123: lower-case letters, digits, '-' and '.'); a blank line keeps the tag, its space often trimmed. Every
# line carries its own pod's tag (`-l app=x` interleaves pods), so it is taken off line by line, not learnt
_KUBECTL_PREFIX = re.compile(r"^\[(?:pod/[a-z0-9][a-z0-9.-]*/[a-z0-9-]*|node/[a-z0-9][a-z0-9.-]*)\](?: |$)")
_CODE_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")
# a fence sharing its line with content: ```text [ 12.3] NVRM: ..., or ... last line```. The info string is taken
# off only when it is one (a language name); otherwise only the backticks are
_FENCE_INFO = (
    "text|txt|plaintext|plain|console|shell|shell-session|sh|bash|zsh|log|logs|output|none|nohighlight|yaml|yml|json"
    "|python|py|pytb|c|cpp|diff|ini|toml|csv|xml|ps|powershell|cmd|bat|raw|markdown|md|gpufleet"
)
_FENCE_OPEN = re.compile(rf"^\s*(?:```|~~~)(?:(?:{_FENCE_INFO})(?=\s|$))?\s*", re.I)
_FENCE_CLOSE = re.compile(r"\s*(?:```|~~~)\s*$")
# a markdown list item: the marker and the spaces after it set the item's indentation
_LIST_ITEM = re.compile(r"^(?P<indent> {0,3})(?P<marker>[-*+]|\d{1,3}[.)]) +(?=\S|\t)")
_EMPTY_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,3}[.)]) *$")
# a text pasted into a list a line at a time: every line its own item, the marker and one space before the tool's
# own line (whose indentation is the tool's: a -q section's keys, a YAML document's nesting)
_BULLET = re.compile(r"^ {0,3}(?P<marker>[-*+]|\d{1,3}[.)])(?: |$)")
# launcher tags that are told only when (nearly) every line has one: `[0] ` is also how hl-smi -q starts a block
# launcher tags on every line of a text, told from its first lines; each is taken off exactly, so the line keeps its
# own indentation. `[0] ` (Intel MPI -prepend-rank) is also how hl-smi -q starts a block: it counts only when (nearly)
# every line has it
_LAUNCHER_TAGS = {
    "mpirun prefixes": re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:"),  # Open MPI --tag-output: no space after
    "launcher tags": re.compile(r"^\[(?:\d{1,5}|default\d{1,5}|rank\d{1,5})\]:? ?"),  # -prepend-rank, torchrun
    "srun labels": re.compile(r"^ {0,4}\d{1,6}: ?"),  # srun --label: `%*d: `
}
# where a line of a log or a table begins: a line that starts like this is no wrapped line's continuation
_RECORD_START = re.compile(
    r"^(?:\s*$|\[\s*\d+\.\d+\]|\[\w{3} \w{3} |\w{3} [ \d]\d \d\d:\d\d|\d{4}-\d\d-\d\d|<\d+>|[|+#]|={3}|\S+@\S+[:$#]|\$ "
    r"|[\w.-]+:\d+:\d+ \[\d+\]|GPU\[\d+\]|\[\d+,\d+\]<|\[(?:\d{1,5}|default\d+|rank\d+)\][: ]|\d{1,6}: "
    r"|\[(?:pod|node)/)"
)
# terminal widths people use: a text whose longest lines are of another width is taken as printed (a tool's own
# aligned lines are often all as long as each other, and the next line after them starts anew)
_WIDTHS = frozenset((80, 100, 120, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256))
_RULE = " |+=-_~*"  # what a rule is drawn with
# a line none of the steps below would change, told by one match instead of each step's own test (a kernel log streams
# a million lines through here): no CR or newline, colour, fence, quote, marker, prompt or launcher character, and a
# start that is none of a quote, an elision, a log source, a label or an indentation (a dmesg stamp is none of them)
_UNTOUCHED = re.compile(r"(?:\[ *\d+\.\d+\]|[^\s\d.…\[(<\->`~$#%\x1b])[^\r\n\x1b<>`~$#%]*")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class Shape:
    """What pasting did to a whole text, learnt from its first lines."""

    list_indent: int = 0  # a markdown list item's indentation: its marker on the first line, spaces on the rest
    bullets: bool = False  # every line an item of its own: the marker and one space taken off each
    indent: int = 0  # spaces before every line (after the list's)
    wrap: int = 0  # a terminal's width: a line exactly this wide went on on the next line
    tag: str | None = None  # the launcher tag before every line (a key of _LAUNCHER_TAGS)

    @classmethod
    def learn(cls, raw: Iterable[str]) -> Shape:
        """The shape of a text from its first lines (SHAPE_LINES at most are looked at)."""
        lines = [line for n, r in enumerate(raw) if n < SHAPE_LINES and (line := _display(r)) is not None]
        body = [line for line in lines if line.strip()]
        if not body:
            return cls()
        if _bulleted(body):
            body = [_BULLET.sub("", line, count=1) for line in body]
            lines = [_BULLET.sub("", line, count=1) for line in lines]
            list_indent, bullets = 0, True
        else:
            list_indent, bullets = _list_indent(body), False
        body = [_unlist(line, list_indent) for line in body]
        indent = min((len(line) - len(line.lstrip(" ")) for line in body if line.strip()), default=0)
        body = [line[indent:] for line in body]
        tag = next((name for name, tag in _LAUNCHER_TAGS.items() if _every(body, tag)), None)
        shown = [line[indent:] for line in _unlisted(lines, list_indent)]
        return cls(list_indent, bullets, indent, _wrap_width(shown), tag)


def _every(lines: Sequence[str], tag: re.Pattern[str]) -> bool:
    tagged = sum(1 for line in lines if tag.match(line))
    return tagged >= min(3, len(lines)) and tagged >= 0.8 * len(lines)


def _display(raw: str) -> str | None:
    """A line as it was on screen before it was pasted: without CR, colour, quoting and a fence; None for a fence
    line alone."""
    line = raw.rstrip("\r\n")
    if "\r" in line:
        line = line.replace("\r", "")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.lstrip()[:1] == ">":
        line = _QUOTE.sub("", line)
    if "```" in line or "~~~" in line:
        if _CODE_FENCE.match(line):
            return None
        line = _FENCE_CLOSE.sub("", _FENCE_OPEN.sub("", line, count=1))
    if "<" in line or ">" in line:
        line = _MARKER.sub("", line)
    return line


def _bulleted(body: Sequence[str]) -> bool:
    """Every line an item of its own, with one kind of marker (numbered items count as one kind)."""
    if len(body) < 3:
        return False
    kinds = set()
    for line in body:
        item = _BULLET.match(line)
        if item is None:
            return False
        marker = item.group("marker")
        kinds.add(marker if marker in "-*+" else "number")
    return len(kinds) == 1


def _content_start(item: re.Match[str]) -> int:
    """Where a list item's text starts: after the marker and its spaces; but where five or more spaces follow the
    marker, after one of them (CommonMark: the rest is the text's own indentation, as in a pasted table whose header
    line starts with spaces or a tab, like `nvidia-smi topo -m`'s)."""
    marker_end = len(item.group("indent")) + len(item.group("marker"))
    own = item.end() - marker_end > 4 or item.string[item.end() : item.end() + 1] == "\t"
    return marker_end + 1 if own else item.end()


def _list_indent(body: Sequence[str]) -> int:
    """The indentation of a markdown list the text was pasted into, or 0: its first line is an item and every
    other line is an item of the same list or indented as far as its text."""
    first = _LIST_ITEM.match(body[0])
    if first is None:
        return 0
    width, indent = _content_start(first), first.group("indent")
    for line in body[1:]:
        item = _LIST_ITEM.match(line)
        if item is not None and item.group("indent") == indent:
            continue
        if _EMPTY_ITEM.match(line):  # an item with nothing after its marker: a blank line of the text, bulleted
            continue
        if len(line) - len(line.lstrip(" ")) < width:
            return 0
    return width


def _unlist(line: str, width: int) -> str:
    if not width:
        return line
    if _EMPTY_ITEM.match(line):
        return ""
    item = _LIST_ITEM.match(line)
    if item is not None and _content_start(item) <= width + 1:
        return line[_content_start(item) :]
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, width) :]


def _unlisted(lines: Iterable[str], width: int) -> Iterator[str]:
    return (_unlist(line, width) for line in lines)


def _continues(line: str, following: str) -> bool:
    """`following` is the rest of `line`, a terminal wrapped it there: not a line of its own, nor a table's."""
    if not following.strip():
        return False
    if line[:1] in "|+":  # a table's row or rule cut at the terminal's edge: its rest closes the row
        return following.strip() in ("|", "+") or (following[:1] not in "|+" and following.rstrip()[-1:] in "|+")
    if _RECORD_START.match(following) or not line.strip(_RULE):
        return False  # a line of its own after a rule as wide as the terminal
    # an indented line of a report's own (a key under its heading) is not a cut word's rest; a line cut inside a
    # run of spaces (between a table's columns) goes on with spaces
    if (following[0] == "\t" or following.startswith("  ")) and not line.endswith(" "):
        return False
    return not _siblings(line, following)


def _siblings(line: str, other: str) -> bool:
    """Two lines of one kind (`GPU0 ...` and `GPU1 ...`, two rows of numbers): they start alike, digits aside."""
    a, b = (_DIGITS.sub("0", text).split(None, 2)[:2] for text in (line, other))
    if a[:1] != b[:1]:
        return False
    return any(c.isalpha() for c in a[0]) or a == b


def _wrap_width(lines: Sequence[str]) -> int:
    """The width a terminal wrapped the text at, or 0: the longest lines are all that wide, and some of them go
    on on the next line."""
    lengths = Counter(len(line) for line in lines)
    if not lengths:
        return 0
    width = max(lengths)
    if width not in _WIDTHS:
        return 0
    wrapped = {a for a, b in pairwise(lines) if len(a) == width and _continues(a, b)}
    if not wrapped:
        return 0
    return width


class Paste:
    """Cleans lines and counts what it took off."""

    def __init__(self, launchers: bool = True, shape: Shape | None = None) -> None:
        self.launchers = launchers  # False keeps them: an NCCL log's reader learns each line's rank from them
        self.shape = shape or Shape()
        self.stripped: Counter[str] = Counter()
        self.lines = 0
        self.cut = 0  # lines longer than MAX_LINE
        self.commands: list[str] = []  # the commands of the prompt lines taken off, the latest MAX_COMMANDS

    # -- the whole-text shape, then each line ---------------------------------------------------------------------
    def unframe(self, line: str) -> str | None:
        """The line as the terminal showed it: the paste's own framing taken off (None: a fence line)."""
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
        if line.lstrip()[:1] == ">":
            line, n = _QUOTE.subn("", line)
            self.stripped["quoting"] += n
        if "```" in line or "~~~" in line:
            if _CODE_FENCE.match(line):
                self.stripped["code fences"] += 1
                return None
            fenced = _FENCE_CLOSE.sub("", _FENCE_OPEN.sub("", line, count=1))
            if fenced != line:
                self.stripped["code fences"] += 1
                line = fenced
        if ("<" in line or ">" in line) and (marked := _MARKER.sub("", line)) != line:
            self.stripped["markers"] += 1  # an author's, after the line as the terminal showed it
            line = marked
        shape = self.shape
        if shape.bullets and line:
            bare = _BULLET.sub("", line, count=1)
            self.stripped["list markers"] += bare != line
            line = bare
        if shape.list_indent and line:
            unlisted = _unlist(line, shape.list_indent)
            self.stripped["markdown list indentation"] += unlisted != line
            line = unlisted
        if shape.indent and line[:1] == " ":
            spaces = len(line) - len(line.lstrip(" "))
            line = line[min(spaces, shape.indent) :]
            self.stripped["indentation"] += 1
        return line

    def tool_line(self, line: str) -> str | None:
        """One whole line of the tool's, without what a launcher or the author added; None when it is not the
        tool's (a prompt, an elision)."""
        head = line.lstrip()[:1]
        if head == "[" and line.startswith(("[pod/", "[node/")):  # a log source, never a rank: taken off always
            line = self._strip(_KUBECTL_PREFIX, line, "kubectl log prefixes")
            head = line.lstrip()[:1]
        if self.launchers:
            tag = self.shape.tag
            if tag is not None:
                line = self._strip(_LAUNCHER_TAGS[tag], line, tag)
                head = line.lstrip()[:1]
            if head == "[" and "]<std" in line[:24]:
                line = self._strip(_MPIRUN, line, "mpirun prefixes")
            elif head.isdigit() and ": " in line[:12]:
                line = self._strip(_SRUN_LABEL, line, "srun labels")
            head = line.lstrip()[:1]
        if head in ".…[(<-" and _ELISION.match(line):
            self.stripped["elisions"] += 1
            return None
        if ("$" in line or "#" in line or "%" in line or "> " in line) and (prompt := _PROMPT.match(line)):
            self.stripped["prompts and echoed commands"] += 1
            start = next(prompt.start(g) for g in "abcd" if prompt.group(g) is not None)
            self.commands.append(line[start:MAX_COMMAND].strip())  # noted for the readers: what was run
            del self.commands[:-MAX_COMMANDS]
            return None
        return line

    def clean(self, line: str) -> str | None:
        """One line cleaned on its own (no wrapped line rejoined): the tool's line, or None."""
        shown = self.unframe(line)
        return None if shown is None else self.tool_line(shown)

    def _strip(self, pattern: re.Pattern[str], line: str, what: str) -> str:
        new = pattern.sub("", line, count=1)
        if new != line:
            self.stripped[what] += 1
        return new

    def cleaned(self, lines: Iterable[str]) -> Iterator[str]:
        """The tool's lines, a wrapped line rejoined."""
        for _, line in self.numbered(enumerate(lines, start=1)):
            yield line

    def numbered(self, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        """(line number, tool's line) for (line number, raw line): a wrapped line is rejoined with the lines that
        follow it directly, under the number of its first."""
        width = self.shape.wrap
        shape = self.shape
        plain = not (width or shape.bullets or shape.list_indent or shape.indent or shape.tag)  # nothing to learn
        held: tuple[int, str, str] | None = None  # first number, the joined text, its last piece
        for number, raw in lines:
            if plain and len(raw) <= MAX_LINE and _UNTOUCHED.fullmatch(raw):
                self.lines += 1
                yield number, raw
                continue
            shown = self.unframe(raw)
            if shown is None:
                continue
            if held is not None:
                first, text, last = held
                if number == first + text.count("\n") + 1 and len(last) == width and _continues(last, shown):
                    held = (first, text + "\n" + shown, shown)
                    continue
                yield from self._release(held)
            held = (number, shown, shown) if width else None
            if held is None:
                tool = self.tool_line(shown)
                if tool is not None:
                    yield number, tool
        if held is not None:
            yield from self._release(held)

    def _release(self, held: tuple[int, str, str]) -> Iterator[tuple[int, str]]:
        number, text, _ = held
        pieces = text.count("\n")
        if pieces:
            self.stripped["hard wraps"] += pieces
        tool = self.tool_line(text.replace("\n", ""))
        if tool is not None:
            yield number, tool

    def notes(self) -> list[str]:
        out = [f"took off {what} ({n} line{'s' if n != 1 else ''})" for what, n in sorted(self.stripped.items()) if n]
        if self.cut:
            out.append(f"{self.cut} line(s) longer than {MAX_LINE} characters were cut")
        return out


class Cleaned(Iterator[str]):
    """A paste's lines as the tool printed them, carrying the commands its prompt lines ran (`$ mlxlink -d mlx5_0`
    is taken off as a prompt, and the device it names is not in the tool's output): a reader reads them with
    `noted_commands` once it has read the lines."""

    def __init__(self, paste: Paste, lines: Iterable[str]) -> None:
        self.paste = paste
        self._lines = paste.cleaned(lines)

    def __next__(self) -> str:
        return next(self._lines)

    @property
    def commands(self) -> list[str]:
        return self.paste.commands


def noted_commands(lines: Iterable[str]) -> list[str]:
    """The commands of the prompt lines the paste cleaner took off the lines read so far (none for plain lines)."""
    return list(lines.commands) if isinstance(lines, Cleaned) else []


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
