"""Catalogue regular expressions matched against one log line in time linear in the line.

NCCL's messages become regular expressions with a wildcard for each `%s` (`(.*?)`, `(.*)`). Searched as they are, a
line that holds a message's words but not the whole message costs quadratic time or worse: the search starts again
at every position and each wildcard runs to the end of the line from there (a 1 MB line took minutes). Matching the
stretches between the wildcards one after another gives the same yes or no in one pass.
"""

from __future__ import annotations

import re

# A wildcard between two stretches of a message (NCCL's %s): `(.*?)`, `(.*)`, `(?:.+?)`, or a bare `.*`.
_WILDCARD = re.compile(r"\((?:\?:)?\.([*+])\??\)|\.([*+])\??")
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")


class Ordered:
    """A regular expression for one line, matched as its stretches between wildcards, each found after the last.

    `regex.search` retries at every start position and lets each wildcard run to the end of the line from there,
    which is quadratic (cubic with two wildcards) in a long line that holds the message's words but not the whole
    message: a 1 MB line took minutes. The stretches found one after another, leftmost first, give the same yes or
    no on a line (a wildcard spans anything but a newline) in time linear in the line. A pattern with a top-level
    `|` is kept whole; a text with a newline is left to the regex."""

    __slots__ = ("pattern", "regex", "stretches", "tail")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.regex = re.compile(pattern, flags)
        parts = _split_wildcards(pattern)
        self.stretches: tuple[tuple[int, re.Pattern[str]], ...] | None = None
        self.tail = 0  # characters a trailing `.+` needs after the last stretch
        if parts is not None:
            stretches, self.tail = parts
            self.stretches = tuple((gap, re.compile(text, flags)) for gap, text in stretches)

    def search(self, text: str) -> bool:
        if self.stretches is None or "\n" in text:
            return self.regex.search(text) is not None
        pos = 0
        for gap, stretch in self.stretches:
            if pos + gap > len(text):
                return False
            m = stretch.search(text, pos + gap)
            if m is None:
                return False
            pos = m.end()
        return pos + self.tail <= len(text)


def _split_wildcards(pattern: str) -> tuple[list[tuple[int, str]], int] | None:
    """The pattern's stretches between top-level wildcards, each with the characters the wildcard before it needs
    (1 for `.+`), and what a trailing wildcard needs; None when it has a top-level `|` (its parts are not in order)."""
    if _BACKREFERENCE.search(pattern):  # a stretch cannot refer to a group of another
        return None
    stretches: list[tuple[int, str]] = []
    gap, start, i, depth, in_class = 0, 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern.startswith("]", i + 1) or pattern.startswith("^]", i + 1):
                i += pattern.index("]", i + 1) - i  # a leading ] is a member, not the end
        elif c == "|" and depth == 0:
            return None
        elif depth == 0 and (m := _WILDCARD.match(pattern, i)):
            if pattern[m.end() : m.end() + 1] in ("?", "*", "+", "{"):  # a wildcard repeated: keep the regex
                return None
            if pattern[start:i]:
                stretches.append((gap, pattern[start:i]))
                gap = 0
            gap += (m.group(1) or m.group(2)) == "+"
            start = i = m.end()
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    if pattern[start:]:
        stretches.append((gap, pattern[start:]))
        gap = 0
    return stretches, gap
